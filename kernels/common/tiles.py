"""Rounding fp32 state tiles to a storage format in registers (the teacher-forced scans'
checkpoints; mamba2/scan.py, gdn/scan.py).

``quantize_tile`` rounds an fp32 tile of a state matrix to a storage format and returns the fp32
values it stands for (what the next window reads). The element codecs are the integer-bit helpers
of ``kernels/quant/codecs.py``, so the interpreter and the GPU run the same arithmetic as the torch
quantizers. For NVFP4 the tile must be the whole [R, C] matrix (its global scale is the tile's
amax); a kernel that walks a matrix in row blocks parks the fp32 result of each block
(``store_flush_block``) and rounds all blocks once the matrix's amax is known
(``store_late_nvfp4``).

SR bits come from ``sr_bits`` in ``kernels/common/philox.py`` (the state-write layout of
quant/philox.py: one Philox call per 8 columns of a row). Tiles therefore span columns
0..BLOCK_C-1 of their rows (BLOCK_C a multiple of 8), and callers pass the tile's ``rows`` and the
matrix width ``C`` instead of element indices.
"""
from __future__ import annotations

import triton
import triton.language as tl
from precision_lab.kernels.quant import codecs as qc

from .formats import C_BF16, C_E4M3, C_E5M2, C_FP16, C_FP32, C_NVFP4
from .philox import sr_bits


