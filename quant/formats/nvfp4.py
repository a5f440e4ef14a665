"""NVFP4: E2M1 elements, an E4M3 scale per block of 16 along the last axis, an fp32 global scale.

The chain is NVIDIA's reference, pinned by docs/design.md §5; every step is one fp32 operation (RNE), in
this order, so a kernel doing the same operations agrees bit for bit:

    amax   = max |x| over the global-scale group        (default: the whole matrix [R, C])
    S_enc  = min(2688 / amax, FLT_MAX), or 1 if amax is 0      (2688 = 448 · 6)
    S_dec  = 1 / S_enc                                   → QTensor.global_scale (fp32)
    s      = e4m3_satfinite_rne(block_amax · (S_enc · fp32(1/6)))   → QTensor.scale (float8_e4m3fn)
             (S_enc · fp32(1/6) rounds once per group, then the product once: NOT (block_amax/6)·S_enc,
             which rounds twice and gives other bytes on a few percent of blocks; no lower clamp,
             so E4M3 subnormals and 0 are legal block scales)
    enc    = min(1 / (f32(s) · S_dec), FLT_MAX)          (a zero block scale gives FLT_MAX)
    code   = e2m1_satfinite(x · enc)                     RNE, or SR with the 16-bit convention
    x̂      = value(code) · (f32(s) · S_dec)
Layout: data uint8 [..., C/2] with element 2i in the low nibble; scale [..., R, C/16]; global
scale [...] (one per leading index of [..., R, C]).

Options (``get_quantizer("nvfp4", granularity=..., ...)`` or the registered names):
    granularity="matrix" (default) | "row" | "tile" — the group that shares S_enc/S_dec:
        matrix → global_scale [...]; row → [..., R]; tile → [..., R/tr, C/tc] with ``tile=(tr, tc)``.
    block_rows=1 (default) | 16 — 16 gives 2-D 16×16 block scales (one E4M3 scale per 16 rows ×
        16 columns; scale [..., R/16, C/16]), the tile layout that makes W and Wᵀ quantize alike.
    sr=True — E2M1 stochastic rounding (scales are always RNE).
Registered: nvfp4, nvfp4-row, nvfp4-2d, nvfp4-2d-row, each also with -sr.
Non-finite input raises ValueError (E2M1 has no NaN/Inf; a NaN state is a bug to surface).
"""
from __future__ import annotations

from typing import Any

import torch

from ..base import QTensor, Quantizer
from ..registry import register_quantizer
from ..rounding import E2M1, E4M3, decode, pack_nibbles, round_to_code, unpack_nibbles
from ._common import (
    FLT_MAX,
    as_float,
    check_divisible,
    check_finite,
    check_not_empty,
    check_qtensor,
    resolve_rbits,
    split_matrix,
)

BLOCK = 16
E4M3_X_E2M1_MAX = 2688.0  # 448 · 6: the largest magnitude a block scale and an element can express together
GRANULARITIES = ("matrix", "row", "tile")


