"""Packed state pools for the decode-step kernels (``mamba2/decode.py``, ``gdn/decode.py``).

A decode server keeps one state matrix per (slot, head) in a pool; a batch addresses it through a
slot index array (``slots[b] = -1`` marks a NULL/padded entry: the kernels then read nothing, write
no state and write a zero output; a live slot must not appear twice in one launch). ``PackedState`` is one copy of such a pool in its storage format:

=========  ===========================================  ===========================  ===============
format     data                                          scale                        gscale
=========  ===========================================  ===========================  ===============
fp32       float32  [S, H, R, C]                         —                            —
bf16, fp16 bfloat16/float16 [S, H, R, C] (±SR)           —                            —
fp8e4m3/   uint8 codes [S, H, R, C] (±SR)                —                            —
fp8e5m2
nvfp4      uint8 [S, H, R, C/2], element 2i low nibble   uint8 E4M3 bytes [S,H,R,C/16] float32 [S, H]
=========  ===========================================  ===========================  ===============

Only the slot axis may be strided (a paged pool); inside a slot the [H, R, C] block is contiguous.
The codes are exactly the ``QTensor`` fields of the built-in quantizers (``precision_lab.quant``),
which is how the torch references and the tests check them byte for byte.

Device side: ``load_state`` returns a head's [BR, BC] tile as fp32 (decoded in registers) and
``store_state`` rounds an fp32 tile and stores its codes. Element codecs are the integer-bit helpers
(``kernels/quant/codecs.py``); SR words come from ``scan_formats.sr_bits`` (quant/philox.py layout).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from precision_lab.kernels.quant import codecs as qc
from precision_lab.kernels.scan_formats import (
    C_BF16,
    C_E4M3,
    C_E5M2,
    C_FP16,
    C_FP32,
    C_NVFP4,
    FMT_FP32,
    FMT_NVFP4,
    KERNEL_FORMATS,
    sr_bits,
)

_STORAGE_DTYPE = {0: torch.float32, 1: torch.bfloat16, 2: torch.float16, 3: torch.uint8, 4: torch.uint8,
                  5: torch.uint8}


def format_code(name: str) -> tuple[int, bool]:
    """(kernel format code, stochastic) for a quantizer name; a clear error for other formats."""
    if name not in KERNEL_FORMATS:
        raise ValueError(f"format {name!r} has no Triton decode kernel; kernel formats: "
                         f"{', '.join(KERNEL_FORMATS)} (use the torch decode engine for others)")
    return KERNEL_FORMATS[name]


@dataclass
class PackedState:
    """One copy of a state pool in a storage format (see the module table for the layouts)."""

    fmt: str
    data: torch.Tensor
    scale: torch.Tensor | None
    gscale: torch.Tensor | None
    R: int
    C: int

    @property
    def code(self) -> int:
        return format_code(self.fmt)[0]

    @property
    def sr(self) -> bool:
        return format_code(self.fmt)[1]

    @classmethod
    def empty(cls, fmt: str, slots: int, H: int, R: int, C: int, device="cpu") -> PackedState:
        """An uninitialised pool (fill it with ``quantize`` or let a flush write it)."""
        code, _ = format_code(fmt)
        if code == FMT_NVFP4:
            if C % 16:
                raise ValueError(f"NVFP4 blocks run along the last axis in 16s: C = {C} is not a multiple of 16")
            return cls(fmt, torch.empty(slots, H, R, C // 2, dtype=torch.uint8, device=device),
                       torch.empty(slots, H, R, C // 16, dtype=torch.uint8, device=device),
                       torch.empty(slots, H, dtype=torch.float32, device=device), R, C)
        return cls(fmt, torch.empty(slots, H, R, C, dtype=_STORAGE_DTYPE[code], device=device), None, None, R, C)

    @classmethod
    def quantize(cls, x: torch.Tensor, fmt: str, rbits: torch.Tensor | None = None) -> PackedState:
        """Pack a float state ``x [S, H, R, C]`` with the format's torch quantizer (the reference).

        rbits: [S, H, R, C] integer words for SR formats (quant/philox.py ``state_rbits``).
        """
        code, sr = format_code(fmt)
        S, H, R, C = x.shape
        if code == FMT_FP32:
            return cls(fmt, x.to(torch.float32, copy=True).contiguous(), None, None, R, C)
        from precision_lab.quant import get_quantizer

        qt = get_quantizer(fmt).quantize(x.to(torch.float32), rbits=rbits if sr else None)
        data = qt.data
        if data.dtype == torch.float8_e4m3fn or data.dtype == torch.float8_e5m2:
            data = data.view(torch.uint8)
        if code == FMT_NVFP4:
            return cls(fmt, data.contiguous(), qt.scale.view(torch.uint8).contiguous(),
                       qt.global_scale.to(torch.float32).reshape(S, H).contiguous(), R, C)
        return cls(fmt, data.to(_STORAGE_DTYPE[code]).contiguous() if code <= 2 else data.contiguous(),
                   None, None, R, C)

    def dequantize(self) -> torch.Tensor:
        """fp32 [S, H, R, C] values the codes stand for (through the format's torch quantizer)."""
        code = self.code
        if code in (0, 1, 2):
            return self.data.to(torch.float32)
        from precision_lab.quant import QTensor, get_quantizer

        q = get_quantizer(self.fmt)
        shape = (*self.data.shape[:-1], self.C)
        if code == FMT_NVFP4:
            qt = QTensor(self.data, self.scale.view(torch.float8_e4m3fn), self.gscale, shape, self.fmt)
        else:
            qt = QTensor(self.data, None, None, shape, self.fmt)  # FP8 codes travel as uint8
        return q.dequantize(qt).to(torch.float32)

    def clone(self) -> PackedState:
        c = (lambda t: None if t is None else t.clone())
        return PackedState(self.fmt, self.data.clone(), c(self.scale), c(self.gscale), self.R, self.C)

    def kernel_args(self) -> tuple:
        """(data, scale, gscale, data slot stride, scale slot stride, gscale slot stride) for a launch.

        bf16/fp16 travel as int16 bit patterns (the codecs work on bits)."""
        d = self.data
        if d.dtype in (torch.bfloat16, torch.float16):
            d = d.view(torch.int16)
        if d.stride(-1) != 1 or d[0].is_contiguous() is False:
            raise ValueError("a state pool must be contiguous inside a slot ([H, R, C]); only the slot axis may be strided")
        sc = self.scale if self.scale is not None else d
        gs = self.gscale if self.gscale is not None else d
        return (d, sc, gs, d.stride(0), sc.stride(0) if self.scale is not None else 0,
                gs.stride(0) if self.gscale is not None else 0)


# ---------------------------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------------------------
@triton.jit
def load_state(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C,
               FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """fp32 tile [BR, BC] of head h, rows ``rows`` [BR], columns 0..BC-1 of the pool slot ``slot``
    (int64). Rows outside ``rmask`` and columns >= C read as 0."""
    row64 = (h * R + rows).to(tl.int64)
    mask = rmask[:, None] & (tl.arange(0, BC) < C)[None, :]
    if FMT == C_NVFP4:
        cb = tl.arange(0, BC // 2)
        cs = tl.arange(0, BC // 16)
        mb = rmask[:, None] & (cb[None, :] < C // 2)
        packed = tl.load(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], mask=mb, other=0)
        ms = rmask[:, None] & (cs[None, :] < C // 16)
        scb = tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + cs[None, :], mask=ms, other=0)
        s_dec = tl.load(gs_ptr + slot * s_gs + h)
        nb: tl.constexpr = BR * (BC // 16)
        vals = qc.nvfp4_dequantize_blocks(tl.reshape(packed.to(tl.int32), (nb, 8)),
                                          tl.reshape(scb.to(tl.int32), (nb,)), s_dec)
        return tl.where(mask, tl.reshape(vals, (BR, BC)), 0.0)
    else:
        cols = tl.arange(0, BC)
        v = tl.load(d_ptr + slot * s_d + row64[:, None] * C + cols[None, :], mask=mask, other=0)
        if FMT == C_FP32:
            return v
        elif FMT == C_BF16:
            return qc.decode_bf16(v.to(tl.int32) & 0xFFFF)
        elif FMT == C_FP16:
            return qc.decode_fp16(v.to(tl.int32) & 0xFFFF)
        elif FMT == C_E4M3:
            return tl.where(mask, qc.decode_e4m3(v.to(tl.int32)), 0.0)
        else:
            tl.static_assert(FMT == C_E5M2, "unknown state format code")
            return tl.where(mask, qc.decode_e5m2(v.to(tl.int32)), 0.0)


@triton.jit
def _e2m1_pairs_hw(packed):
    """GPU only (inline PTX; the interpreter cannot run it): NVFP4 bytes → (even, odd) element values
    × 2^-6 as fp32. Each nibble (sign s, exponent e, mantissa m) becomes the E4M3 byte
    ``s<<7 | (nibble & 7)<<2``: exponent field e, mantissa m00, so its value is the E2M1 value ·
    2^-6 exactly (E2M1's subnormal 0.5 lands on E4M3's subnormal 2^-7). The hardware then converts
    E4M3 pairs to f16 pairs (cvt.rn.f16x2.e4m3x2, sm_89+) — about 2 instructions per element
    instead of the ~10 of the integer decode. Bytes go 4 per call (pack=4)."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 t, lo, hi, f0, f1, f2, f3;
        .reg .b16 l0, l1, h0, h1, a0, a1, a2, a3, b0, b1, b2, b3;
        shl.b32 t, $8, 4;
        and.b32 t, t, 0x80808080;
        shl.b32 lo, $8, 2;
        and.b32 lo, lo, 0x1C1C1C1C;
        or.b32 lo, lo, t;
        shr.b32 t, $8, 2;
        and.b32 t, t, 0x1C1C1C1C;
        and.b32 hi, $8, 0x80808080;
        or.b32 hi, hi, t;
        mov.b32 {l0, l1}, lo;
        mov.b32 {h0, h1}, hi;
        cvt.rn.f16x2.e4m3x2 f0, l0;
        cvt.rn.f16x2.e4m3x2 f1, l1;
        cvt.rn.f16x2.e4m3x2 f2, h0;
        cvt.rn.f16x2.e4m3x2 f3, h1;
        mov.b32 {a0, a1}, f0;
        mov.b32 {a2, a3}, f1;
        mov.b32 {b0, b1}, f2;
        mov.b32 {b2, b3}, f3;
        cvt.f32.f16 $0, a0;
        cvt.f32.f16 $1, a1;
        cvt.f32.f16 $2, a2;
        cvt.f32.f16 $3, a3;
        cvt.f32.f16 $4, b0;
        cvt.f32.f16 $5, b1;
        cvt.f32.f16 $6, b2;
        cvt.f32.f16 $7, b3;
        }
        """,
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
        args=[packed], dtype=(tl.float32, tl.float32), is_pure=True, pack=4)


@triton.jit
def read_state_dot(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, v_ptr, w_ptr,
                   FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr, TWO: tl.constexpr):
    """``(S v, S w)`` for the tile's rows (fp32 [BR] each; S w only with TWO, else 0), v and w = C
    values at ``v_ptr`` / ``w_ptr`` (any float dtype), read straight from the stored codes: a
    read-only step needs only these products (Mamba-2: S C; GDN: S q̃ and S k from one read), so
    NVFP4 never builds the fp32 tile of scaled values — it multiplies each byte's two E2M1 values
    with the vector's even and odd entries and scales that by the byte's block scale (E4M3; the
    per-head s_dec once per row). Arguments as ``load_state``; HW (compiled GPU kernels only)
    decodes FP8/FP4 with the hardware E4M3→f16 conversion instead of the integer codecs (same
    values; the integer path is what the interpreter runs). The sums run in another order than
    ``load_state`` + ``tl.sum`` (same value up to fp32 rounding)."""
    row64 = (h * R + rows).to(tl.int64)
    if FMT == C_NVFP4:
        # [BR, BC/2] byte tiles: each byte's block scale is gathered (8 bytes share an address, which
        # the compiler loads once) and applied per byte (measured faster on the H200 than a
        # [BR, BC/16, 8] block tile that scales each block's partial sum once: 163 vs 199 µs)
        cb = tl.arange(0, BC // 2)
        m_b = cb < C // 2
        m2 = rmask[:, None] & m_b[None, :]
        packed = tl.load(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], mask=m2, other=0)
        scb = tl.load(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + (cb // 8)[None, :], mask=m2, other=0)
        if HW:
            e_even, e_odd = _e2m1_pairs_hw(packed)
            unit = 64.0
            block_scale = scb.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            p32 = packed.to(tl.int32)
            e_even = qc.decode_e2m1(p32 & 0xF)
            e_odd = qc.decode_e2m1(p32 >> 4)
            unit = 1.0
            block_scale = qc.decode_e4m3(scb.to(tl.int32))
        s_dec = tl.load(gs_ptr + slot * s_gs + h) * unit
        v_even = tl.load(v_ptr + 2 * cb, mask=m_b, other=0).to(tl.float32)
        v_odd = tl.load(v_ptr + 2 * cb + 1, mask=m_b, other=0).to(tl.float32)
        sv = tl.sum((e_even * v_even[None, :] + e_odd * v_odd[None, :]) * block_scale, 1) * s_dec
        if TWO:
            w_even = tl.load(w_ptr + 2 * cb, mask=m_b, other=0).to(tl.float32)
            w_odd = tl.load(w_ptr + 2 * cb + 1, mask=m_b, other=0).to(tl.float32)
            sw = tl.sum((e_even * w_even[None, :] + e_odd * w_odd[None, :]) * block_scale, 1) * s_dec
        else:
            sw = 0.0
        return sv, sw
    else:
        cols = tl.arange(0, BC)
        if HW and FMT == C_E4M3:
            m = rmask[:, None] & (cols < C)[None, :]
            codes = tl.load(d_ptr + slot * s_d + row64[:, None] * C + cols[None, :], mask=m, other=0)
            tile = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            tile = load_state(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C, FMT, BR, BC)
        sv = tl.sum(tile * tl.load(v_ptr + cols, mask=cols < C, other=0).to(tl.float32)[None, :], 1)
        if TWO:
            sw = tl.sum(tile * tl.load(w_ptr + cols, mask=cols < C, other=0).to(tl.float32)[None, :], 1)
        else:
            sw = 0.0
        return sv, sw


@triton.jit
def store_state(x, d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, rmask, R, C,
                seed, seq, event, COPY: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
                BR: tl.constexpr, BC: tl.constexpr):
    """Round the fp32 tile x [BR, BC] to FMT (SR words from the counter of (seq, h, event, element))
    and store its codes. NVFP4 needs the whole head in the tile (BR >= R): its global scale is the
    amax of the matrix. Rows outside ``rmask`` and columns >= C are not stored."""
    row64 = (h * R + rows).to(tl.int64)
    cols = tl.arange(0, BC)
    mask = rmask[:, None] & (cols < C)[None, :]
    if SR:
        elem = (rows[:, None] * C + cols[None, :]).to(tl.int64)
        r = sr_bits(seed, seq, h, event, elem, COPY)
    else:
        r = 0
    if FMT == C_NVFP4:
        x = tl.where(mask, x, 0.0)
        amax = tl.max(tl.max(qc.abs_bits(x), 1), 0)  # integer max: a NaN state stays visible
        s_enc, s_dec = qc.nvfp4_global_scales(amax)
        nb: tl.constexpr = BR * (BC // 16)
        if SR:
            rb = tl.reshape(r, (nb, 16))
        else:
            rb = 0
        codes, scale_codes = qc.nvfp4_quantize_blocks(tl.reshape(x, (nb, 16)), s_enc, s_dec, rb, SR)
        packed = tl.reshape(qc.nvfp4_pack(codes), (BR, BC // 2))
        cb = tl.arange(0, BC // 2)
        cs = tl.arange(0, BC // 16)
        tl.store(d_ptr + slot * s_d + row64[:, None] * (C // 2) + cb[None, :], packed.to(tl.uint8),
                 mask=rmask[:, None] & (cb[None, :] < C // 2))
        tl.store(sc_ptr + slot * s_sc + row64[:, None] * (C // 16) + cs[None, :],
                 tl.reshape(scale_codes, (BR, BC // 16)).to(tl.uint8),
                 mask=rmask[:, None] & (cs[None, :] < C // 16))
        tl.store(gs_ptr + slot * s_gs + h, s_dec, mask=tl.max(rmask.to(tl.int32), 0) > 0)
    else:
        p = d_ptr + slot * s_d + row64[:, None] * C + cols[None, :]
        if FMT == C_FP32:
            tl.store(p, x, mask=mask)
        elif FMT == C_BF16:
            tl.store(p, qc.encode_bf16(x, r, SR).to(tl.int16), mask=mask)
        elif FMT == C_FP16:
            tl.store(p, qc.encode_fp16(x, r, SR).to(tl.int16), mask=mask)
        elif FMT == C_E4M3:
            tl.store(p, qc.encode_e4m3(x, r, SR).to(tl.uint8), mask=mask)
        else:
            tl.static_assert(FMT == C_E5M2, "unknown state format code")
            tl.store(p, qc.encode_e5m2(x, r, SR).to(tl.uint8), mask=mask)


@triton.jit
def softplus(v):
    """softplus as the decode kernels compute it (the references write the same expression)."""
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))


def torch_softplus(v: torch.Tensor) -> torch.Tensor:
    """The kernels' softplus in torch (same expression, same threshold)."""
    return torch.where(v > 20.0, v, torch.log(1.0 + torch.exp(v)))


def sr_seed(seed: int, layer: int) -> int:
    from precision_lab.quant.philox import layer_seed

    return layer_seed(seed, layer)


def rbits_for(shape, fmt: str, *, seed: int, layer: int, seq_ids: torch.Tensor, events: torch.Tensor,
              copy: int) -> torch.Tensor | None:
    """SR words [B, H, R, C] for one write of a batch of states, or None for an RNE format."""
    if not format_code(fmt)[1]:
        return None
    from precision_lab.quant.philox import state_rbits

    B, H, R, C = shape
    return state_rbits(seed, layer, seq_ids.cpu().view(B, 1), torch.arange(H).view(1, H),
                       events.cpu().view(B, 1), (R, C), copy)
