"""The NVFP4 read path: E2M1 decoded through fp16 bit patterns (kernels/quant/codecs.py) and the
decode kernels' readers built on it (kernels/common/state_io.py), against the torch reference.

Exhaustive where it is cheap: every nibble, every byte in every position of a 32-bit word, and every
(byte, E4M3 scale byte) pair under global scales that cover both sides of the 2^14 fold
(codecs.NVFP4_FOLD_LIMIT), subnormal block scales, zero, NaN, inf and the largest scales. Dequantized
values are compared as int32 bit patterns. On CPU the kernels run under TRITON_INTERPRET=1
(conftest); on a GPU the same tests run the compiled code.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import C_NVFP4
from precision_lab.kernels.common.launch import FP4_DECODES, check_fp4_decode, resolve_fp4_decode
from precision_lab.kernels.common.read_probe import nvfp4_read_products
from precision_lab.kernels.common.state_io import load_state
from precision_lab.kernels.decode_state import PackedState
from precision_lab.kernels.quant import codecs as qc
from precision_lab.kernels.quant import triton_quant as tq
from precision_lab.kernels.quant.reference import dequantize as ref_dequantize
from precision_lab.quant import QTensor, rounding

from tests._scripts import load_script

kernel_resources = load_script("kernel_resources")

# numpy (the interpreter) warns where products overflow to inf or meet NaN: those are test cases
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

F32_MAX = torch.finfo(torch.float32).max


def _s_dec_of(amax: float) -> float:
    """S_dec of a matrix with this amax, through the quantizer's chain (fp32)."""
    s_enc = torch.tensor(2688.0) / torch.tensor(amax, dtype=torch.float32)
    return float(1.0 / s_enc)


# global decode scales: the fast (folded) side of the 2^14 fold and its edge, the unfolded side up to
# the largest S_dec the chain makes (amax = FLT_MAX) and beyond, the fp32 subnormal / zero / sign /
# non-finite corners
GLOBAL_SCALES = [1.0, 1 / 3, 0.0, -0.0, 2.0**-149, 2.0**-126, 2.0**-100, -1.5, 2.0**100,
                 2.0**105 * (1 - 2.0**-24), 2.0**105, 2.0**114, _s_dec_of(F32_MAX), -(2.0**110), F32_MAX,
                 float("inf"), float("nan")]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().cpu().view(torch.int32)


def assert_same_values(got: torch.Tensor, want: torch.Tensor, what: str, nan_free_payload=None) -> None:
    """fp32 tensors equal bit for bit (so ±0 and NaN signs count), except where ``nan_free_payload``
    (a bool mask) is set, or anywhere on a GPU: there a NaN only has to meet a NaN. (When both factors
    of a product are NaN, IEEE 754 leaves open whose payload and sign come out: x86 picks an operand by
    instruction order; NVIDIA GPUs return one canonical NaN.)"""
    on_gpu = got.device.type == "cuda"
    got, want = got.cpu(), want.cpu()
    assert got.shape == want.shape and got.dtype == want.dtype == torch.float32, what
    free = torch.zeros_like(want, dtype=torch.bool) if nan_free_payload is None else nan_free_payload.cpu()
    if on_gpu:
        free = torch.ones_like(free)
    either_nan = torch.isnan(got) | torch.isnan(want)
    loose = free & either_nan
    assert torch.equal(torch.isnan(got)[loose], torch.isnan(want)[loose]), f"{what}: NaN where the reference has none"
    bad = (_bits(got) != _bits(want)) & ~loose
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {tuple(torch.nonzero(bad)[0].tolist())}: "
        f"got {got[bad][0].item()!r} want {want[bad][0].item()!r}")


def exhaustive_nvfp4(device, scales=GLOBAL_SCALES):
    """QTensor [M, 256, 512]: matrix m has global scale ``scales[m]``; row r holds the 256 byte values in
    order (every E2M1 pair) under block scale byte r in all its 32 blocks (all E4M3 codes, NaN 0x7F
    and 0xFF included)."""
    M = len(scales)
    data = torch.arange(256, dtype=torch.uint8).repeat(M, 256, 1)
    scale = torch.arange(256, dtype=torch.uint8)[None, :, None].expand(M, 256, 32).contiguous()
    gs = torch.tensor(scales, dtype=torch.float32)
    return QTensor(data.to(device), scale.view(torch.float8_e4m3fn).to(device), gs.to(device), (M, 256, 512), "nvfp4")


def nan_nan_mask(qt: QTensor) -> torch.Tensor:
    """Elements whose block scale byte and global scale are both NaN ([M, R, C])."""
    M, R, C = qt.shape
    row_nan = (qt.scale.view(torch.uint8).cpu()[..., 0] & 0x7F) == 0x7F  # [M, R]
    return (row_nan & torch.isnan(qt.global_scale.cpu())[:, None])[..., None].expand(M, R, C)


