"""Element formats: fp32, bf16, fp16, fp8e4m3, fp8e5m2, each optionally with stochastic rounding and
(FP8 only) an fp32 scale per matrix or per row.

Registered names (``precision-lab formats`` lists them all):
    fp32                          float32 storage (float64 input is rounded to fp32 RNE)
    bf16, fp16   (+ -sr)          IEEE casts: NaN stays NaN, ±inf stays ±inf, overflow → ±inf
    fp8e4m3, fp8e5m2   (+ -sr)    plain cast: clamp to ±max (inf → ±max), round; NaN → NaN code
    fp8e4m3-mat, fp8e4m3-row      scaled: S_enc = min(max/amax, FLT_MAX) (1 if amax = 0) per matrix
    (and e5m2, + -sr)             ([..., R, C] → one per leading index) or per row; stored scale is
                                  S_dec = 1/S_enc (fp32); code = fp8(x · S_enc); x̂ = value · S_dec.
                                  Scaled variants refuse NaN/Inf input (the scale would be meaningless).
The same variants come from options: ``get_quantizer("fp8e4m3", scale="row", sr=True)``.
"""
from __future__ import annotations

from typing import Any

import torch

from ..base import QTensor, Quantizer
from ..registry import register_quantizer
from ..rounding import BF16, E4M3, E5M2, FP16, FP32, FloatFormat, decode, round_to_code
from ._common import (
    FLT_MAX,
    as_float,
    check_finite,
    check_not_empty,
    check_qtensor,
    resolve_rbits,
    split_matrix,
)

_ELEMENTS: dict[str, FloatFormat] = {"fp32": FP32, "bf16": BF16, "fp16": FP16, "fp8e4m3": E4M3, "fp8e5m2": E5M2}
_STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SCALES = ("none", "mat", "row")


class ElementQuantizer(Quantizer):
    """Per-element rounding to ``fmt`` (RNE, or SR when ``sr``), FP8 optionally with an fp32 scale.

    QTensor: data = fp32/bf16/fp16 tensor of x's shape, or uint8 FP8 codes of x's shape;
    scale = None, or fp32 S_dec of shape [...] (scale="mat") / [..., R] (scale="row").
    """

    def __init__(self, fmt: str = "fp16", sr: bool = False, scale: str = "none"):
        if fmt not in _ELEMENTS:
            raise ValueError(f"unknown element format {fmt!r}; expected one of {', '.join(_ELEMENTS)}")
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
        if scale != "none" and not fmt.startswith("fp8"):
            raise ValueError(f"{fmt} has no scaled variant (scale={scale!r} is for fp8e4m3 / fp8e5m2)")
        if sr and fmt == "fp32":
            raise ValueError("fp32 has no SR variant: quantizer inputs are fp32 already")
        self.fmt, self.element, self.sr, self.scale = fmt, _ELEMENTS[fmt], bool(sr), scale
        self.name = fmt + ("" if scale == "none" else f"-{scale}") + ("-sr" if sr else "")
        self.stochastic = self.sr
        self.rounding = "sr" if sr else "rne"
        self.bits_per_element = float(self.element.bits)
        self.scale_format = {"none": None, "mat": "fp32 per matrix", "row": "fp32 per row"}[scale]

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.element.saturate:
            d["special"] = "clamp to ±max first (inf→±max), NaN→NaN" if self.scale == "none" else "NaN/Inf input: error"
        else:
            d["special"] = "IEEE: NaN→NaN, inf kept, overflow→inf"
        return d

    def quantize(self, x: torch.Tensor, rbits: torch.Tensor | None = None, seed: int | None = None) -> QTensor:
        """x: float tensor [..., R, C] (any shape for unscaled formats) → QTensor (see class doc)."""
        shape = tuple(x.shape)
        x = as_float(x, self.name, keep_fp64=self.scale == "none")
        rb = resolve_rbits(self, x, rbits, seed)
        scale = None
        if self.scale != "none":
            check_not_empty(x, self.name)
            check_finite(x, self.name)
            xm = split_matrix(x, self.name)
            amax = xm.abs().amax(dim=(-2, -1) if self.scale == "mat" else -1, keepdim=True)
            fmax = torch.tensor(self.element.max_value, dtype=torch.float32, device=x.device)
            s_enc = torch.where(amax == 0, torch.ones_like(amax), torch.clamp(fmax / amax, max=FLT_MAX))
            s_dec = 1.0 / s_enc
            x = (xm * s_enc).reshape(shape)
            scale = s_dec.reshape(shape[:-2] if self.scale == "mat" else shape[:-1])
        codes = round_to_code(x, self.element, rb)
        if self.fmt == "fp32":
            data = codes.view(torch.float32)
        elif self.fmt in _STORAGE:
            data = torch.where(codes >= 1 << 15, codes - (1 << 16), codes).to(torch.int16).view(_STORAGE[self.fmt])
        else:
            data = codes.to(torch.uint8)
        return QTensor(data=data, scale=scale, global_scale=None, shape=shape, format=self.name)

    def dequantize(self, qt: QTensor) -> torch.Tensor:
        """QTensor → float32 tensor of the original shape (exact decode, then · S_dec if scaled)."""
        check_qtensor(self, qt)
        if self.fmt in _STORAGE:
            return qt.data.to(torch.float32)
        vals = decode(qt.data, self.element)
        if qt.scale is None:
            return vals
        if self.scale == "row":
            s = qt.scale.unsqueeze(-1)
        else:  # one scale per matrix: broadcast over the last two axes (one axis for a vector)
            s = qt.scale.reshape(*qt.scale.shape, *(1,) * min(2, len(qt.shape)))
        return vals * s


def _factory(fmt: str, sr: bool, scale: str):
    def make(**options: Any) -> ElementQuantizer:
        return ElementQuantizer(**{"fmt": fmt, "sr": sr, "scale": scale, **options})

    make.__doc__ = f"{fmt} (sr={sr}, scale={scale})"
    return make


register_quantizer("fp32", _factory("fp32", False, "none"))
for _f in ("bf16", "fp16"):
    register_quantizer(_f, _factory(_f, False, "none"))
    register_quantizer(f"{_f}-sr", _factory(_f, True, "none"))
for _f in ("fp8e4m3", "fp8e5m2"):
    for _s in SCALES:
        _base = _f if _s == "none" else f"{_f}-{_s}"
        register_quantizer(_base, _factory(_f, False, _s))
        register_quantizer(f"{_base}-sr", _factory(_f, True, _s))