@triton.jit
def quantize_tile(x, mask, seed, seq, head, event, rows, C, COPY: tl.constexpr, FMT: tl.constexpr,
                  SR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Round the fp32 tile x [BLOCK_R, BLOCK_C] (rows ``rows`` and columns 0..BLOCK_C-1 of a [R, C]
    state matrix, valid where ``mask``) to FMT; returns fp32 values.

    Masked-out elements come back as 0 and take no part in NVFP4's amax.
    """
    y = x
    if FMT != C_FP32:
        x = tl.where(mask, x, 0.0)
        if SR:
            r = sr_bits(seed, seq, head, event, rows, C, COPY, BLOCK_C)
        else:
            r = 0
        if FMT == C_BF16:
            y = qc.round_bf16(x, r, SR)
        elif FMT == C_FP16:
            y = qc.round_fp16(x, r, SR)
        elif FMT == C_E4M3:
            y = qc.round_e4m3(x, r, SR)
        elif FMT == C_E5M2:
            y = qc.round_e5m2(x, r, SR)
        else:
            tl.static_assert(FMT == C_NVFP4, "unknown state format code")
            tl.static_assert(BLOCK_C % 16 == 0, "NVFP4 blocks run along the last axis: C % 16 == 0")
            s_enc, s_dec = qc.nvfp4_global_scales(tile_amax_bits(x))
            y = nvfp4_tile(x, s_enc, s_dec, r, SR, BLOCK_R, BLOCK_C)
        y = tl.where(mask, y, 0.0)
    return y


@triton.jit
def tile_amax_bits(x):
    """amax of a 2-D tile as ``abs_bits`` (int32; an integer max, so NaN propagates)."""
    return tl.max(tl.max(qc.abs_bits(x), 1), 0)


@triton.jit
def nvfp4_tile(x, s_enc, s_dec, r, SR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """NVFP4 round trip of x [BLOCK_R, BLOCK_C] with the matrix's global scales (s_enc, s_dec) given:
    one E4M3 scale per 16 elements of the last axis. Returns fp32 values."""
    tl.static_assert(BLOCK_C % 16 == 0, "NVFP4 blocks run along the last axis: C % 16 == 0")
    nb: tl.constexpr = BLOCK_R * (BLOCK_C // 16)
    xb = tl.reshape(x, (nb, 16))
    if SR:
        rb = tl.reshape(r, (nb, 16))
    else:
        rb = 0
    codes, scale_codes = qc.nvfp4_quantize_blocks(xb, s_enc, s_dec, rb, SR)
    return tl.reshape(qc.nvfp4_dequantize_codes(codes, scale_codes, s_dec), (BLOCK_R, BLOCK_C))


@triton.jit
def nvfp4_tile_sr(x, mask, s_enc, s_dec, seed, seq, head, event, rows, C, COPY: tl.constexpr, SR: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``nvfp4_tile`` of a row block (``rows``) of a [R, C] state matrix, drawing its SR bits (masked
    elements → 0)."""
    x = tl.where(mask, x, 0.0)
    if SR:
        r = sr_bits(seed, seq, head, event, rows, C, COPY, BLOCK_C)
    else:
        r = 0
    return tl.where(mask, nvfp4_tile(x, s_enc, s_dec, r, SR, BLOCK_R, BLOCK_C), 0.0)


@triton.jit
def to_output(y, out_dtype: tl.constexpr):
    """y (fp32) rounded to nearest-even in the output dtype, bit for bit on the GPU and in the
    interpreter (whose own fp32→bf16 cast does not round to nearest)."""
    if out_dtype == tl.bfloat16:
        y = qc.round_bf16(y, 0, False)
    elif out_dtype == tl.float16:
        y = qc.round_fp16(y, 0, False)
    return y.to(out_dtype)


@triton.jit
def checkpoint_ptrs(u_ptr, r_ptr, SPLIT: tl.constexpr, READ_LATE: tl.constexpr):
    """(park, read) buffers of a scan's checkpoints: the read copy is ``r_ptr`` in split mode, else
    the update checkpoint ``u_ptr``; a flush parks its fp32 result in the buffer of an NVFP4 copy
    (the read copy's when that one is NVFP4) until the matrix's amax is known."""
    if READ_LATE:
        park_ptr = r_ptr
    else:
        park_ptr = u_ptr
    if SPLIT:
        rd_ptr = r_ptr
    else:
        rd_ptr = u_ptr
    return park_ptr, rd_ptr


@triton.jit
def store_flush_block(b_s, mask, amax, u_ptr, r_ptr, park_ptr, p_st, seed, seq, head, event, rows, C,
                      UPD_FMT: tl.constexpr, UPD_SR: tl.constexpr, READ_FMT: tl.constexpr, READ_SR: tl.constexpr,
                      SPLIT: tl.constexpr, UPD_LATE: tl.constexpr, READ_LATE: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """One row block (rows ``rows`` of the [R, C] matrix, at offsets ``p_st``, valid where ``mask``) of
    a flush's fp32 state ``b_s``: the element-format copies are rounded and stored now (update copy
    bit 0, read copy bit 1); with an NVFP4 copy the block is parked in fp32 and its amax joins
    ``amax`` (returned) for ``store_late_nvfp4``."""
    if UPD_LATE or READ_LATE:
        b_s = tl.where(mask, b_s, 0.0)
        amax = tl.maximum(amax, tile_amax_bits(b_s))
        tl.store(park_ptr + p_st, b_s, mask=mask)
    if not UPD_LATE:
        tl.store(u_ptr + p_st, quantize_tile(b_s, mask, seed, seq, head, event, rows, C, 0, UPD_FMT, UPD_SR,
                                             BLOCK_R, BLOCK_C), mask=mask)
    if SPLIT and not READ_LATE:
        tl.store(r_ptr + p_st, quantize_tile(b_s, mask, seed, seq, head, event, rows, C, 1, READ_FMT,
                                             READ_SR, BLOCK_R, BLOCK_C), mask=mask)
    return amax


@triton.jit
def store_late_nvfp4(park_ptr, u_ptr, r_ptr, amax, p_head, R, C, o_c, m_c, seed, seq, head, event,
                     UPD_SR: tl.constexpr, READ_SR: tl.constexpr, UPD_LATE: tl.constexpr, READ_LATE: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, NUM_R: tl.constexpr):
    """The second pass of a flush with an NVFP4 copy: the matrix [R, C] at ``p_head`` (columns
    ``o_c`` = 0..BLOCK_C-1, valid where ``m_c``) parked in fp32 by ``store_flush_block``, rounded block by block
    with the global scales of its ``amax`` into the NVFP4 update (``UPD_LATE``) and read
    (``READ_LATE``) copies."""
    tl.debug_barrier()
    s_enc, s_dec = qc.nvfp4_global_scales(amax)
    for i_r in range(NUM_R):
        o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
        m_rc = (o_r < R)[:, None] & m_c[None, :]
        p_st = p_head + o_r[:, None] * C + o_c[None, :]
        b_s = tl.load(park_ptr + p_st, mask=m_rc, other=0.0)
        if UPD_LATE:
            tl.store(u_ptr + p_st, nvfp4_tile_sr(b_s, m_rc, s_enc, s_dec, seed, seq, head, event, o_r, C, 0,
                                                 UPD_SR, BLOCK_R, BLOCK_C), mask=m_rc)
        if READ_LATE:
            tl.store(r_ptr + p_st, nvfp4_tile_sr(b_s, m_rc, s_enc, s_dec, seed, seq, head, event, o_r, C, 1,
                                                 READ_SR, BLOCK_R, BLOCK_C), mask=m_rc)


@triton.jit
def seq_head_group(i_bh, H, G):
    """(sequence, head, group of the head, sequence as int64) of a scan program over (sequence·head)."""
    i_b = i_bh // H
    i_h = i_bh % H
    return i_b, i_h, i_h // (H // G), i_b.to(tl.int64)
