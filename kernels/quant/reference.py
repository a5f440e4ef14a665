"""Torch reference beside the Triton kernels: the built-in formats of ``precision_lab.quant``.

The kernels in ``triton_quant.py`` must equal these bit for bit (codes, block scales, global
scales). Nothing is re-implemented here: the spec lives once, in ``precision_lab.quant``.
"""
from __future__ import annotations

import torch
from precision_lab.quant import QTensor, get_quantizer


def quantize(x: torch.Tensor, fmt: str, *, rbits: torch.Tensor | None = None, seed: int | None = None) -> QTensor:
    """x [..., R, C] → ``get_quantizer(fmt).quantize(x, rbits=rbits, seed=seed)``."""
    return get_quantizer(fmt).quantize(x, rbits=rbits, seed=seed)


def dequantize(qt: QTensor) -> torch.Tensor:
    """QTensor → float32 of qt.shape, decoded by the format that produced it."""
    return get_quantizer(qt.format).dequantize(qt)
