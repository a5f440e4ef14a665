"""OCP MX formats: mxfp8 (E4M3 elements) and mxfp4 (E2M1 elements), one E8M0 power-of-two scale X
per block of 32 consecutive elements of the last axis; code = elem_satfinite(x / X), x̂ = value · X.

Two rules for X (the E8M0 exponent is stored biased by 127 as uint8; 255 = NaN is never produced):
    floor  — OCP MX v1.0 §6.3: X = 2^(floor(log2 amax) - emax_elem), emax_elem = 8 (E4M3), 2 (E2M1).
             The block maximum then lands in [2^emax, 2^(emax+1)) and is CLIPPED when above the
             element max (E4M3: (448, 512); E2M1: (6, 8)) — up to 25% error on the block's largest
             element for E2M1.
    rceil  — X = 2^ceil(log2(amax · fp32(1/elem_max))) (the product rounded to fp32, then its exponent
             rounded up when it has fraction bits): the rule NVIDIA's hardware conversion
             (cvt.rp.satfinite.ue8m0) and Transformer Engine use. The block maximum never clips
             (beyond the fp32 rounding of the product), at the cost of at most one binade of range.
Default: rceil, because it never clips the block's largest element, which matters most for a
recurrent state whose large entries carry the output; floor is available as ``scale_rule="floor"``
or the names mxfp8-floor / mxfp4-floor. Zero blocks get X = 2^-127 (code 0); exponents are
clamped to [-127, 127]. Non-finite input raises ValueError (same policy as NVFP4).
Registered: mxfp8, mxfp4, mxfp8-floor, mxfp4-floor, each also with -sr (SR on the elements only).
"""
from __future__ import annotations

from typing import Any

import torch

from ..base import QTensor, Quantizer
from ..registry import register_quantizer
from ..rounding import E2M1, E4M3, E5M2, decode, pack_nibbles, round_to_code, unpack_nibbles
from ._common import as_float, check_divisible, check_finite, check_qtensor, resolve_rbits

BLOCK = 32
E8M0_BIAS = 127
RULES = ("rceil", "floor")
_ELEMS = {"e4m3": E4M3, "e5m2": E5M2, "e2m1": E2M1}
_EMAX = {"e4m3": 8, "e5m2": 15, "e2m1": 2}  # exponent of each element format's largest normal


def e8m0_floor(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """OCP rule: biased E8M0 exponent floor(log2 amax) - emax_elem + 127, clamped to [0, 254]; 0 for amax = 0."""
    _, e = torch.frexp(amax.to(torch.float64))  # amax = m · 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
    code = torch.clamp(e.to(torch.int64) - 1 - emax_elem + E8M0_BIAS, 0, 254)
    return torch.where(amax == 0, torch.zeros_like(code), code)


def e8m0_rceil(amax: torch.Tensor, elem_max: float) -> torch.Tensor:
    """Round-up rule: exponent of v = fp32(amax · fp32(1/elem_max)), +1 if v has fraction bits; clamped to 254."""
    v = amax * torch.tensor(1.0 / elem_max, dtype=torch.float32, device=amax.device)
    bits = v.view(torch.int32).to(torch.int64)
    exp, frac = bits >> 23, bits & 0x7FFFFF
    return torch.clamp(exp + (frac != 0).to(torch.int64), max=254)


def pow2(code: torch.Tensor, negate: bool = False) -> torch.Tensor:
    """2^(±(code - 127)) as float32 (exact, down to the fp32 subnormal 2^-127)."""
    k = code.to(torch.float64) - E8M0_BIAS
    return torch.ldexp(torch.ones_like(k), -k if negate else k).to(torch.float32)


class MXQuantizer(Quantizer):
    """MX format with blocks of 32 along the last axis.

    QTensor: data uint8 codes [..., C] (mxfp8) or packed nibbles [..., C/2] (mxfp4, element 2i low);
    scale uint8 E8M0 exponents [..., C/32]; global_scale None.
    """

    def __init__(self, element: str = "e4m3", sr: bool = False, scale_rule: str = "rceil"):
        if element not in _ELEMS:
            raise ValueError(f"MX element must be one of {', '.join(_ELEMS)}, got {element!r}")
        if scale_rule not in RULES:
            raise ValueError(f"MX scale_rule must be one of {RULES}, got {scale_rule!r}")
        self.element, self.elem, self.sr, self.scale_rule = element, _ELEMS[element], bool(sr), scale_rule
        base = {"e4m3": "mxfp8", "e5m2": "mxfp8e5m2", "e2m1": "mxfp4"}[element]
        self.name = base + ("-floor" if scale_rule == "floor" else "") + ("-sr" if sr else "")
        self.stochastic = self.sr
        self.rounding = "sr" if sr else "rne"
        self.block_size = BLOCK
        self.bits_per_element = self.elem.bits + 8 / BLOCK
        self.scale_format = f"e8m0 per {BLOCK} ({scale_rule})"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "special": "NaN/Inf input: error; zero block: scale 2^-127"}

    def quantize(self, x: torch.Tensor, rbits: torch.Tensor | None = None, seed: int | None = None) -> QTensor:
        """x: float [..., C] with C a multiple of 32 (float64 rounded to fp32 first) → QTensor (class doc)."""
        shape = tuple(x.shape)
        x = as_float(x, self.name, keep_fp64=False)
        rb = resolve_rbits(self, x, rbits, seed)
        check_finite(x, self.name)
        if x.dim() == 0:
            raise ValueError(f"{self.name}: expected a tensor [..., C], got a scalar")
        c = shape[-1]
        check_divisible(c, BLOCK, "last-axis (C)", self.name)
        xb = x.reshape(*shape[:-1], c // BLOCK, BLOCK)
        amax = xb.abs().amax(dim=-1)
        if self.scale_rule == "floor":
            code = e8m0_floor(amax, _EMAX[self.element])
        else:
            code = e8m0_rceil(amax, self.elem.max_value)
        y = (xb * pow2(code, negate=True).unsqueeze(-1)).reshape(shape)  # exact power-of-two scaling
        codes = round_to_code(y, self.elem, rb)
        data = pack_nibbles(codes) if self.elem.bits == 4 else codes.to(torch.uint8)
        return QTensor(data=data, scale=code.to(torch.uint8), global_scale=None, shape=shape, format=self.name)

    def dequantize(self, qt: QTensor) -> torch.Tensor:
        """QTensor → float32 of the original shape: value(code) · 2^(scale - 127)."""
        check_qtensor(self, qt)
        codes = unpack_nibbles(qt.data) if self.elem.bits == 4 else qt.data
        c = qt.shape[-1]
        vals = decode(codes, self.elem).reshape(*qt.shape[:-1], c // BLOCK, BLOCK)
        return (vals * pow2(qt.scale).unsqueeze(-1)).reshape(qt.shape)


def _factory(**fixed: Any):
    def make(**options: Any) -> MXQuantizer:
        return MXQuantizer(**{**fixed, **options})

    return make


for _name, _elem in (("mxfp8", "e4m3"), ("mxfp4", "e2m1")):
    for _rule in RULES:
        for _sr in (False, True):
            _full = _name + ("-floor" if _rule == "floor" else "") + ("-sr" if _sr else "")
            register_quantizer(_full, _factory(element=_elem, sr=_sr, scale_rule=_rule))
