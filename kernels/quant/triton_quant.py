"""Launchable Triton quantize/dequantize kernels and their Python API (math: README.md here).

Kernels (all arithmetic in ``codecs.py``, integer bit operations, bit-equal to ``precision_lab.quant``):

* ``nvfp4_quantize_kernel``   one program per matrix (the per-matrix amax is a reduction over the
  whole matrix, so the program that owns a matrix can compute it and quantize without a second
  launch). When the matrix fits one tile (``ONE_TILE``) it is read from memory once and kept in
  registers; otherwise the program makes two passes over it (the second mostly from L2).
* ``nvfp4_dequantize_kernel`` 2-D grid (matrix, tile).
* ``cast_quantize_kernel`` / ``cast_dequantize_kernel``: element formats bf16, fp16, e4m3, e5m2
  (RNE or SR), 1-D grid over all elements.

Random bits for SR come from one of (constexpr ``RB``): an explicit tensor (``rbits``, one word per
element, low 16 bits used; what the state machine passes, and what bit tests use) or Philox in the
kernel with the ad-hoc layout of ``seed=`` (``flat_sr_bits``: one ``tl.randint4x`` call per 8
consecutive flat elements of x, counter = flat index // 8) — the same values as
``precision_lab.quant.philox.flat_rbits(seed, numel)``.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from precision_lab.quant import QTensor, Quantizer, get_quantizer

from ..common.formats import C_BF16, C_E4M3, C_FP16, FMT_BF16, FMT_E4M3, FMT_E5M2, FMT_FP16
from ..common.philox import flat_sr_bits
from ..runtime import require_triton, triton_unavailable_reason
from . import codecs as qc

RB_NONE, RB_TENSOR, RB_PHILOX = 0, 1, 2

# element format → (kernel format code, storage dtype of the codes, integer view used for stores)
_CAST_FORMATS: dict[str, tuple[int, torch.dtype, torch.dtype]] = {
    "bf16": (FMT_BF16, torch.bfloat16, torch.int16),
    "fp16": (FMT_FP16, torch.float16, torch.int16),
    "e4m3": (FMT_E4M3, torch.float8_e4m3fn, torch.uint8),
    "e5m2": (FMT_E5M2, torch.float8_e5m2, torch.uint8),
}

NVFP4_BLOCK = 16
# Largest matrix one program keeps in registers (elements). 8192 = a 64×128 fp32 state head.
MAX_ONE_TILE = 8192
TWO_PASS_TILE = 4096
CAST_BLOCK = 4096


@triton.jit
def _load_rbits(rbits_ptr, offs, mask, seed, start, RB: tl.constexpr, M: tl.constexpr, W: tl.constexpr):
    """Random words (low 16 bits used) for the elements at flat offsets ``offs``, which must be the
    M·W consecutive elements from ``start`` (a multiple of 8) in row-major order, in any block shape:
    in-kernel Philox draws them as an [M, W] block, one call per 8 elements."""
    if RB == 1:
        r = tl.load(rbits_ptr + offs, mask=mask, other=0).to(tl.int32)
    elif RB == 2:
        r = tl.reshape(flat_sr_bits(seed, start, M, W), offs.shape).to(tl.int32)
    else:
        r = 0
    return r


@triton.jit
def nvfp4_quantize_kernel(x_ptr, data_ptr, scale_ptr, gscale_ptr, rbits_ptr, seed, N,
                          BLOCK: tl.constexpr, ONE_TILE: tl.constexpr, SR: tl.constexpr,
                          RB: tl.constexpr):
    """x [M, N] (N elements of one matrix, multiple of 16) → data uint8 [M, N/2],
    scale uint8 (E4M3 bytes) [M, N/16], gscale fp32 [M]. Program m quantizes matrix m."""
    NB: tl.constexpr = BLOCK // 16
    pid = tl.program_id(0).to(tl.int64)
    base = pid * N
    # element (b, j) of a tile: block b of 16, position j inside the block
    local = tl.arange(0, NB)[:, None] * 16 + tl.arange(0, 16)[None, :]

    if ONE_TILE:
        mask = local < N
        x = tl.load(x_ptr + base + local, mask=mask, other=0.0).to(tl.float32)
        amax_bits = tl.max(tl.max(qc.abs_bits(x), axis=1), axis=0)
    else:
        amax_bits = tl.zeros([], tl.int32)
        for start in range(0, N, BLOCK):
            mask = (start + local) < N
            xt = tl.load(x_ptr + base + start + local, mask=mask, other=0.0).to(tl.float32)
            amax_bits = tl.maximum(amax_bits, tl.max(tl.max(qc.abs_bits(xt), axis=1), axis=0))
    s_enc, s_dec = qc.nvfp4_global_scales(amax_bits)
    # A matrix holding NaN/Inf is marked by a NaN global scale; the Python API then raises, as the
    # reference does (scales derived from non-finite data are meaningless).
    nan = tl.full([], qc.F32_NAN_BITS, tl.int32).to(tl.float32, bitcast=True)
    tl.store(gscale_ptr + pid, tl.where(amax_bits >= 0x7F800000, nan, s_dec))

    pair = tl.arange(0, NB)[:, None] * 8 + tl.arange(0, 8)[None, :]
    blk = tl.arange(0, NB)
    for start in range(0, N, BLOCK):
        mask = (start + local) < N
        if ONE_TILE:
            xt = x
        else:
            xt = tl.load(x_ptr + base + start + local, mask=mask, other=0.0).to(tl.float32)
        r = _load_rbits(rbits_ptr, base + start + local, mask, seed, base + start, RB, NB, 16)
        codes, scale_codes = qc.nvfp4_quantize_blocks(xt, s_enc, s_dec, r, SR)
        packed = qc.nvfp4_pack(codes)
        tl.store(data_ptr + (base + start) // 2 + pair, packed.to(tl.uint8), mask=(start // 2 + pair) < N // 2)
        tl.store(scale_ptr + (base + start) // 16 + blk, scale_codes.to(tl.uint8), mask=(start // 16 + blk) < N // 16)


@triton.jit
def _quarter_rbits(rbits_ptr, off, mask, w_lo, w_hi, RB: tl.constexpr):
    """SR words of the quarter at ``off`` ([NB, 4], elements 4Q .. 4Q+3 of each 16-element block).
    In-kernel Philox: ``w_lo`` / ``w_hi`` are words 0 and 1 (Q even) or 2 and 3 (Q odd) of the group
    of 8 holding the quarter; lane l of a group is half l % 2 of word l // 2 (kernels/common/philox.py),
    and column c is lane 4·(Q % 2) + c."""
    if RB == 1:
        r = tl.load(rbits_ptr + off, mask=mask, other=0).to(tl.int32)
    elif RB == 2:
        c = off & 3  # off = 16·block + 4Q + c
        r = (tl.where(c < 2, w_lo, w_hi) >> ((c & 1) * 16)).to(tl.int32)
    else:
        r = 0
    return r


@triton.jit
def _pack_quarter(codes, SHIFT: tl.constexpr):
    """E2M1 nibbles [NB, 4] of quarter Q → [NB] int64 with element 4Q + c at bit SHIFT + 4c (SHIFT = 16Q)."""
    c = tl.arange(0, 4)[None, :]
    return tl.sum(codes << (4 * c), axis=1).to(tl.int64) << SHIFT


@triton.jit
def _block_max(x0, x1, x2, x3):
    """abs_bits amax [NB] of the blocks given as their four quarters (NaN propagates)."""
    return tl.maximum(tl.maximum(tl.max(qc.abs_bits(x0), axis=1), tl.max(qc.abs_bits(x1), axis=1)),
                      tl.maximum(tl.max(qc.abs_bits(x2), axis=1), tl.max(qc.abs_bits(x3), axis=1)))


@triton.jit
def nvfp4_quantize_rows_kernel(x_ptr, data_ptr, scale_ptr, gscale_ptr, rbits_ptr, seed, N,
                               BLOCK: tl.constexpr, ONE_TILE: tl.constexpr, SR: tl.constexpr,
                               RB: tl.constexpr):
    """``nvfp4_quantize_kernel`` with every 16-element block held by one thread (data written as int64
    words of 16 codes). The tile is loaded as four [NB, 4] quarters (elements 4Q .. 4Q+3 of every
    block), so the block amax, the scale chain, both Philox calls of a block and the packing into
    one 64-bit store stay inside the thread. The [NB, 16] layout of the other kernel spreads a block
    over 4 threads, which repeat the scale chain (two correctly rounded divisions) 4 times and pass
    the Philox words and packed bytes through shared memory."""
    NB: tl.constexpr = BLOCK // 16
    pid = tl.program_id(0).to(tl.int64)
    base = pid * N
    rows = tl.arange(0, NB)
    off0 = rows[:, None] * 16 + tl.arange(0, 4)[None, :]  # quarter 0; quarter Q is off0 + 4Q

    if ONE_TILE:
        mask = off0 < N
        x0 = tl.load(x_ptr + base + off0, mask=mask, other=0.0).to(tl.float32)
        x1 = tl.load(x_ptr + base + off0 + 4, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + base + off0 + 8, mask=mask, other=0.0).to(tl.float32)
        x3 = tl.load(x_ptr + base + off0 + 12, mask=mask, other=0.0).to(tl.float32)
        bmax = _block_max(x0, x1, x2, x3)
        amax_bits = tl.max(bmax, axis=0)
    else:
        # the amax pass only reads: the natural coalesced [NB, 16] layout is the cheapest there
        local = rows[:, None] * 16 + tl.arange(0, 16)[None, :]
        amax_bits = tl.zeros([], tl.int32)
        for start in range(0, N, BLOCK):
            xt = tl.load(x_ptr + base + start + local, mask=(start + local) < N, other=0.0).to(tl.float32)
            amax_bits = tl.maximum(amax_bits, tl.max(tl.max(qc.abs_bits(xt), axis=1), axis=0))
    s_enc, s_dec = qc.nvfp4_global_scales(amax_bits)
    nan = tl.full([], qc.F32_NAN_BITS, tl.int32).to(tl.float32, bitcast=True)
    tl.store(gscale_ptr + pid, tl.where(amax_bits >= 0x7F800000, nan, s_dec))

    for start in range(0, N, BLOCK):
        m = (start + off0) < N
        if ONE_TILE:
            q0, q1, q2, q3, bm = x0, x1, x2, x3, bmax
        else:
            q0 = tl.load(x_ptr + base + start + off0, mask=m, other=0.0).to(tl.float32)
            q1 = tl.load(x_ptr + base + start + off0 + 4, mask=m, other=0.0).to(tl.float32)
            q2 = tl.load(x_ptr + base + start + off0 + 8, mask=m, other=0.0).to(tl.float32)
            q3 = tl.load(x_ptr + base + start + off0 + 12, mask=m, other=0.0).to(tl.float32)
            bm = _block_max(q0, q1, q2, q3)
        if RB == 2:
            # Philox(seed, flat index // 8): groups 2b and 2b+1 of the tile are block b's
            g = ((base + start) // 8 + 2 * rows.to(tl.int64))[:, None]
            a0, a1, a2, a3 = tl.randint4x(seed, g)
            b0, b1, b2, b3 = tl.randint4x(seed, g + 1)
        else:
            a0, a1, a2, a3, b0, b1, b2, b3 = 0, 0, 0, 0, 0, 0, 0, 0
        rp = rbits_ptr + base + start
        r0 = _quarter_rbits(rp, off0, m, a0, a1, RB)
        r1 = _quarter_rbits(rp, off0 + 4, m, a2, a3, RB)
        r2 = _quarter_rbits(rp, off0 + 8, m, b0, b1, RB)
        r3 = _quarter_rbits(rp, off0 + 12, m, b2, b3, RB)
        scale_codes, enc = qc.nvfp4_block_scales(bm, s_enc, s_dec)
        e = enc[:, None]
        word = (_pack_quarter(qc.encode_e2m1(q0 * e, r0, SR), 0) | _pack_quarter(qc.encode_e2m1(q1 * e, r1, SR), 16)
                | _pack_quarter(qc.encode_e2m1(q2 * e, r2, SR), 32) | _pack_quarter(qc.encode_e2m1(q3 * e, r3, SR), 48))
        row_mask = (start // 16 + rows) < N // 16
        tl.store(data_ptr + (base + start) // 16 + rows, word, mask=row_mask)
        tl.store(scale_ptr + (base + start) // 16 + rows, scale_codes.to(tl.uint8), mask=row_mask)


@triton.jit
def nvfp4_dequantize_kernel(data_ptr, scale_ptr, gscale_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """data uint8 [M, N/2], scale uint8 [M, N/16], gscale fp32 [M] → out fp32 [M, N]."""
    NB: tl.constexpr = BLOCK // 16
    pid_m = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1).to(tl.int64) * BLOCK
    base = pid_m * N + start
    pair = tl.arange(0, NB)[:, None] * 8 + tl.arange(0, 8)[None, :]
    blk = tl.arange(0, NB)
    packed = tl.load(data_ptr + base // 2 + pair, mask=(start // 2 + pair) < N // 2, other=0).to(tl.int32)
    scale_codes = tl.load(scale_ptr + base // 16 + blk, mask=(start // 16 + blk) < N // 16, other=0).to(tl.int32)
    s_dec = tl.load(gscale_ptr + pid_m)
    y = qc.nvfp4_dequantize_blocks(packed, scale_codes, s_dec)
    local = tl.arange(0, NB)[:, None] * 16 + tl.arange(0, 16)[None, :]
    tl.store(out_ptr + base + local, y, mask=(start + local) < N)


@triton.jit
def cast_quantize_kernel(x_ptr, out_ptr, rbits_ptr, seed, n, FMT: tl.constexpr, SR: tl.constexpr,
                         RB: tl.constexpr, BLOCK: tl.constexpr):
    """x [n] float → codes [n] (int16 view for bf16/fp16, uint8 for e4m3/e5m2)."""
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = _load_rbits(rbits_ptr, offs, mask, seed, start, RB, 1, BLOCK)
    if FMT == C_BF16:
        tl.store(out_ptr + offs, qc.encode_bf16(x, r, SR).to(tl.int16), mask=mask)
    elif FMT == C_FP16:
        tl.store(out_ptr + offs, qc.encode_fp16(x, r, SR).to(tl.int16), mask=mask)
    elif FMT == C_E4M3:
        tl.store(out_ptr + offs, qc.encode_e4m3(x, r, SR).to(tl.uint8), mask=mask)
    else:
        tl.store(out_ptr + offs, qc.encode_e5m2(x, r, SR).to(tl.uint8), mask=mask)


@triton.jit
def cast_dequantize_kernel(code_ptr, out_ptr, n, FMT: tl.constexpr, BLOCK: tl.constexpr):
    """codes [n] (integer view) → out fp32 [n]."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if FMT == C_BF16:
        y = qc.decode_bf16(tl.load(code_ptr + offs, mask=mask, other=0).to(tl.int32) & 0xFFFF)
    elif FMT == C_FP16:
        y = qc.decode_fp16(tl.load(code_ptr + offs, mask=mask, other=0).to(tl.int32))
    elif FMT == C_E4M3:
        y = qc.decode_e4m3(tl.load(code_ptr + offs, mask=mask, other=0).to(tl.int32))
    else:
        y = qc.decode_e5m2(tl.load(code_ptr + offs, mask=mask, other=0).to(tl.int32))
    tl.store(out_ptr + offs, y, mask=mask)


