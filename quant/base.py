"""The quantizer protocol (docs/design.md §5): ``Quantizer`` and the packed ``QTensor`` it produces.

A format is a ``Quantizer`` subclass. Built-in formats implement ``quantize``/``dequantize`` bit
exactly; a user's own quantizer only has to implement ``fake(x)`` to work everywhere on the torch
path (the state machine calls ``fake_quantize`` below, which handles both kinds).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class QTensor:
    """A quantized tensor in its storage layout.

    data:          codes (uint8 for FP8 and packed FP4 [..., C/2] with element 2i in the low nibble;
                   the storage dtype itself for fp16/bf16/fp32).
    scale:         block scales (float8_e4m3fn for NVFP4, uint8 E8M0 exponents for MX, fp32 for
                   scaled FP8) or None.
    global_scale:  per-matrix fp32 decode scale (NVFP4's S_dec) or None.
    shape:         the logical (unpacked) shape of the original tensor.
    format:        the name of the format that produced it.
    meta:          anything else a format needs to decode (padding, granularity...).
    """

    data: torch.Tensor
    scale: torch.Tensor | None
    global_scale: torch.Tensor | None
    shape: tuple[int, ...]
    format: str
    meta: dict[str, Any] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Storage bytes of codes + scales (what a kernel reading this copy moves)."""
        total = self.data.numel() * self.data.element_size()
        for t in (self.scale, self.global_scale):
            if t is not None:
                total += t.numel() * t.element_size()
        return total


class Quantizer:
    """Base class of every format.

    Class attributes describe the format for ``precision-lab formats`` and for reports:
    ``bits_per_element`` (storage bits incl. amortised scales), ``block_size`` (None if none),
    ``scale_format`` (e.g. "e4m3 per 16 + fp32 per matrix"), ``rounding`` ("rne" or "sr"),
    ``stochastic`` (True when quantize draws random bits).
    """

    name: str = "custom"
    bits_per_element: float = float("nan")
    block_size: int | None = None
    scale_format: str | None = None
    rounding: str = "rne"
    stochastic: bool = False

    def quantize(self, x: torch.Tensor, rbits: torch.Tensor | None = None, seed: int | None = None) -> QTensor:
        """x: float tensor [..., R, C] of any float dtype (float16/bfloat16 are widened to float32
        exactly). rbits: integer tensor of x's shape (low 16 bits used) for SR formats; seed: draw
        rbits from Philox, one call per 8 flat elements (counter = element index // 8; for ad-hoc
        use: the state machine always passes rbits from the documented counter layout). Formats that derive scales from the data
        (NVFP4, scaled FP8) refuse empty tensors with a ValueError."""
        raise NotImplementedError(f"{type(self).__name__} implements only fake(); it has no packed form")

    def dequantize(self, qt: QTensor) -> torch.Tensor:
        """QTensor → float32 tensor of qt.shape, whatever dtype the quantized input had."""
        raise NotImplementedError(f"{type(self).__name__} implements only fake(); it has no packed form")

    def fake(self, x: torch.Tensor, rbits: torch.Tensor | None = None, seed: int | None = None) -> torch.Tensor:
        """Quantize then dequantize: a float32 tensor of x's shape, also for float16/bfloat16 input
        (the values are exactly representable in float32; cast back with ``.to(x.dtype)`` if needed,
        which for a format wider than x's dtype rounds again)."""
        return self.dequantize(self.quantize(x, rbits=rbits, seed=seed))

    def short_str(self) -> str:
        return self.name

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.short_str(),
            "bits_per_element": self.bits_per_element,
            "block_size": self.block_size,
            "scale_format": self.scale_format,
            "rounding": self.rounding,
        }

    def __repr__(self) -> str:
        return f"<Quantizer {self.short_str()}>"


def _accepts_rbits(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "rbits" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def fake_quantize(q: Quantizer, x: torch.Tensor, rbits: torch.Tensor | None = None) -> torch.Tensor:
    """Apply ``q.fake`` to x, passing ``rbits`` only to quantizers that take them.

    This is the one call the state machine makes, so a user's quantizer with a plain ``fake(x)``
    works everywhere. Returns float32 (a custom quantizer's output is cast and shape-checked).
    """
    if rbits is not None and getattr(q, "stochastic", False) and _accepts_rbits(q.fake):
        y = q.fake(x, rbits=rbits)
    else:
        y = q.fake(x)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise ValueError(
            f"quantizer {getattr(q, 'name', type(q).__name__)!r}: fake(x) must return a tensor of x's shape "
            f"{tuple(x.shape)}, got {getattr(y, 'shape', type(y).__name__)}"
        )
    return y.to(torch.float32)