def group_amax(a: torch.Tensor, gr: int, gc: int) -> torch.Tensor:
    """max over non-overlapping gr × gc tiles of the last two axes: [..., R, C] → [..., R/gr, C/gc]."""
    *lead, r, c = a.shape
    return a.reshape(*lead, r // gr, gr, c // gc, gc).amax(dim=(-3, -1))


def expand(t: torch.Tensor, fr: int, fc: int) -> torch.Tensor:
    """Repeat each entry of the last two axes fr × fc times (inverse shape map of ``group_amax``)."""
    return t.repeat_interleave(fr, dim=-2).repeat_interleave(fc, dim=-1)


class NVFP4Quantizer(Quantizer):
    """NVFP4 per docs/design.md §5 (see the module docstring for the chain, layout and options)."""

    scale_format_base = "e4m3 per {b} + fp32 per {g}"

    def __init__(self, sr: bool = False, granularity: str = "matrix", tile: tuple[int, int] = (16, 64),
                 block_rows: int = 1):
        if granularity not in GRANULARITIES:
            raise ValueError(f"nvfp4 granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if block_rows not in (1, BLOCK):
            raise ValueError(f"nvfp4 block_rows must be 1 (1×16 blocks) or 16 (16×16 blocks), got {block_rows}")
        tr, tc = (int(v) for v in tile)
        if granularity == "tile" and (tr % block_rows or tc % BLOCK or tr < 1 or tc < 1):
            raise ValueError(f"nvfp4 tile {tile} must be a whole number of {block_rows}×{BLOCK} blocks")
        self.sr, self.granularity, self.tile, self.block_rows = bool(sr), granularity, (tr, tc), block_rows
        parts = ["nvfp4"] + (["2d"] if block_rows == BLOCK else []) + {
            "matrix": [], "row": ["row"], "tile": [f"tile{tr}x{tc}"]}[granularity] + (["sr"] if sr else [])
        self.name = "-".join(parts)
        self.stochastic = self.sr
        self.rounding = "sr" if sr else "rne"
        self.block_size = BLOCK * block_rows
        self.bits_per_element = 4 + 8 / self.block_size
        blk = "16" if block_rows == 1 else "16x16"
        grp = {"matrix": "matrix", "row": "row" if block_rows == 1 else "16 rows", "tile": f"{tr}x{tc} tile"}[granularity]
        self.scale_format = f"e4m3 per {blk} + fp32 per {grp}"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "special": "NaN/Inf input: error; zero block: scale 0"}

    def _groups(self, r: int, c: int) -> tuple[int, int]:
        return {"matrix": (r, c), "row": (self.block_rows, c), "tile": self.tile}[self.granularity]

    def _check_shape(self, r: int, c: int) -> None:
        check_divisible(c, BLOCK, "last-axis (C)", self.name)
        check_divisible(r, self.block_rows, "row (R)", self.name)
        gr, gc = self._groups(r, c)
        check_divisible(r, gr, "row (R)", self.name + " tile")
        check_divisible(c, gc, "last-axis (C)", self.name + " tile")

    def quantize(self, x: torch.Tensor, rbits: torch.Tensor | None = None, seed: int | None = None) -> QTensor:
        """x: float [..., R, C] (C a multiple of 16; float64 is rounded to fp32 first) → QTensor:
        data uint8 [..., C/2], scale float8_e4m3fn [..., R, C/16] (2-D: [..., R/16, C/16]),
        global_scale fp32 [...] (row: [..., R], 2-D row: [..., R/16]; tile: [..., R/tr, C/tc])."""
        shape = tuple(x.shape)
        x = as_float(x, self.name, keep_fp64=False)
        rb = resolve_rbits(self, x, rbits, seed)
        check_not_empty(x, self.name)
        check_finite(x, self.name)
        xm = split_matrix(x, self.name)
        r, c = xm.shape[-2:]
        self._check_shape(r, c)
        br, (gr, gc) = self.block_rows, self._groups(r, c)
        absx = xm.abs()
        f32 = dict(dtype=torch.float32, device=x.device)

        amax = group_amax(absx, gr, gc)
        s_enc = torch.where((amax == 0) | torch.isinf(amax), torch.ones_like(amax),
                            torch.clamp(torch.tensor(E4M3_X_E2M1_MAX, **f32) / amax, max=FLT_MAX))
        s_dec = 1.0 / s_enc
        scale_mul = s_enc * torch.tensor(1.0 / 6.0, **f32)  # S_enc · fp32(1/6): one rounding per group
        block_amax = group_amax(absx, br, BLOCK)
        s_code = round_to_code(block_amax * expand(scale_mul, gr // br, gc // BLOCK), E4M3)
        dec = decode(s_code, E4M3) * expand(s_dec, gr // br, gc // BLOCK)  # f32(s) · S_dec per block
        enc = torch.clamp(1.0 / dec, max=FLT_MAX)
        rb_m = None if rb is None else rb.reshape(xm.shape)
        codes = round_to_code(xm * expand(enc, br, BLOCK), E2M1, rb_m)

        data = pack_nibbles(codes).reshape(*shape[:-1], c // 2)
        scale = s_code.to(torch.uint8).view(torch.float8_e4m3fn)
        if br == 1:
            scale = scale.reshape(*shape[:-1], c // BLOCK)
        if self.granularity == "matrix":
            s_dec = s_dec.reshape(shape[:-2])
        elif self.granularity == "row":  # one S_dec per row (per 16 rows with 2-D blocks)
            s_dec = s_dec.reshape(*shape[:-2], r // br) if br > 1 else s_dec.reshape(shape[:-1])
        meta = {"granularity": self.granularity, "tile": self.tile, "block_rows": br}
        return QTensor(data=data, scale=scale, global_scale=s_dec, shape=shape, format=self.name, meta=meta)

    def dequantize(self, qt: QTensor) -> torch.Tensor:
        """QTensor → float32 [..., R, C]: value(code) · (f32(s) · S_dec)."""
        check_qtensor(self, qt)
        shape = qt.shape
        r, c = (1, shape[0]) if len(shape) == 1 else shape[-2:]
        lead = tuple(shape[:-2])
        br, (gr, gc) = self.block_rows, self._groups(r, c)
        codes = unpack_nibbles(qt.data).reshape(*lead, r, c)
        s_val = decode(qt.scale.view(torch.uint8), E4M3).reshape(*lead, r // br, c // BLOCK)
        s_dec = qt.global_scale.reshape(*lead, r // gr, c // gc)
        dec = s_val * expand(s_dec, gr // br, gc // BLOCK)
        return (decode(codes, E2M1) * expand(dec, br, BLOCK)).reshape(shape)


def _factory(**fixed: Any):
    def make(**options: Any) -> NVFP4Quantizer:
        return NVFP4Quantizer(**{**fixed, **options})

    return make


for _b2d in (False, True):
    for _row in (False, True):
        for _sr in (False, True):
            _name = "-".join(["nvfp4"] + ["2d"] * _b2d + ["row"] * _row + ["sr"] * _sr)
            register_quantizer(_name, _factory(sr=_sr, granularity="row" if _row else "matrix",
                                               block_rows=BLOCK if _b2d else 1))