# ---------------------------------------------------------------------------------------------
# Python API
# ---------------------------------------------------------------------------------------------
def _check_input(x: torch.Tensor, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{what}: the Triton kernels take float32/float16/bfloat16 input, got {x.dtype} "
                        "(float64 is rounded once by the torch reference: use precision_lab.quant.get_quantizer)")
    if x.dim() < 1 or x.numel() == 0:
        raise ValueError(f"{what}: expected a non-empty tensor, got shape {tuple(x.shape)}")
    require_triton(x.device, what)


def _rbits_args(x: torch.Tensor, rbits: torch.Tensor | None, seed: int | None, sr: bool, what: str):
    """(rbits tensor or a dummy pointer, seed, RB mode) for a launch."""
    if not sr:
        return x, 0, RB_NONE
    if rbits is not None:
        if not isinstance(rbits, torch.Tensor) or rbits.dtype not in (torch.int32, torch.int64, torch.uint32):
            raise TypeError(f"{what}: rbits must be an int32/int64/uint32 tensor (low 16 bits used), "
                            f"got {getattr(rbits, 'dtype', type(rbits).__name__)}")
        if rbits.shape != x.shape:
            raise ValueError(f"{what}: rbits has shape {tuple(rbits.shape)}; it needs one value per element, "
                             f"shape {tuple(x.shape)}")
        return rbits.to(x.device).contiguous(), 0, RB_TENSOR
    if seed is None:
        raise ValueError(f"{what} rounds stochastically: pass rbits (integer tensor of x's shape, low 16 bits "
                         "used) or seed (Philox, counter = flat element index // 8)")
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"{what}: seed must be in [0, 2**63), got {seed}")
    return x, int(seed), RB_PHILOX


