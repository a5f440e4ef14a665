"""Host-side launch helpers every kernel wrapper uses."""
from __future__ import annotations

import torch
import triton

from .formats import FMT_NVFP4


def pow2(n: int) -> int:
    """The next power of two ≥ n (≥ 1): block sizes of a launch."""
    return triton.next_power_of_2(max(int(n), 1))


def as_i64(v, B: int, device) -> torch.Tensor:
    """A per-entry int64 counter [B] (SR sequence ids, write events) from a tensor or a scalar."""
    return torch.as_tensor(v, dtype=torch.int64, device=device).expand(B).contiguous()


def warps_for_tile(br: int, bc: int) -> int:
    """Warps of a program holding a [br, bc] fp32 tile when the caller gives a block size but no warps."""
    return 8 if br * bc >= 8192 else 4


def check_nvfp4_cols(C: int, *fmts: int) -> None:
    """Refuse an NVFP4 state whose last axis does not split into its blocks of 16."""
    if FMT_NVFP4 in fmts and C % 16:
        raise ValueError(f"NVFP4 scales blocks of 16 along the last state axis, which has {C} elements "
                         "(not a multiple of 16)")
