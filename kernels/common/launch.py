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


#: longest window of the window-parallel scans (their in-register triangular solve is BLOCK_W wide)
MAX_SCAN_WINDOW = 64


def replay_scan_buffers(out, like: torch.Tensor, state_shape, u0: torch.Tensor, r0: torch.Tensor, *, split: bool,
                        L: int):
    """(output, update checkpoint, read copy) of a window-parallel scan: ``out`` if given, else new
    buffers (the output like ``like``, fp32 checkpoints of ``state_shape``; the read copy is the
    update checkpoint unless ``split``). The kernel works in the checkpoint buffers, so they start
    as copies of ``u0`` / ``r0``."""
    if not 1 <= L <= MAX_SCAN_WINDOW:
        raise ValueError(f"the Triton scan supports 1 <= L <= {MAX_SCAN_WINDOW}, got L={L}")
    if out is not None:
        y, u, r = out
    else:
        y = torch.empty_like(like)
        u = torch.empty(state_shape, device=like.device, dtype=torch.float32)
        r = torch.empty_like(u) if split else u
    r = r if split else u
    u.copy_(u0)
    if split:
        r.copy_(r0)
    return y, u, r
