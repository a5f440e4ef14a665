"""The non-flush step's state products on their own: ``read_state_dot`` over whole head matrices.

A decode step reads ``S v`` (and GDN ``S w``) from an NVFP4 read copy inside a larger kernel; this
launches the same device helper alone, so tests and ``scripts/nvfp4_read_error.py`` can hold each
``fp4_decode`` to float64 products on the CPU (interpreter) and on a GPU (compiled code).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import C_NVFP4
from precision_lab.kernels.common.launch import resolve_fp4_decode
from precision_lab.kernels.common.state_io import read_state_dot
from precision_lab.kernels.decode_state import PackedState


@triton.jit
def _read_state_dot_kernel(d_ptr, sc_ptr, gs_ptr, s_d, s_sc, s_gs, v_ptr, w_ptr, sv_ptr, sw_ptr, R, C,
                           BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr, FP4: tl.constexpr):
    i_r, slot = tl.program_id(0), tl.program_id(1)
    rows = i_r * BR + tl.arange(0, BR)
    m_r = rows < R
    sv, sw = read_state_dot(d_ptr, sc_ptr, gs_ptr, slot.to(tl.int64), s_d, s_sc, s_gs, 0, rows, m_r, R, C,
                            v_ptr, w_ptr, C_NVFP4, BR, BC, HW, True, FP4)
    tl.store(sv_ptr + slot * R + rows, sv, mask=m_r)
    tl.store(sw_ptr + slot * R + rows, sw, mask=m_r)


def nvfp4_read_products(pool: PackedState, v: torch.Tensor, w: torch.Tensor, fp4_decode: str,
                        device, block_r: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(S v, S w) [S, R] on the CPU, for head 0 of every slot of the NVFP4 ``pool`` [S, H, R, C],
    through ``read_state_dot`` with ``fp4_decode`` (``FP4_DECODES``), ``block_r`` rows per program."""
    S, R, C = pool.data.shape[0], pool.R, pool.C
    sv, sw = (torch.full((S, R), float("nan"), device=device) for _ in range(2))
    d, sc, gs, s_d, s_sc, s_gs = pool.kernel_args()
    # 4 warps, or for "mma-ptx" one per 16 rows up to 4 (its layout needs 16 rows per warp)
    warps = min(4, max(1, block_r // 16)) if fp4_decode == "mma-ptx" else 4
    _read_state_dot_kernel[(triton.cdiv(R, block_r), S)](
        d, sc, gs, s_d, s_sc, s_gs, v.to(device), w.to(device), sv, sw, R, C, BR=block_r,
        BC=triton.next_power_of_2(C), HW=str(device).startswith("cuda"),
        FP4=resolve_fp4_decode(fp4_decode, pool, block_r, warps), num_warps=warps)
    return sv.cpu(), sw.cpu()
