"""State-format dispatch shared by the teacher-forced scan kernels (mamba2/scan.py, gdn/scan.py).

``quantize_tile`` rounds an fp32 tile of a state matrix to a storage format and returns the fp32
values it stands for (what the next window reads). The element codecs are the integer-bit helpers
(``codecs.py``), so the interpreter and the GPU run the same arithmetic as the torch quantizers.
For NVFP4 the tile must be the whole [R, C] matrix (its global scale is the tile's amax); kernels
that walk a matrix in row blocks take the amax over all blocks first (``tile_amax_bits``) and then
call ``nvfp4_tile_sr`` per block with the matrix's scales.

SR bits follow quant/philox.py ``sr_offsets``: key ``layer_seed(seed, layer)``; counter
``copy << 63 | event << 44 | seq << 28 | head << 16 | element`` (row-major element of [R, C]).
"""
from __future__ import annotations

import triton
import triton.language as tl
from precision_lab.kernels.quant import codecs as qc

# Format codes (constexpr in the kernels). Formats outside this table go to the torch engine.
FMT_FP32, FMT_BF16, FMT_FP16, FMT_E4M3, FMT_E5M2, FMT_NVFP4 = 0, 1, 2, 3, 4, 5
# The same codes as constexpr globals, which is what a @triton.jit body may read.
C_FP32, C_BF16, C_FP16 = tl.constexpr(FMT_FP32), tl.constexpr(FMT_BF16), tl.constexpr(FMT_FP16)
C_E4M3, C_E5M2, C_NVFP4 = tl.constexpr(FMT_E4M3), tl.constexpr(FMT_E5M2), tl.constexpr(FMT_NVFP4)

#: quantizer name -> (format code, stochastic rounding)
KERNEL_FORMATS: dict[str, tuple[int, bool]] = {
    "fp32": (FMT_FP32, False),
    "bf16": (FMT_BF16, False), "bf16-sr": (FMT_BF16, True),
    "fp16": (FMT_FP16, False), "fp16-sr": (FMT_FP16, True),
    "fp8e4m3": (FMT_E4M3, False), "fp8e4m3-sr": (FMT_E4M3, True),
    "fp8e5m2": (FMT_E5M2, False), "fp8e5m2-sr": (FMT_E5M2, True),
    "nvfp4": (FMT_NVFP4, False), "nvfp4-sr": (FMT_NVFP4, True),
}

EVENT_SHIFT, SEQ_SHIFT, HEAD_SHIFT = tl.constexpr(44), tl.constexpr(28), tl.constexpr(16)


@triton.jit
def sr_bits(seed, seq, head, event, elem, COPY: tl.constexpr):
    """tl.randint words for the elements ``elem`` (int64 block) of one state write (see module doc)."""
    off = (event << EVENT_SHIFT) | (seq << SEQ_SHIFT) | (head.to(tl.int64) << HEAD_SHIFT) | elem
    if COPY:
        off = off.to(tl.uint64, bitcast=True) | 0x8000000000000000
    return tl.randint(seed, off)


@triton.jit
def quantize_tile(x, mask, seed, seq, head, event, elem, COPY: tl.constexpr, FMT: tl.constexpr,
                  SR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Round the fp32 tile x [BLOCK_R, BLOCK_C] (valid where ``mask``) to FMT; returns fp32 values.

    Masked-out elements come back as 0 and take no part in NVFP4's amax.
    """
    y = x
    if FMT != C_FP32:
        x = tl.where(mask, x, 0.0)
        if SR:
            r = sr_bits(seed, seq, head, event, elem, COPY)
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
    block_scale = qc.decode_e4m3(scale_codes) * s_dec
    return tl.reshape(qc.decode_e2m1(codes) * block_scale[:, None], (BLOCK_R, BLOCK_C))


@triton.jit
def nvfp4_tile_sr(x, mask, s_enc, s_dec, seed, seq, head, event, elem, COPY: tl.constexpr, SR: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``nvfp4_tile`` of a row block of a state matrix, drawing its SR bits (masked elements → 0)."""
    x = tl.where(mask, x, 0.0)
    if SR:
        r = sr_bits(seed, seq, head, event, elem, COPY)
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