def nvfp4_quantize(x: torch.Tensor, *, sr: bool = False, granularity: str = "matrix",
                   rbits: torch.Tensor | None = None, seed: int | None = None,
                   check_finite: bool = True, tile: int | None = None, num_warps: int | None = None,
                   layout: str | None = None) -> QTensor:
    """NVFP4-quantize x [..., R, C] (C divisible by 16; a vector [C] is one 1×C matrix).

    granularity: "matrix" (one global scale per [R, C] matrix, format "nvfp4") or "row" (one per
    row, "nvfp4-row"). Returns QTensor(data uint8 [..., R, C/2] with element 2i in the low nibble,
    scale float8_e4m3fn [..., R, C/16], global_scale fp32 [...] or [..., R] = S_dec), equal bit for
    bit to ``get_quantizer(fmt).quantize``. ``sr=True`` rounds the E2M1 codes stochastically with
    ``rbits`` (x's shape, low 16 bits used) or Philox(``seed``, flat element index // 8); block scales
    are always RNE. Non-finite input raises ValueError (checked from the global scales the kernel
    marks with NaN; ``check_finite=False`` skips that host sync and leaves NaN scales instead).
    Launch tuning (results are identical): ``tile`` = elements a program holds at once (a power of
    two >= 16; default: the whole group if it has <= 8192 elements, read once, else 4096 with two
    passes), ``num_warps`` (default 4), ``layout``: "block" (``nvfp4_quantize_rows_kernel``, one
    thread per 16-element block; the default: H200 76 % of the copy ceiling with SR, 97 % without)
    or "tile" (``nvfp4_quantize_kernel``, a block over 4 threads; 55 % with SR, 81 % without, in the
    same run). See kernels/quant/README.md.
    """
    name = "nvfp4" + ("-row" if granularity == "row" else "") + ("-sr" if sr else "")
    _check_input(x, name)
    if granularity not in ("matrix", "row"):
        raise ValueError(f"{name}: the Triton kernel supports granularity 'matrix' and 'row', got {granularity!r} "
                         "(use precision_lab.quant.get_quantizer for tiles)")
    shape = tuple(x.shape)
    C = shape[-1]
    if C % NVFP4_BLOCK:
        raise ValueError(f"{name}: the last-axis (C) size {C} is not divisible by the block size {NVFP4_BLOCK}; "
                         f"pad it to a multiple of {NVFP4_BLOCK} (no silent truncation or padding is done)")
    R = shape[-2] if len(shape) >= 2 else 1
    n = C if granularity == "row" else R * C  # elements sharing one global scale
    gshape = shape[:-1] if granularity == "row" else shape[:-2]
    x = x.contiguous()
    m = x.numel() // n
    r_arg, seed_arg, rb = _rbits_args(x, rbits, seed, sr, name)
    data = torch.empty(*shape[:-1], C // 2, dtype=torch.uint8, device=x.device)
    scale = torch.empty(*shape[:-1], C // NVFP4_BLOCK, dtype=torch.float8_e4m3fn, device=x.device)
    gscale = torch.empty(gshape, dtype=torch.float32, device=x.device)
    if tile is None:
        block = max(triton.next_power_of_2(n), 16)
        block = block if block <= MAX_ONE_TILE else TWO_PASS_TILE
    else:
        if tile < 16 or tile & (tile - 1):
            raise ValueError(f"{name}: tile must be a power of two >= 16, got {tile}")
        block = tile
    one_tile = block >= n
    layout = layout or "block"
    if layout == "block":
        # int64 words of 16 codes: C/2 bytes per row is a multiple of 8, and data is freshly allocated
        nvfp4_quantize_rows_kernel[(m,)](
            x, data.view(torch.int64), scale.view(torch.uint8), gscale, r_arg, seed_arg, n,
            BLOCK=block, ONE_TILE=one_tile, SR=sr, RB=rb, num_warps=num_warps or 4, enable_fp_fusion=False,
        )
    elif layout == "tile":
        # (8 warps with SR: 4 spill there, see kernels/quant/README.md)
        nvfp4_quantize_kernel[(m,)](
            x, data, scale.view(torch.uint8), gscale, r_arg, seed_arg, n,
            BLOCK=block, ONE_TILE=one_tile, SR=sr, RB=rb, num_warps=num_warps or (8 if sr else 4),
            enable_fp_fusion=False,
        )
    else:
        raise ValueError(f"{name}: layout must be 'block' or 'tile', got {layout!r}")
    if check_finite and bool(torch.isnan(gscale).any()):
        bad = ~torch.isfinite(x)
        first = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"{name}: input holds {int(bad.sum())} non-finite value(s) (first at index {first}: "
                         f"{x[first].item()}); this format computes scales from the data and has no NaN/Inf encoding")
    return QTensor(data, scale, gscale, shape, name, {"implementation": "triton"})


def nvfp4_dequantize(qt: QTensor) -> torch.Tensor:
    """NVFP4 QTensor (matrix or row global scales; from ``nvfp4_quantize`` or the torch reference)
    → float32 tensor of qt.shape: value(code) · (f32(s) · S_dec)."""
    require_triton(qt.data.device, "NVFP4 dequantize")
    shape = tuple(qt.shape)
    C = shape[-1]
    n = qt.data.numel() * 2 // max(1, qt.global_scale.numel())  # elements per global scale
    m = qt.global_scale.numel()
    if m * n != math.prod(shape) or n % NVFP4_BLOCK or (n != C and n % C):
        raise ValueError(f"nvfp4_dequantize: global scale shape {tuple(qt.global_scale.shape)} does not match "
                         f"a matrix or row granularity of shape {shape}")
    out = torch.empty(shape, dtype=torch.float32, device=qt.data.device)
    block = min(max(triton.next_power_of_2(n), 16), 4096)
    nvfp4_dequantize_kernel[(m, triton.cdiv(n, block))](
        qt.data.contiguous(), qt.scale.contiguous().view(torch.uint8),
        qt.global_scale.contiguous().to(torch.float32), out, n, BLOCK=block, num_warps=4, enable_fp_fusion=False,
    )
    return out


def cast_quantize(x: torch.Tensor, fmt: str, *, sr: bool = False, rbits: torch.Tensor | None = None,
                  seed: int | None = None) -> torch.Tensor:
    """Round x to ``fmt`` in {"bf16", "fp16", "e4m3", "e5m2"} (RNE, or SR with rbits/seed).

    Returns a tensor of x's shape in the storage dtype (bfloat16, float16, float8_e4m3fn,
    float8_e5m2). FP8 saturates to ±max (±inf too); bf16/fp16 overflow to ±inf; NaN → canonical NaN.
    """
    _check_input(x, f"cast to {fmt}")
    if fmt not in _CAST_FORMATS:
        raise ValueError(f"cast_quantize: unknown element format {fmt!r}; known: {', '.join(_CAST_FORMATS)}")
    fmt_id, dtype, view = _CAST_FORMATS[fmt]
    x = x.contiguous()
    r_arg, seed_arg, rb = _rbits_args(x, rbits, seed, sr, f"{fmt}-sr")
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    n = x.numel()
    cast_quantize_kernel[(triton.cdiv(n, CAST_BLOCK),)](
        x, out.view(view), r_arg, seed_arg, n, FMT=fmt_id, SR=sr, RB=rb, BLOCK=CAST_BLOCK, num_warps=8,
        enable_fp_fusion=False,
    )
    return out


def cast_dequantize(codes: torch.Tensor) -> torch.Tensor:
    """bfloat16/float16/float8_e4m3fn/float8_e5m2 tensor → float32 (decoded with the codecs)."""
    require_triton(codes.device, "Triton dequantize")
    for fmt_id, dtype, view in _CAST_FORMATS.values():  # noqa: B007 (the match is used after the loop)
        if codes.dtype == dtype:
            break
    else:
        raise TypeError(f"cast_dequantize: unsupported dtype {codes.dtype}; expected one of "
                        f"{', '.join(str(v[1]) for v in _CAST_FORMATS.values())}")
    codes = codes.contiguous()
    out = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    n = codes.numel()
    cast_dequantize_kernel[(triton.cdiv(n, CAST_BLOCK),)](codes.view(view), out, n, FMT=fmt_id, BLOCK=CAST_BLOCK,
                                                         num_warps=8, enable_fp_fusion=False)
    return out


# registry name → how the Triton path serves it
_FP8 = {"fp8e4m3": ("e4m3", torch.float8_e4m3fn), "fp8e5m2": ("e5m2", torch.float8_e5m2)}
TRITON_FORMATS = tuple(
    [f"nvfp4{g}{s}" for g in ("", "-row") for s in ("", "-sr")]
    + [f"{f}{s}" for f in ("fp8e4m3", "fp8e5m2", "bf16", "fp16") for s in ("", "-sr")]
)


def _format_name(fmt: str | Quantizer) -> str:
    return fmt if isinstance(fmt, str) else fmt.short_str()


def quantize(x: torch.Tensor, fmt: str | Quantizer, *, rbits: torch.Tensor | None = None,
             seed: int | None = None, fallback: bool | None = None) -> QTensor:
    """``get_quantizer(fmt).quantize(x, rbits, seed)`` served by the Triton kernels where they can run.

    fmt: a name in ``TRITON_FORMATS`` (or a built-in Quantizer with such a ``short_str()``).
    Returns the same QTensor as the reference, bit for bit; ``qt.meta["implementation"]`` says what
    served the call: ``"triton"`` or ``"torch-reference"`` (then ``qt.meta["fallback_reason"]`` says why).
    fallback: None (default) serves CPU tensors with the torch reference when Triton cannot run
        there (no GPU and ``TRITON_INTERPRET`` is not 1): same codes and scales, slower. Formats or
        inputs without a Triton path (e.g. "nvfp4-2d", scaled FP8, float64 input) raise
        NotImplementedError. True: the reference serves those too. False: never fall back.
    """
    name = _format_name(fmt)
    why = _fallback_reason("quantize", name, getattr(x, "dtype", type(x).__name__), getattr(x, "device", None),
                           fallback)
    if why is not None:
        qt = get_quantizer(fmt).quantize(x, rbits=rbits, seed=seed)
        qt.meta["implementation"] = "torch-reference"
        qt.meta["fallback_reason"] = why
        return qt
    sr = name.endswith("-sr")
    base = name[:-3] if sr else name
    if base.startswith("nvfp4"):
        return nvfp4_quantize(x, sr=sr, granularity="row" if base == "nvfp4-row" else "matrix", rbits=rbits, seed=seed)
    if base in _FP8:
        codes = cast_quantize(x, _FP8[base][0], sr=sr, rbits=rbits, seed=seed).view(torch.uint8)
        return QTensor(codes, None, None, tuple(x.shape), name, {"implementation": "triton"})
    data = cast_quantize(x, base, sr=sr, rbits=rbits, seed=seed)
    return QTensor(data, None, None, tuple(x.shape), name, {"implementation": "triton"})


def _fallback_reason(what: str, name: str, dtype, device, fallback: bool | None) -> str | None:
    """None when the Triton path serves; else why the torch reference serves instead. Raises
    NotImplementedError when ``fallback`` does not allow the reference for that reason."""
    automatic = False
    if name not in TRITON_FORMATS:
        why = f"format {name!r} has no Triton kernel"
    elif dtype not in (torch.float32, torch.float16, torch.bfloat16):
        why = f"input dtype {dtype}"
    else:
        why = triton_unavailable_reason(device)
        automatic = True  # same codes from the reference, so serving them is no surprise
    if why is None or fallback or (fallback is None and automatic):
        return why
    hint = "" if fallback is False else "; pass fallback=True to use the torch reference"
    raise NotImplementedError(f"Triton {what}: {why} (Triton formats: {', '.join(TRITON_FORMATS)}){hint}")


def dequantize(qt: QTensor, *, fallback: bool | None = None) -> torch.Tensor:
    """QTensor of a format in ``TRITON_FORMATS`` → float32 of qt.shape (Triton decode).

    fallback: as in ``quantize``. By default a QTensor on a device where Triton cannot run is
    decoded by the torch reference (``get_quantizer(qt.format).dequantize``: the same values).
    """
    name = qt.format
    if _fallback_reason("dequantize", name, torch.float32, qt.data.device, fallback) is not None:
        return get_quantizer(name).dequantize(qt)
    base = name[:-3] if name.endswith("-sr") else name
    if base in ("nvfp4", "nvfp4-row"):
        return nvfp4_dequantize(qt)
    if base in _FP8:
        return cast_dequantize(qt.data.view(_FP8[base][1]))
    return cast_dequantize(qt.data)
