"""Bit-level rounding shared by every format: round to nearest even (RNE) and the 16-bit
stochastic rounding (SR) convention of docs/design.md §5, written once on integer bit patterns.

Why integers: fp32→fp8 casts differ between torch versions (saturate vs NaN on overflow) and
Triton's interpreter rounds them wrongly (docs/pitfalls.md §1); there is no FP4 cast at all. Working on the
IEEE bit pattern makes every rounding exact and identical on CPU and GPU, and is the arithmetic
the Triton codecs (kernels/quant/codecs.py) reproduce.

Element formats are described by ``FloatFormat`` (sign, E exponent bits, M mantissa bits, bias,
special codes). ``round_to_code(x, fmt, rbits)`` maps a float32 or float64 tensor to integer codes
of ``fmt`` in ONE rounding step; ``decode(codes, fmt)`` maps codes back to float32 (exact: every
format here is a subset of fp32).

The algorithm, for |x| with significand ``sig`` (implicit bit included) and unbiased exponent
``e_x`` in the source format (fp32: 23 fraction bits; fp64: 52):
    e     = max(e_x, emin)                      target exponent (emin = 1 - bias: subnormals share it)
    shift = src_fraction_bits - M + (e - e_x)   source bits that fall below the target's ulp at e
    q     = sig >> shift                        truncated target significand, in units of 2^(e - M)
    rem   = sig mod 2^shift                     the dropped part; frac = rem / 2^shift
    RNE:  q += rem > half or (rem == half and q odd)
    SR:   q += floor(frac · 2^16) + (r & 0xFFFF) >= 2^16        (docs/design.md §5)
    code  = ((e - emin) << M) + q               a carry out of the significand lands in the exponent
                                                field by itself (also subnormal → normal, max → inf)
Special values (the policy every format documents in ``precision-lab formats``):
    * NaN → the format's canonical quiet NaN (sign kept); formats without NaN (E2M1) raise.
    * Saturating ("satfinite") formats (E4M3, E5M2, E2M1) clamp |x| to max finite BEFORE rounding,
      so ±inf → ±max and SR can never leave the finite range (max is a fixed point).
    * IEEE formats (fp32, bf16, fp16) keep ±inf and overflow like an IEEE cast: RNE gives inf from
      max + half an ulp on; SR between max and 2^(emax+1) gives max or inf, the next grid point.
    * The sign is kept, so negative values that round to zero give -0.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

import torch

__all__ = [
    "BF16", "E2M1", "E4M3", "E5M2", "FP16", "FP32", "ELEMENT_FORMATS", "FloatFormat",
    "SR_BITS", "decode", "pack_nibbles", "round_to_code", "unpack_nibbles",
]

SR_BITS = 16  # random bits per element consumed by stochastic rounding (docs/design.md §5)
_SR_ONE = 1 << SR_BITS


@dataclass(frozen=True)
class FloatFormat:
    """A sign-exponent-mantissa element format.

    exp_bits/man_bits/bias: the usual fields. max_code: magnitude code of the largest finite value.
    inf_code / nan_code: magnitude codes of +inf and of the canonical NaN (None if the format has
    none). saturate: clamp to ±max before rounding (satfinite) instead of overflowing to inf.
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_code: int
    inf_code: int | None
    nan_code: int | None
    saturate: bool

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp_bits + self.man_bits)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal (subnormals use the same exponent)."""
        return 1 - self.bias

    @property
    def max_value(self) -> float:
        e, m = self.max_code >> self.man_bits, self.max_code & ((1 << self.man_bits) - 1)
        return (1 + m / (1 << self.man_bits)) * 2.0 ** (e - self.bias)


FP32 = FloatFormat("fp32", 8, 23, 127, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, saturate=False)
BF16 = FloatFormat("bf16", 8, 7, 127, 0x7F7F, 0x7F80, 0x7FC0, saturate=False)
FP16 = FloatFormat("fp16", 5, 10, 15, 0x7BFF, 0x7C00, 0x7E00, saturate=False)
# OCP FP8: E4M3 "fn" has no inf and one NaN per sign (S.1111.111); max 448.
E4M3 = FloatFormat("e4m3", 4, 3, 7, 0x7E, None, 0x7F, saturate=True)
# E5M2 is IEEE-like (inf = S.11111.00); it is still clamped to max (57344), as docs/design.md §5 specifies for FP8.
E5M2 = FloatFormat("e5m2", 5, 2, 15, 0x7B, 0x7C, 0x7E, saturate=True)
# OCP E2M1 (the FP4 element of NVFP4/MXFP4): values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no inf, no NaN.
E2M1 = FloatFormat("e2m1", 2, 1, 1, 0x7, None, None, saturate=True)

ELEMENT_FORMATS = {f.name: f for f in (FP32, BF16, FP16, E4M3, E5M2, E2M1)}


@dataclass(frozen=True)
class _Source:
    """Bit layout of the input dtype (rounding happens from its exact value, once)."""

    frac_bits: int
    bias: int
    exp_all_ones: int
    int_dtype: torch.dtype

    def bits_of(self, value: float) -> int:
        if self.frac_bits == 23:
            return struct.unpack("<I", struct.pack("<f", value))[0]
        return struct.unpack("<Q", struct.pack("<d", value))[0]


_SOURCES = {
    torch.float32: _Source(23, 127, 0xFF, torch.int32),
    torch.float64: _Source(52, 1023, 0x7FF, torch.int64),
}


def _check_rbits(rbits: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if not isinstance(rbits, torch.Tensor) or rbits.dtype.is_floating_point or rbits.dtype.is_complex \
            or rbits.dtype == torch.bool:
        raise TypeError(f"rbits must be an integer tensor (low {SR_BITS} bits used), got "
                        f"{getattr(rbits, 'dtype', type(rbits).__name__)}")
    if rbits.shape != shape:
        raise ValueError(f"rbits has shape {tuple(rbits.shape)}; it needs one value per element, shape {tuple(shape)}")
    return rbits.to(torch.int64) & (_SR_ONE - 1)


def round_to_code(x: torch.Tensor, fmt: FloatFormat, rbits: torch.Tensor | None = None) -> torch.Tensor:
    """Round x to ``fmt`` in one step and return the codes.

    x: float32 or float64 tensor, any shape. rbits: None for RNE, or an integer tensor of x's shape
    for stochastic rounding (low 16 bits used). Returns int32 codes of x's shape (sign in bit
    ``fmt.bits - 1``). Raises ValueError on NaN for a format without NaN.
    """
    src = _SOURCES.get(x.dtype)
    if src is None:
        raise TypeError(f"round_to_code takes float32 or float64, got {x.dtype}")
    r = None if rbits is None else _check_rbits(rbits, x.shape).to(x.device)
    b = x.contiguous().view(src.int_dtype)
    if src.frac_bits == fmt.man_bits:  # fp32 → fp32: nothing to round; NaNs become the canonical NaN
        nan_code = torch.where(b < 0, -(1 << 31) | fmt.nan_code, fmt.nan_code).to(torch.int32)
        return torch.where(torch.isnan(x), nan_code, b)
    # fp32 input to a <=16-bit format fits int32 (half the memory traffic of int64)
    it = src.int_dtype if fmt.bits <= 16 else torch.int64
    smax = 30 if it == torch.int32 else 62  # shifts are clamped here; sig < 2^24 (2^53) < 2^smax
    b = b.to(it)
    sign = b < 0
    a = b & ((1 << (8 * src.int_dtype.itemsize - 1)) - 1)
    is_nan = a > (src.exp_all_ones << src.frac_bits)
    if fmt.nan_code is None and bool(is_nan.any()):
        raise ValueError(f"{fmt.name} has no NaN encoding and the input holds {int(is_nan.sum())} NaN value(s)")
    if fmt.saturate:  # satfinite: |x| (incl. inf) clamps to max; magnitudes order like their bit patterns
        a = torch.clamp(a, max=src.bits_of(fmt.max_value))

    m = fmt.man_bits
    e_field = a >> src.frac_bits
    sig = torch.where(e_field > 0, (a & ((1 << src.frac_bits) - 1)) | (1 << src.frac_bits), a)
    e_x = torch.clamp(e_field, min=1) - src.bias  # source subnormals share the smallest normal exponent
    e = torch.clamp(e_x, min=fmt.emin)
    shift = (src.frac_bits - m) + (e - e_x)  # >= 13: the source bits below the target's ulp
    # A shift past the significand drops everything; clamping keeps shifts defined and gives the same
    # q = 0 and the same RNE decision (sig < half) as the true shift.
    shift_c = torch.clamp(shift, max=smax)
    q = sig >> shift_c
    if r is None:
        # RNE as "add half - 1 + lsb(q), truncate": carries iff rem > half, or rem == half and q is odd
        q = (sig + ((1 << (shift_c - 1)) - 1 + (q & 1))) >> shift_c
    else:
        # floor(frac · 2^16): the 16 source bits just below the target ulp (zero-filled if fewer)
        k = shift - SR_BITS
        frac16 = torch.where(k >= 0, sig >> torch.clamp(k, min=0, max=smax), sig << torch.clamp(-k, min=0))
        q = q + (((frac16 & (_SR_ONE - 1)) + r.to(it)) >> SR_BITS)
    code = ((e - fmt.emin) << m) + q  # a carry out of the significand lands in the exponent field
    if fmt.inf_code is not None and not fmt.saturate:
        code = torch.clamp(code, max=fmt.inf_code)  # IEEE overflow (inputs past 2^(emax+1) and inf)
    if fmt.nan_code is not None:
        code = torch.where(is_nan, fmt.nan_code, code)
    code = torch.where(sign, code | fmt.sign_bit, code)
    return code.to(torch.int32)


@cache
def _decode_table(fmt: FloatFormat) -> torch.Tensor:
    """float32 value of every code of a format with at most 16 bits."""
    codes = torch.arange(1 << fmt.bits, dtype=torch.int64)
    mag = codes & (fmt.sign_bit - 1)
    e_field = mag >> fmt.man_bits
    mant = mag & ((1 << fmt.man_bits) - 1)
    sig = torch.where(e_field > 0, mant | (1 << fmt.man_bits), mant).to(torch.float64)
    exp = torch.clamp(e_field, min=1) - fmt.bias - fmt.man_bits
    val = torch.ldexp(sig, exp.to(torch.float64))
    if fmt.inf_code is not None:
        val = torch.where(mag == fmt.inf_code, torch.inf, val)
        val = torch.where(mag > fmt.inf_code, torch.nan, val)
    elif fmt.nan_code is not None:
        val = torch.where(mag > fmt.max_code, torch.nan, val)
    val = torch.where(codes & fmt.sign_bit != 0, -val, val)
    return val.to(torch.float32)


def decode(codes: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Codes of ``fmt`` (any integer dtype, values in [0, 2^bits)) → float32 values, exactly."""
    if fmt.bits == 32:
        return codes.to(torch.int32).view(torch.float32).clone()
    table = _decode_table(fmt).to(codes.device)
    return table[codes.to(torch.int64) & ((1 << fmt.bits) - 1)]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes [..., C] (C even) → uint8 [..., C/2]; element 2i in the low nibble (docs/design.md §5)."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_nibbles(data: torch.Tensor) -> torch.Tensor:
    """uint8 [..., C/2] → 4-bit codes uint8 [..., C] (inverse of ``pack_nibbles``)."""
    lo, hi = data & 0xF, data >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)