# ------------------------------------------------------------------------------------------------
# element decode: every nibble, every byte, every byte in every word position
# ------------------------------------------------------------------------------------------------
@triton.jit
def _e2m1_probe_kernel(code_ptr, val_ptr, scaled_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    code = tl.load(code_ptr + offs, mask=m, other=0)
    tl.store(val_ptr + offs, qc.decode_e2m1(code), mask=m)
    tl.store(scaled_ptr + offs, qc.decode_e2m1_scaled(code), mask=m)


@triton.jit
def _pairs_probe_kernel(byte_ptr, even_ptr, odd_ptr, word_ptr, wout_ptr, NB: tl.constexpr, NW: tl.constexpr):
    b = tl.arange(0, NB)
    even, odd = qc.nvfp4_pairs_scaled(tl.load(byte_ptr + b))
    tl.store(even_ptr + b, even)
    tl.store(odd_ptr + b, odd)
    w = tl.arange(0, NW)
    words = tl.load(word_ptr + w).to(tl.uint32, bitcast=True)
    for k in tl.static_range(4):
        lo, hi = qc.nvfp4_word_pairs_scaled(words, k)
        tl.store(wout_ptr + 8 * w + k, lo)
        tl.store(wout_ptr + 8 * w + k + 4, hi)


def test_e2m1_decode_every_code(device):
    """All 256 int32 codes (the bits above the nibble must be ignored): decode_e2m1 is the E2M1 value
    and decode_e2m1_scaled that value · 2^-14, bit for bit (±0 and the subnormal ±0.5 included)."""
    codes = torch.arange(256, dtype=torch.int32)
    val = torch.full((256,), float("nan"), device=device)
    scaled = torch.full((256,), float("nan"), device=device)
    _e2m1_probe_kernel[(1,)](codes.to(device), val, scaled, 256, BLOCK=256)
    want = rounding.decode(codes & 0xF, rounding.E2M1)
    assert_same_values(val, want, "decode_e2m1")
    assert_same_values(scaled, want * 2.0**-14, "decode_e2m1_scaled")
    assert _bits(scaled)[8].item() == -(2**31)  # code 8 is -0: the sign survives


def test_nvfp4_pairs_every_byte_in_every_position(device):
    """``nvfp4_pairs_scaled`` on all 256 bytes, and ``nvfp4_word_pairs_scaled`` on words holding every
    byte at every one of the 4 positions (little-endian: byte j of a word holds elements 2j, 2j+1)."""
    by = torch.arange(256, dtype=torch.uint8)
    words = torch.cat([torch.roll(by, -s) for s in range(4)])  # 1024 bytes: each byte at each position
    even, odd = (torch.full((256,), float("nan"), device=device) for _ in range(2))
    wout = torch.full((2048,), float("nan"), device=device)
    _pairs_probe_kernel[(1,)](by.to(device), even, odd, words.view(torch.int32).to(device), wout, NB=256, NW=256)
    e2m1 = lambda c: rounding.decode(c, rounding.E2M1) * 2.0**-14  # noqa: E731
    assert_same_values(even, e2m1(by & 0xF), "nvfp4_pairs_scaled even (low nibble)")
    assert_same_values(odd, e2m1(by >> 4), "nvfp4_pairs_scaled odd (high nibble)")
    want = e2m1(rounding.unpack_nibbles(words))  # element order of the row
    assert_same_values(wout, want, "nvfp4_word_pairs_scaled")



_B32_OPS = {"shl.b32": np.left_shift, "shr.b32": np.right_shift, "and.b32": np.bitwise_and, "or.b32": np.bitwise_or}


def _run_ptx(lines: list[str], regs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate the straight-line PTX that ``fp4_decode="mma-ptx"`` generates, on every lane at once:
    ``regs`` maps operand names to uint64 arrays of 32-bit values, one entry per lane (updated in
    place); returns the accumulator $0..$3 per lane (float64). Integer instructions (shl, shr, and, or
    .b32; ``prmt.b32`` in its default mode) on the bits; f16x2 values as numpy float16
    (``mul.rn.f16x2`` rounds as the hardware does; the block scales' products are exact anyway);
    ``cvt.rn.f16x2.e4m3x2`` through the E4M3 decode; ``mma.sync.m16n8k16`` (32 lanes only) by the
    PTX fragment layout (lane 4g + t: A rows g, g + 8 at k 2t, 2t + 1 and 2t + 8, 2t + 9; B the same
    k rows, column g; D rows g, g + 8 at columns 2t, 2t + 1), accumulated in float64."""
    n = len(next(iter(regs.values())))
    acc = [np.zeros(n) for _ in range(4)]
    g, t = np.arange(n) // 4, np.arange(n) % 4

    def val(x):
        return regs[x] if x in regs else np.full(n, int(x, 0), dtype=np.uint64)

    def halves(x):  # 32-bit words → (low, high) float16
        return ((x & 0xFFFF).astype(np.uint16).view(np.float16), (x >> 16).astype(np.uint16).view(np.float16))

    def pack(lo, hi):
        return lo.astype(np.float16).view(np.uint16).astype(np.uint64) | \
            (hi.astype(np.float16).view(np.uint16).astype(np.uint64) << 16)

    e4m3 = rounding.decode(torch.arange(256), rounding.E4M3).to(torch.float16).numpy()
    for line in (x.strip() for x in lines):
        if line in ("{", "}") or line.startswith(".reg") or line.startswith("mov.f32"):
            continue
        op, args = line.rstrip(";").split(" ", 1)
        if op.startswith("mma.sync"):
            assert n == 32, "mma.sync is a warp's instruction"
            _, a_regs, b_regs, _ = [[r.strip() for r in grp.split(",")] for grp in re.findall(r"\{([^}]*)\}", args)]
            A, B = np.zeros((16, 16)), np.zeros((16, 8))
            for i, r in enumerate(a_regs):  # a0 (row g, k 2t, 2t + 1), a1 (row g + 8), a2 (row g, k 2t + 8..), a3
                row, k = g + 8 * (i % 2), 2 * t + 8 * (i // 2)
                A[row, k], A[row, k + 1] = halves(val(r))
            for i, r in enumerate(b_regs):
                B[2 * t + 8 * i, g], B[2 * t + 8 * i + 1, g] = halves(val(r))
            D = A @ B
            acc = [acc[0] + D[g, 2 * t], acc[1] + D[g, 2 * t + 1], acc[2] + D[g + 8, 2 * t],
                   acc[3] + D[g + 8, 2 * t + 1]]
            continue
        d, *src = [a.strip() for a in args.split(",")]
        if op == "mov.b32":  # {l16, h16}, t: split a register into its halves
            lo16, hi16 = d.strip(" {"), src[0].strip(" }")
            regs[lo16], regs[hi16] = val(src[1]) & 0xFFFF, val(src[1]) >> 16
        elif op == "cvt.rn.f16x2.e4m3x2":
            x = val(src[0]).astype(np.int64)
            regs[d] = pack(e4m3[x & 0xFF], e4m3[(x >> 8) & 0xFF])
        elif op == "mul.rn.f16x2":
            (alo, ahi), (blo, bhi) = halves(val(src[0])), halves(val(src[1]))
            regs[d] = pack(alo * blo, ahi * bhi)
        elif op == "prmt.b32":  # result byte i = byte (selector nibble i) of {b, a}
            pool, sel = val(src[0]) | (val(src[1]) << np.uint64(32)), int(src[2], 0)
            regs[d] = sum(((pool >> np.uint64(8 * ((sel >> 4 * i) & 7))) & 0xFF) << np.uint64(8 * i) for i in range(4))
        else:
            regs[d] = _B32_OPS[op](val(src[0]), val(src[1])) & 0xFFFFFFFF
    return acc


def test_mma_ptx_decode_every_nibble_in_every_position():
    """The inline-PTX code-word decode of ``fp4_decode="mma-ptx"`` (``_mma_sync_decode``), evaluated
    instruction by instruction on the CPU: on words holding every byte at every position, register K
    holds elements 8c+K (low half) and 8c+K+4 (high half) as the fp16 bit patterns of E2M1 value ·
    2^-14, ±0 and the subnormal ±0.5 included (the patterns ``nvfp4_word_pairs_scaled`` reads)."""
    from precision_lab.kernels.common.state_io import _mma_sync_decode

    by = torch.arange(256, dtype=torch.uint8)
    words = torch.cat([torch.roll(by, -s) for s in range(4)]).view(torch.int32)
    want = (rounding.decode(rounding.unpack_nibbles(words.view(torch.uint8)), rounding.E2M1) * 2.0**-14)
    want = want.to(torch.float16).view(torch.int16).to(torch.int32).reshape(-1, 8) & 0xFFFF
    regs = {"w": words.numpy().view(np.uint32).astype(np.uint64)}
    _run_ptx(_mma_sync_decode("w", "p"), regs)
    got = torch.zeros_like(want)
    for K in range(4):
        got[:, K] = torch.from_numpy((regs[f"p{K}"] & 0xFFFF).astype(np.int64))
        got[:, K + 4] = torch.from_numpy((regs[f"p{K}"] >> 16).astype(np.int64))
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{len(bad)} wrong patterns, first at (word, element) {bad[0].tolist()}: " \
        f"{got[tuple(bad[0])].item():#06x} != {want[tuple(bad[0])].item():#06x}"


def test_mma_ptx_asm_computes_the_tile_products():
    """The whole inline-PTX block of ``fp4_decode="mma-ptx"`` (``_MMA_SYNC_ASM``: decode, block scales,
    eight ``mma.sync``), evaluated for one warp on the CPU with each lane's operands laid out as
    ``_nvfp4_dot_mma_sync`` documents them (lane 4g + t, register q: words 4t + q of rows g and g + 8,
    the 16-bit scale pair 2t, 2t + 1 of those rows, B pairs K of word 4t + q for column g). Columns
    0 and 2 of B hold two vectors (fp16 values, so their lo columns are 0): the sums the kernel takes
    (lane t = 0: d0 + d1 row g, d2 + d3 row g + 8; t = 1 for the second vector), times the 2^14
    the decode leaves out, must equal the dequantized m-tile times each vector, computed apart in
    float64. Every product is exact and so is
    the float64 sum of these few terms, so the comparison is for equality."""
    from precision_lab.kernels.common.state_io import _MMA_SYNC_ASM

    gen = torch.Generator().manual_seed(7)
    codes = torch.randint(0, 256, (16, 64), dtype=torch.uint8, generator=gen)  # one m-tile, 128 elements
    scales = torch.randint(0x08, 0x48, (16, 8), dtype=torch.uint8, generator=gen)  # E4M3 0.0156..2.25 range
    vals = rounding.decode(rounding.unpack_nibbles(codes), rounding.E2M1).double()  # [16, 128]
    vals *= rounding.decode(scales.long(), rounding.E4M3).double().repeat_interleave(16, 1)
    vecs = (torch.randint(-64, 65, (2, 128), generator=gen).double() / 32).numpy()  # exact in fp16
    words = codes.view(torch.int32).numpy().view(np.uint32)  # [16, 16]
    pairs = scales.numpy().view(np.uint16).astype(np.uint32)  # [16, 4]: bytes 2t, 2t + 1
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    col = np.where(g == 0, 0, np.where(g == 2, 1, -1))  # B column g: 0 v (hi), 2 w (hi), the rest 0
    ops = [words[g, 4 * t + q] for q in range(4)] + [words[g + 8, 4 * t + q] for q in range(4)]
    ops += [pairs[g, t]] * 4 + [pairs[g + 8, t]] * 4
    for K in range(4):
        for q in range(4):
            c = 4 * t + q
            x = np.where(col >= 0, vecs[np.maximum(col, 0), 8 * c + K], 0.0).astype(np.float16)
            y = np.where(col >= 0, vecs[np.maximum(col, 0), 8 * c + K + 4], 0.0).astype(np.float16)
            ops.append(x.view(np.uint16).astype(np.uint32) | (y.view(np.uint16).astype(np.uint32) << 16))
    d = _run_ptx(_MMA_SYNC_ASM.value.splitlines(), {f"${i + 4}": op.astype(np.uint64) for i, op in enumerate(ops)})
    want = vals.numpy() @ vecs.T  # [16 rows, 2 vectors]
    for v, lane_t in ((0, 0), (1, 1)):
        got = np.zeros(16)
        on = t == lane_t
        got[g[on]] = (d[0] + d[1])[on]
        got[g[on] + 8] = (d[2] + d[3])[on]
        assert np.array_equal(got * 2.0**14, want[:, v]), (v, got * 2.0**14, want[:, v])


# ------------------------------------------------------------------------------------------------
# dequantize: every (byte, scale byte) pair under every global scale, bit for bit
# ------------------------------------------------------------------------------------------------
@triton.jit
def _codes_probe_kernel(code_ptr, scale_ptr, gs_ptr, out_ptr, NB: tl.constexpr):
    """One program per (matrix, 16 blocks): nvfp4_dequantize_codes on unpacked nibbles."""
    m, j = tl.program_id(0), tl.program_id(1)
    blk = j * NB + tl.arange(0, NB)
    per = tl.num_programs(1) * NB  # blocks per matrix
    idx = (m * per + blk)[:, None] * 16 + tl.arange(0, 16)[None, :]
    codes = tl.load(code_ptr + idx).to(tl.int32)
    sc = tl.load(scale_ptr + m * per + blk).to(tl.int32)
    tl.store(out_ptr + idx, qc.nvfp4_dequantize_codes(codes, sc, tl.load(gs_ptr + m)))


def test_nvfp4_dequantize_exhaustive(device):
    """The dequantize kernel (``nvfp4_dequantize_blocks``, packed bytes) and ``nvfp4_dequantize_codes``
    (unpacked nibbles, the scans' round trip) equal the torch reference in every bit for all 256
    bytes × 256 scale bytes × GLOBAL_SCALES."""
    qt = exhaustive_nvfp4(device)
    want = ref_dequantize(qt)
    loose = nan_nan_mask(qt)
    assert_same_values(tq.dequantize(qt), want, "nvfp4 dequantize kernel", loose)
    M = len(GLOBAL_SCALES)
    codes = rounding.unpack_nibbles(qt.data.cpu()).to(device)  # [M, 256, 512]
    out = torch.full((M, 256, 512), float("nan"), device=device)
    _codes_probe_kernel[(M, 256 * 32 // 64)](codes, qt.scale.view(torch.uint8), qt.global_scale, out, NB=64)
    assert_same_values(out, want, "nvfp4_dequantize_codes", loose)


def test_fold_limit_is_where_the_scaled_block_scale_would_overflow():
    """The folded branch serves |s_dec| < NVFP4_FOLD_LIMIT: there even the largest block scale
    (448 · s_dec) times 2^14 stays finite, while one step above the limit's 2^9 headroom it would not
    (the exhaustive test runs scales on both sides)."""
    limit = float(qc.NVFP4_FOLD_LIMIT.value)
    below = torch.tensor(limit * (1 - 2.0**-24), dtype=torch.float32)
    y = torch.tensor(448.0) * below
    assert torch.isfinite(y * 2.0**14) and torch.isfinite(y * float(qc.E2M1_UNIT.value))
    assert not torch.isfinite(torch.tensor(2.0**114, dtype=torch.float32) * 2.0**14)  # the case it avoids
    assert 2.0**105 * 448 < 2.0**114  # 448 < 2^9
    assert min(abs(s) for s in GLOBAL_SCALES if abs(s) >= limit) == limit
    assert any(0 < abs(s) < limit for s in GLOBAL_SCALES)


# ------------------------------------------------------------------------------------------------
# the decode kernels' readers
# ------------------------------------------------------------------------------------------------
def exhaustive_pool(device, scales):
    """A PackedState nvfp4 pool [S = len(scales), H = 1, 256, 512] with the exhaustive codes."""
    qt = exhaustive_nvfp4(device, scales)
    S = len(scales)
    return PackedState("nvfp4", qt.data.reshape(S, 1, 256, 256).contiguous(),
                       qt.scale.view(torch.uint8).reshape(S, 1, 256, 32).contiguous(),
                       qt.global_scale.reshape(S, 1).contiguous(), 256, 512), qt


@triton.jit
def _load_state_probe_kernel(d_ptr, sc_ptr, gs_ptr, s_d, s_sc, s_gs, out_ptr, R, C,
                             FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr):
    i_r, slot = tl.program_id(0), tl.program_id(1)
    rows = i_r * BR + tl.arange(0, BR)
    m_r = rows < R
    tile = load_state(d_ptr, sc_ptr, gs_ptr, slot.to(tl.int64), s_d, s_sc, s_gs, 0, rows, m_r, R, C, FMT, BR, BC, HW)
    cols = tl.arange(0, BC)
    # every row of the tile is stored, masked ones too (a launch whose row blocks cover exactly R rows
    # has none; the FP8 test's has, and checks that they read as 0)
    tl.store(out_ptr + (slot * R + rows)[:, None] * C + cols[None, :], tile, mask=(cols < C)[None, :])


def test_load_state_nvfp4_exhaustive(device):
    """``load_state`` (flush, verify and conventional steps) decodes every code pair under every scale
    byte and global scale to the reference's bits."""
    pool, qt = exhaustive_pool(device, GLOBAL_SCALES)
    S = len(GLOBAL_SCALES)
    out = torch.full((S, 256, 512), float("nan"), device=device)
    d, sc, gs, s_d, s_sc, s_gs = pool.kernel_args()
    _load_state_probe_kernel[(256 // 16, S)](d, sc, gs, s_d, s_sc, s_gs, out, 256, 512, FMT=C_NVFP4, BR=16, BC=512,
                                             HW=out.is_cuda)
    assert_same_values(out, pool.dequantize()[:, 0], "load_state nvfp4", nan_nan_mask(qt))


@pytest.mark.parametrize("fmt", ["fp8e4m3", "fp8e5m2"])
def test_load_state_fp8_every_code(fmt, device):
    """``load_state`` of an FP8 pool (the flushes' and conventional steps' FP8 checkpoints) decodes
    every code byte to the reference's value: the integer codec on CPU, the hardware FP8 → f16
    conversion in compiled GPU kernels (where a NaN code only has to come back as a NaN). Rows past
    R (masked) read as +0."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(1, 1, 16, 16).to(device)
    pool = PackedState(fmt, codes, None, None, 16, 16)
    out = torch.full((1, 32, 16), float("nan"), device=device)
    d, sc, gs, s_d, s_sc, s_gs = pool.kernel_args()
    _load_state_probe_kernel[(1, 1)](d, sc, gs, s_d, s_sc, s_gs, out, 16, 16, FMT=pool.code, BR=32, BC=16,
                                     HW=out.is_cuda)
    want = pool.dequantize()[:, 0]
    assert torch.isnan(want).sum() == (2 if fmt == "fp8e4m3" else 6)  # the formats' NaN codes are reached
    assert_same_values(out[:, :16], want, f"load_state {fmt}")
    assert_same_values(out[:, 16:], torch.zeros(1, 16, 16), f"load_state {fmt}, masked rows")


@pytest.mark.parametrize("fp4", FP4_DECODES)
def test_read_state_dot_nvfp4_every_code(fp4, device):
    """``read_state_dot`` (the non-flush step's S v and S w straight from the codes) against float64
    dot products of the reference values, over every code pair and scale byte. The fp16-pattern
    decode reads the codes as words in another element order; its sums differ from the reference only
    by fp32 rounding. ``fp4="ptx"`` is compiled on a GPU (the interpreter runs the fp16 path); ``"mma"``
    (tensor-core products, fp32 v split into two fp16 parts, bf16 w in one) runs everywhere; "mma-ptx"
    needs rows of 128 elements and runs as "mma" on these of 512."""
    scales = [1.0, 1 / 3, 0.0, 2.0**-60, 2.0**60]
    pool, _ = exhaustive_pool(device, scales)
    C = 512
    g = torch.Generator().manual_seed(0)
    v, w = torch.randn(C, generator=g), torch.randn(C, generator=g).to(torch.bfloat16)
    sv, sw = nvfp4_read_products(pool, v, w, fp4, device)
    vals = pool.dequantize()[:, 0].double().cpu()  # [S, R, C]
    for got, vec, name in ((sv, v, "S v"), (sw, w, "S w")):
        want = vals @ vec.double()
        bound = vals.abs() @ vec.double().abs()
        got = got.cpu().double()
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), f"{name}: NaN rows differ"  # the NaN block scales
        err = (got - want).abs()[~nan]
        assert bool((err <= 2.0**-18 * bound[~nan]).all()), f"{name}: max error {err.max().item():.3g}"
        zero = torch.tensor(scales) == 0  # on the CPU, like got
        assert torch.equal(got[zero][~nan[zero]], torch.zeros_like(got[zero][~nan[zero]]))


def _read_dot(pool: PackedState, v: torch.Tensor, w: torch.Tensor, fp4: str, device, BR: int = 16):
    """(S v, S w) [S, R] of head 0 of every slot of ``pool`` through ``read_state_dot``."""
    return nvfp4_read_products(pool, v, w, fp4, device, BR)


def _nvfp4_pool(data, scale, gscale, R, C, device):
    """A PackedState nvfp4 pool [S, 1, R, C] from its code tensors ([S, R, C/2], [S, R, C/16], [S])."""
    S = data.shape[0]
    return PackedState("nvfp4", data.reshape(S, 1, R, C // 2).contiguous().to(device),
                       scale.reshape(S, 1, R, C // 16).contiguous().to(device),
                       gscale.reshape(S, 1).to(torch.float32).contiguous().to(device), R, C)


@pytest.mark.parametrize("BR", [16, 128])
@pytest.mark.parametrize("fp4", FP4_DECODES)
def test_read_state_dot_nvfp4_column_order(fp4, BR, device):
    """Each element reaches the product with its own vector entry: row r of slot s holds one nonzero
    element, at column (r + 37 s) mod C, so S v is one product, exact in every decode. A bf16 v
    (magnitudes 2^-14 .. 2^15, within the 2^31 the tensor-core decode's fp16 operand holds exactly;
    some entries 0) gives it bit for bit; an fp32 w to 2^-21 (the tensor-core decode keeps 22 of its
    bits, or 2^-39 of the largest entry for entries far below it). A wrong element order in any decode (the word pairs of the fp16 patterns, the tensor-core
    operand's columns) breaks the equality. Row blocks of 16 and of 128 (the whole matrix)."""
    S, R, C = 2, 128, 128
    g = torch.Generator().manual_seed(3)
    col = (torch.arange(R)[None, :] + 37 * torch.arange(S)[:, None]) % C                     # [S, R]
    nib = torch.tensor([1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15])[torch.randint(0, 14, (S, R), generator=g)]
    codes = torch.zeros(S, R, C, dtype=torch.int64)
    codes.scatter_(2, col[..., None], nib[..., None])
    data = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    scale = torch.randint(0x08, 0x78, (S, R, C // 16), generator=g).to(torch.uint8)          # normal E4M3 scales
    pool = _nvfp4_pool(data, scale, torch.tensor([1.0, 2.0**-20]), R, C, device)
    mag = lambda: (1 + torch.rand(C, generator=g)) * 2.0 ** torch.randint(-14, 15, (C,), generator=g)  # noqa: E731
    sign = lambda: torch.where(torch.rand(C, generator=g) < 0.5, -1.0, 1.0)  # noqa: E731
    v = (sign() * mag()).to(torch.bfloat16)
    v[::11] = 0
    w = sign() * mag()
    sv, sw = _read_dot(pool, v, w, fp4, device, BR=BR)
    vals = pool.dequantize()[:, 0].double().cpu()                                           # [S, R, C]
    assert torch.count_nonzero(vals) == S * R
    want_v = (vals @ v.double()).float()
    assert torch.equal(sv, want_v), f"S v: {int((sv != want_v).sum())} rows differ"
    # fp32 w: 22 bits of every entry within 2^17 of the largest, below that 2^-39 of it (_mma_vector)
    want_w = vals @ w.double()
    slack = 2.0**-21 * want_w.abs() + 2.0**-38 * w.abs().max() * vals.abs().sum(-1)
    assert bool(((sw.double() - want_w).abs() <= slack).all())


def _special_pool(device, R=32, C=128):
    """NVFP4 pool of 4 slots [4, 1, R, C] with random codes and the corner cases of the read: slot 0
    plain, slot 1 with whole zero blocks and one NaN block scale (row 5, block 2), slot 2 a tiny and
    slot 3 a huge global scale."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 1, R, C, generator=g) * 2.0 ** torch.randint(-6, 7, (4, 1, R, 1), generator=g)
    x[1, 0, :, 16:48] = 0
    x[1, 0, ::3, 96:112] = 0
    pool = PackedState.quantize(x, "nvfp4")
    pool.scale[1, 0, 5, 2] = 0x7F
    pool.gscale[2] = 2.0**-120
    pool.gscale[3] = 2.0**100
    return PackedState("nvfp4", pool.data.to(device), pool.scale.to(device), pool.gscale.to(device), R, C)


def _vector_cases(C=128):
    """(name, v, w): wide dynamic ranges, zeros, NaN and infinities."""
    g = torch.Generator().manual_seed(5)
    wide = lambda lo, hi: torch.randn(C, generator=g) * 2.0 ** torch.randint(lo, hi, (C,), generator=g)  # noqa: E731
    v_nan, w_inf = wide(-8, 8), wide(-8, 8)
    v_nan[[0, 40]] = 0
    v_nan[77] = float("nan")
    w_inf[3] = float("inf")
    v_infs = torch.zeros(C)
    v_infs[9], v_infs[100] = float("inf"), float("-inf")
    return [("bf16 2^-30..2^30", wide(-30, 31).to(torch.bfloat16), wide(-12, 13).to(torch.bfloat16)),
            ("fp32 2^-60..2^60", wide(-60, 61), wide(-3, 4)),
            ("tiny and huge", wide(-130, -100), wide(90, 110)),
            ("zero", torch.zeros(C), torch.zeros(C).to(torch.bfloat16)),
            ("NaN / inf entries", v_nan, w_inf.to(torch.bfloat16)),
            ("inf of both signs", v_infs, torch.zeros(C))]


@pytest.mark.parametrize("fp4", ["mma", "mma-ptx"])
@pytest.mark.parametrize("case", range(6))
def test_read_state_dot_mma_special_values(case, fp4, device):
    """The tensor-core decodes (``fp4_decode="mma"``; "mma-ptx", compiled on a GPU, the interpreter running
    "mma") against float64 products of the stored values and against the fp16-pattern decode on the same
    inputs: zero blocks, a NaN block scale (its row is NaN), tiny and huge global scales, vectors
    spanning 2^±30 (bf16) and 2^±60 (fp32), tiny and huge vectors, a zero vector, NaN and ±inf entries.
    Rows are NaN and ±inf exactly where the fp16 decode has them; finite rows agree with float64 to
    2^-18 of Σ|e·v| plus the fp16 subnormal rounding of entries far below the vector's largest (≤ 2^-38
    · amax(v) · Σ|e| per row) plus 2^-120 (results that fp32 flushes or holds as subnormals: the tiny
    global scale times tiny vectors)."""
    name, v, w = _vector_cases()[case]
    pool = _special_pool(device)
    vals = pool.dequantize()[:, 0].double().cpu()                                           # [S, R, C]
    got = _read_dot(pool, v, w, fp4, device)
    ref = _read_dot(pool, v, w, "fp16", device)
    for k, (vec, what) in enumerate(((v, "S v"), (w, "S w"))):
        g, r = got[k].double(), ref[k].double()
        label = f"{name}: {what}"
        assert torch.equal(torch.isnan(g), torch.isnan(r)), f"{label}: NaN rows differ from the fp16 decode"
        assert torch.equal(torch.isinf(g), torch.isinf(r)), f"{label}: inf rows differ from the fp16 decode"
        assert torch.equal(g[torch.isinf(g)], r[torch.isinf(r)]), f"{label}: signs of the infinities differ"
        fin = torch.isfinite(g)
        if not bool(fin.any()):
            continue
        vd = vec.double()
        want = vals @ vd
        bound = vals.abs() @ vd.abs()
        amax = vd.abs().max()
        slack = 2.0**-18 * bound + 2.0**-38 * amax * vals.abs().sum(-1) + 2.0**-120
        err = (g - want).abs()
        assert bool((err[fin] <= slack[fin]).all()), f"{label}: error {(err[fin] / slack[fin]).max().item():.3g} × bound"
    if bool(torch.isfinite(v).all()):
        assert torch.equal(torch.nonzero(torch.isnan(got[0][1])).flatten(), torch.tensor([5]))  # the NaN block scale


def test_nvfp4_pool_must_allow_word_loads():
    """The non-flush step loads NVFP4 codes as 32-bit words: a pool view that starts off a 4-byte
    boundary is refused before any launch."""
    pool = PackedState.empty("nvfp4", 2, 1, 16, 32)
    pool.kernel_args()
    big = torch.zeros(2 * 16 * 16 + 1, dtype=torch.uint8)
    pool.data = big[1:].view(2, 1, 16, 16)
    with pytest.raises(ValueError, match="4-byte aligned"):
        pool.kernel_args()


def test_mma_ptx_runs_only_where_its_layout_holds():
    """``resolve_fp4_decode``: "mma-ptx" stays where rows are 128 elements, the pool and its slot stride
    16-byte aligned (its block scales' 2-byte aligned) and the row block whole m-tiles of at least 16 rows per warp; anywhere else the
    wrappers compile "mma" (the same products through shared memory); other names pass through."""
    pool = PackedState.empty("nvfp4", 2, 1, 128, 128)
    assert resolve_fp4_decode("mma-ptx", pool, 64, 1) == "mma-ptx"
    assert resolve_fp4_decode("mma-ptx", pool, 64, 4) == "mma-ptx"
    assert resolve_fp4_decode("mma-ptx", pool, 16, 4) == "mma"  # 4 rows per warp
    assert resolve_fp4_decode("mma-ptx", pool, 24, 1) == "mma"  # not whole m-tiles
    assert resolve_fp4_decode("mma-ptx", PackedState.empty("nvfp4", 2, 1, 128, 64), 64, 1) == "mma"
    big = torch.zeros(2 * 128 * 64 + 8, dtype=torch.uint8)
    pool.data = big[8:].view(2, 1, 128, 64)  # 8-byte aligned
    assert resolve_fp4_decode("mma-ptx", pool, 64, 1) == "mma"
    pool = PackedState.empty("nvfp4", 2, 1, 128, 128)
    scales = torch.zeros(2 * 128 * 8 + 1, dtype=torch.uint8)
    pool.scale = scales[1:].view(2, 1, 128, 8)  # block scales at an odd address
    assert resolve_fp4_decode("mma-ptx", pool, 64, 1) == "mma"
    assert resolve_fp4_decode("fp16", pool, 16, 4) == "fp16"
    with pytest.raises(ValueError, match="fp4_decode must be one of"):
        resolve_fp4_decode("table", pool, 64, 1)


def test_fp4_decode_names():
    for name in FP4_DECODES:
        check_fp4_decode(name)
    with pytest.raises(ValueError, match="fp4_decode must be one of"):
        check_fp4_decode("table")


_MMA_PTX_LAYOUTS = r'''
import re, sys, torch
sys.path.insert(0, "scripts")
import kernel_resources as kr
from precision_lab.kernels.common.formats import C_NVFP4
from precision_lab.kernels.common.read_probe import _read_state_dot_kernel
from precision_lab.kernels.decode_state import PackedState
for BR, warps in ((16, 1), (32, 2), (64, 1), (64, 4), (128, 4)):
    pool = PackedState.empty("nvfp4", 2, 1, 128, 128)
    d, sc, gs, s_d, s_sc, s_gs = pool.kernel_args()
    v, w = torch.zeros(128, dtype=torch.bfloat16), torch.zeros(128)
    out = torch.zeros(2, 128)
    ttgir, sass = kr.compiled_text(_read_state_dot_kernel, (d, sc, gs, s_d, s_sc, s_gs, v, w, out, out, 128, 128),
                                   dict(BR=BR, BC=128, HW=True, FP4="mma-ptx"), warps)
    defs = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<.*>)$", ttgir, re.M))
    asm = [line for line in ttgir.splitlines() if "elementwise_inline_asm" in line and "mma.sync" in line]
    names = {m for line in asm for m in re.findall(r"tensor<[^,>]+, (#\w+)>", line)}
    moved = sum(1 for line in ttgir.splitlines() if "ttg.convert_layout" in line
                and any(line.rstrip().split("->")[-1].find(n + ">") >= 0 for n in names))
    print(BR, warps, len(asm), sorted(defs[n] for n in names), sass.count("HMMA"), moved, sep="|")
'''


def test_mma_ptx_operands_sit_on_the_fragment_lanes():
    """``fp4_decode="mma-ptx"`` hands each lane's registers to ``mma.sync`` as they are: it is correct
    only where the compiler lays the code words out four per thread, four threads along a tile row and
    eight rows per warp (lane 4g + t), the warps along the rows, and gives every operand of the
    inline-PTX call that same layout. Compiled for sm_90 on any machine (no GPU): the layout of every
    operand and result of the call at row blocks of 16 to 128 rows and 1 to 4 warps, 16 rows per warp
    or more (what ``resolve_fp4_decode`` lets through), no layout change
    into it (the code words go from their loads to the call as loaded), and 8 products per m-tile of
    each warp."""
    if not Path(kernel_resources._BIN, "ptxas").exists():
        pytest.skip("Triton's ptxas is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-c", _MMA_PTX_LAYOUTS], cwd=root, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    for line in run.stdout.splitlines():
        BR, warps, calls, layouts, hmma, moved = line.split("|")
        BR, warps = int(BR), int(warps)
        want = ("#ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [8, 4], "
                f"warpsPerCTA = [{min(warps, BR // 16)}, {max(1, warps // (BR // 16))}], order = [1, 0]}}>")
        assert layouts == repr([want]), (line, want)
        assert int(calls) == 1 and int(hmma) == 8 * max(1, BR // 16 // warps), line
        assert int(moved) == 0, f"{line}: an operand of the call changes layout first"
