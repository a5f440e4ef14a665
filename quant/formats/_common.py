"""Input checks and random-bit plumbing shared by the built-in formats."""
from __future__ import annotations

import torch

from ..base import QTensor, Quantizer
from ..philox import flat_rbits

FLT_MAX = torch.finfo(torch.float32).max


def as_float(x: torch.Tensor, fmt: str, *, keep_fp64: bool) -> torch.Tensor:
    """Validate a quantizer input and return it as float32 (or float64 when ``keep_fp64``).

    Element formats round float64 input directly (one rounding); block formats define their scale
    chain in fp32, so they take float64 input through an fp32 RNE cast first (``keep_fp64=False``).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fmt}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{fmt}: expected a floating-point tensor (float32, float64, float16, bfloat16), "
                        f"got {x.dtype}; integer data has no rounding to quantize")
    x = x.detach()  # quantization is not differentiable; bit views refuse tensors that require grad
    if x.dtype == torch.float64 and keep_fp64:
        return x
    return x.to(torch.float32)


def check_finite(x: torch.Tensor, fmt: str) -> None:
    """Formats that derive scales from the data refuse NaN/Inf: a non-finite state is a bug to surface,
    and E2M1 cannot even encode it (docs/design.md §5, NaN policy)."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        first = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"{fmt}: input holds {int(bad.sum())} non-finite value(s) (first at index {first}: "
                         f"{x[first].item()}); this format computes scales from the data and has no NaN/Inf encoding")


def check_not_empty(x: torch.Tensor, fmt: str) -> None:
    """Formats that derive scales from the data's maximum have no scale for no data."""
    if x.numel() == 0:
        raise ValueError(f"{fmt}: cannot quantize an empty tensor (shape {tuple(x.shape)}): this format derives its "
                         "scales from the data's maximum; pass at least one element (unscaled formats such as "
                         "fp16 or fp8e4m3 accept empty tensors)")


def split_matrix(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """View x as [..., R, C]; a 1-D vector [C] is one matrix of one row."""
    if x.dim() == 0:
        raise ValueError(f"{fmt}: expected a tensor [..., R, C] (or a vector [C]), got a scalar")
    return x.unsqueeze(0) if x.dim() == 1 else x


def check_divisible(size: int, block: int, axis: str, fmt: str) -> None:
    if size % block:
        raise ValueError(f"{fmt}: the {axis} size {size} is not divisible by the block size {block}; "
                         f"pad it to a multiple of {block} (no silent truncation or padding is done)")


def resolve_rbits(q: Quantizer, x: torch.Tensor, rbits: torch.Tensor | None, seed: int | None) -> torch.Tensor | None:
    """The random words an SR format consumes: ``rbits`` as given, or Philox(seed) over the flat element
    index, 8 elements per call (``philox.flat_rbits``; docs/design.md §5.3).

    Deterministic formats ignore both (the contract: only stochastic formats consume bits).
    """
    if not q.stochastic:
        return None
    if rbits is not None:
        if not isinstance(rbits, torch.Tensor) or rbits.shape != x.shape:
            raise ValueError(f"{q.short_str()}: rbits must be an integer tensor of x's shape {tuple(x.shape)}, got "
                             f"{tuple(rbits.shape) if isinstance(rbits, torch.Tensor) else type(rbits).__name__}")
        return rbits
    if seed is None:
        raise ValueError(f"{q.short_str()} rounds stochastically: pass rbits (integer tensor of x's shape, "
                         "low 16 bits used) or seed (Philox, counter = flat element index // 8)")
    return flat_rbits(seed, x.numel(), device=x.device).reshape(x.shape)


def check_qtensor(q: Quantizer, qt: QTensor) -> None:
    if not isinstance(qt, QTensor):
        raise TypeError(f"{q.short_str()}.dequantize expects a QTensor, got {type(qt).__name__}")
    if qt.format != q.short_str():
        raise ValueError(f"QTensor was produced by {qt.format!r}; it cannot be decoded by {q.short_str()!r}")
