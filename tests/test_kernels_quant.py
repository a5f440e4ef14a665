"""Triton quantize/dequantize kernels vs the torch reference (precision_lab.quant), bit for bit.

On CPU the kernels run under TRITON_INTERPRET=1 (set by conftest); on a GPU the same tests run the
compiled kernels. Every comparison is on raw bytes / bit patterns (atol = rtol = 0). Outputs are
allocated poisoned (NaN / 0xFF bytes) so an element the kernel forgets to write fails the test.
"""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from precision_lab.kernels.quant import codecs as qc
from precision_lab.kernels.quant import triton_quant as tq
from precision_lab.kernels.quant.reference import dequantize as ref_dequantize
from precision_lab.kernels.quant.reference import quantize as ref_quantize
from precision_lab.quant import rounding
from precision_lab.quant.philox import flat_rbits

# the interpreter runs the kernels in numpy, which warns where the chain divides by 0 or overflows to inf
# on purpose (zero block scale → enc = FLT_MAX; x · FLT_MAX saturates in E2M1)
pytestmark = [pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


# ------------------------------------------------------------------------------------------------
# fixtures and helpers
# ------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled floats and 0xFF-filled integers, so unwritten output shows."""
    real_empty = torch.empty

    def empty(*size, **kw):
        t = real_empty(*size, **kw)
        if t.dtype.is_floating_point and t.element_size() >= 2:
            t.fill_(float("nan"))
        else:
            t.view(torch.uint8).fill_(0xFF)  # float8: 0xFF is NaN in both FP8 formats
        return t

    monkeypatch.setattr(torch, "empty", empty)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bit pattern of a tensor as an integer tensor (for exact comparisons, NaN included)."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(view)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = bits(got).cpu(), bits(want).cpu()
    bad = g != w
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {tuple(torch.nonzero(bad)[0].tolist())}: "
        f"got {int(g[bad][0])} want {int(w[bad][0])}")


def assert_same_qtensor(got, want) -> None:
    assert got.format == want.format and tuple(got.shape) == tuple(want.shape)
    assert_same_bits(got.data, want.data, f"{want.format} codes")
    for name in ("scale", "global_scale"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), f"{want.format} {name}: one side is None"
        if b is not None:
            assert_same_bits(a, b, f"{want.format} {name}")


def all_16bit(dtype: torch.dtype) -> torch.Tensor:
    """Every bit pattern of a 16-bit float as float32 (exact)."""
    return torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).to(torch.float32)


def state_like(shape, seed: int, device: str = "cpu") -> torch.Tensor:
    """fp32 values spanning ~2^±20 with per-block magnitude differences, plus exact grid points
    (ties of E2M1 and E4M3 are where implementations disagree) and zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-20, 21, shape, generator=g).float())
    grid = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.0, 3.0])  # E2M1 ties / points
    pick = torch.rand(shape, generator=g) < 0.2
    x = torch.where(pick, grid[torch.randint(0, grid.numel(), shape, generator=g)] * torch.sign(x), x)
    return x.to(device)


# ------------------------------------------------------------------------------------------------
# element codecs: every 16-bit pattern through every element format
# ------------------------------------------------------------------------------------------------
ELEMENT_FORMATS = ["fp8e4m3", "fp8e5m2", "bf16", "fp16"]


@pytest.mark.parametrize("src", [torch.float16, torch.bfloat16], ids=["fp16-inputs", "bf16-inputs"])
@pytest.mark.parametrize("fmt", ELEMENT_FORMATS)
def test_element_quantize_exhaustive_rne(fmt, src, device):
    x = all_16bit(src).to(device)
    got = tq.quantize(x, fmt)
    assert got.meta["implementation"] == "triton"
    want = ref_quantize(x, fmt)
    assert_same_qtensor(got, want)
    assert_same_bits(tq.dequantize(got), ref_dequantize(want), f"{fmt} dequantize")


@pytest.mark.parametrize("fmt", [f + "-sr" for f in ELEMENT_FORMATS])
def test_element_quantize_sr_explicit_rbits(fmt, device):
    x = all_16bit(torch.bfloat16).to(device)
    rb = torch.randint(0, 2**32, x.shape, generator=torch.Generator().manual_seed(1)).to(device)
    assert_same_qtensor(tq.quantize(x, fmt, rbits=rb), ref_quantize(x, fmt, rbits=rb))


@pytest.mark.parametrize("fmt", ["fp16-sr", "fp8e4m3-sr"])
def test_element_quantize_sr_seed_matches_philox(fmt, device):
    """In-kernel Philox (one tl.randint4x call per 8 flat elements) draws the values of quant/philox.py
    ``flat_rbits``; 3·37·88 elements span three kernel blocks, the last one partial."""
    x = state_like((3, 37, 88), seed=2, device=device)
    assert tq.CAST_BLOCK < x.numel() < 3 * tq.CAST_BLOCK
    seed = (5 << 32) | 77  # a 64-bit key (layer 5, run seed 77)
    got = tq.quantize(x, fmt, seed=seed)
    assert_same_qtensor(got, ref_quantize(x, fmt, seed=seed))
    explicit = flat_rbits(seed, x.numel()).reshape(x.shape).to(device)
    assert_same_qtensor(got, ref_quantize(x, fmt, rbits=explicit))


def test_element_quantize_fp32_wide_range(device):
    """fp32 inputs across the whole exponent range (subnormal targets, overflow, fp32 subnormals)."""
    g = torch.Generator().manual_seed(3)
    n = 40_000
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-150, 129, (n,), generator=g).float())
    x[:6] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 1e-45, -3.4e38])
    x = x.to(device)
    rb = torch.randint(0, 2**32, (n,), generator=g).to(device)
    for fmt in ELEMENT_FORMATS:
        assert_same_qtensor(tq.quantize(x, fmt), ref_quantize(x, fmt))
        assert_same_qtensor(tq.quantize(x, fmt + "-sr", rbits=rb), ref_quantize(x, fmt + "-sr", rbits=rb))


# E2M1 has no launchable element kernel of its own (it lives inside NVFP4); a tiny kernel drives the
# codec directly, which also exercises the helpers exactly as other kernels import them.
@triton.jit
def _e2m1_probe_kernel(x_ptr, r_ptr, code_ptr, val_ptr, n, SR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs, mask=mask, other=0)
    code = qc.encode_e2m1(x, r, SR)
    tl.store(code_ptr + offs, code, mask=mask)
    tl.store(val_ptr + offs, qc.decode_e2m1(code), mask=mask)


@pytest.mark.parametrize("sr", [False, True], ids=["rne", "sr"])
def test_e2m1_codec_exhaustive(sr, device):
    x = all_16bit(torch.bfloat16)
    x = x[~torch.isnan(x)].contiguous()  # E2M1 has no NaN: the reference refuses it
    rb = torch.randint(0, 2**32, x.shape, generator=torch.Generator().manual_seed(4)).to(torch.int32)
    code = torch.empty(x.shape, dtype=torch.int32, device=device)
    val = torch.empty(x.shape, dtype=torch.float32, device=device)
    _e2m1_probe_kernel[(triton.cdiv(x.numel(), 4096),)](x.to(device), rb.to(device), code, val, x.numel(),
                                                        SR=sr, BLOCK=4096)
    want = rounding.round_to_code(x, rounding.E2M1, rb if sr else None)
    assert_same_bits(code.cpu(), want, "e2m1 codes")
    assert_same_bits(val.cpu(), rounding.decode(want, rounding.E2M1), "e2m1 values")


def test_e2m1_sr_codec_fp32_fraction_bits(device):
    """The SR fast path reads 16 fraction bits below the E2M1 step, which bf16 inputs (7 mantissa bits)
    leave zero: random fp32 patterns (every exponent, and exponents 100..130 around the E2M1 range
    oversampled) with random words and the words at the carry boundary (0, 0x7FFF, 0x8000, 0xFFFF)."""
    g = torch.Generator().manual_seed(13)
    n = 1 << 16
    b = torch.randint(-2**31, 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    near = (b & ~(0xFF << 23)) | (torch.randint(100, 131, (n,), generator=g).to(torch.int32) << 23)
    x = torch.cat([b.view(torch.float32), near.view(torch.float32),
                   torch.tensor([0.0, -0.0, 1e-45, -1e-40, 0.25, 0.75, 1.0, 5.0, 6.0, 7.0, 1e30,
                                 float("inf"), -float("inf")])])
    x = x[~torch.isnan(x)].contiguous()
    code = torch.empty(x.shape, dtype=torch.int32, device=device)
    val = torch.empty(x.shape, dtype=torch.float32, device=device)
    for rb in (torch.randint(0, 2**32, x.shape, generator=g).to(torch.int32),
               *(torch.full(x.shape, w, dtype=torch.int32) for w in (0, 0x7FFF, 0x8000, 0xFFFF))):
        _e2m1_probe_kernel[(triton.cdiv(x.numel(), 4096),)](x.to(device), rb.to(device), code, val, x.numel(),
                                                            SR=True, BLOCK=4096)
        assert_same_bits(code.cpu(), rounding.round_to_code(x, rounding.E2M1, rb), "e2m1 SR codes")


# bf16, fp16, E4M3 and E5M2 encode through fast paths of their own (codecs.encode_bf16 / encode_fp16 /
# encode_e4m3 / encode_e5m2); the generic integer rounding (codecs._encode) stays as their spec. A probe
# kernel runs both on the same inputs, and both are compared with the torch reference.
FAST_FORMATS = {"bf16": rounding.BF16, "fp16": rounding.FP16, "e4m3": rounding.E4M3, "e5m2": rounding.E5M2}
_FAST_IDS = {name: i for i, name in enumerate(FAST_FORMATS)}


@triton.jit
def _fast_probe_kernel(x_ptr, r_ptr, fast_ptr, generic_ptr, n, FMT: tl.constexpr, SR: tl.constexpr,
                       BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs, mask=mask, other=0)
    if FMT == 0:
        fast = qc.encode_bf16(x, r, SR)
        generic = qc._encode(x, r, 8, 7, 127, 0x7F7F, False, 0x7FC0, SR)
    elif FMT == 1:
        fast = qc.encode_fp16(x, r, SR)
        generic = qc._encode(x, r, 5, 10, 15, 0x7BFF, False, 0x7E00, SR)
    elif FMT == 2:
        fast = qc.encode_e4m3(x, r, SR)
        generic = qc._encode(x, r, 4, 3, 7, 0x7E, True, 0x7F, SR)
    else:
        fast = qc.encode_e5m2(x, r, SR)
        generic = qc._encode(x, r, 5, 2, 15, 0x7B, True, 0x7E, SR)
    tl.store(fast_ptr + offs, fast, mask=mask)
    tl.store(generic_ptr + offs, generic, mask=mask)


def check_fast_codec(fmt: str, x: torch.Tensor, rb: torch.Tensor | None, device: str) -> None:
    """Fast encode == generic encode == torch reference, bit for bit on the int32 codes (RNE when rb is None)."""
    sr = rb is not None
    r = rb if sr else torch.zeros(x.shape, dtype=torch.int32)
    fast = torch.empty(x.shape, dtype=torch.int32, device=device)
    generic = torch.empty(x.shape, dtype=torch.int32, device=device)
    _fast_probe_kernel[(triton.cdiv(x.numel(), 8192),)](x.to(device), r.to(device), fast, generic, x.numel(),
                                                        FMT=_FAST_IDS[fmt], SR=sr, BLOCK=8192)
    want = rounding.round_to_code(x, FAST_FORMATS[fmt], rb)
    what = f"{fmt} {'SR' if sr else 'RNE'}"
    assert_same_bits(generic.cpu(), want, f"{what} generic codes")
    assert_same_bits(fast.cpu(), want, f"{what} fast codes")


# SR words at the carry boundaries (only the low 16 bits count: the high bits of 0xABCD8000 are noise)
SR_WORDS = (0, 1, 0x7FFF, 0x8000, 0xFFFF, 0xABCD8000 - (1 << 32))


def with_words(x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x repeated once per fixed word of SR_WORDS and once with random 32-bit words, and those words."""
    g = torch.Generator().manual_seed(seed)
    words = [torch.full(x.shape, w, dtype=torch.int32) for w in SR_WORDS]
    words.append(torch.randint(-2**31, 2**31, x.shape, generator=g, dtype=torch.int64).to(torch.int32))
    return x.repeat(len(words)), torch.cat(words)


@pytest.mark.parametrize("sr", [False, True], ids=["rne", "sr"])
@pytest.mark.parametrize("fmt", list(FAST_FORMATS))
def test_fast_codec_exhaustive(fmt, sr, device):
    """Every bf16 and every fp16 pattern (NaNs, ±inf, ±0, subnormals of both) as input; under SR with
    each word of SR_WORDS and with random words. Values exactly on the grid must come back unchanged
    whatever the word, values between grid points go down or up by the rule."""
    x = torch.cat([all_16bit(torch.bfloat16), all_16bit(torch.float16)])
    if sr:
        x, rb = with_words(x, seed=21)
        check_fast_codec(fmt, x, rb, device)
    else:
        check_fast_codec(fmt, x, None, device)


def fast_boundary_values() -> torch.Tensor:
    """fp32 values at and around the edges the fast paths treat separately, both signs, with their fp32
    neighbours: fp16's max and overflow (65504, 65520 = max + half an ulp, 65535, 2^16), fp16's
    smallest normal 2^-14 and subnormal step 2^-24 (and 2^-25, 3·2^-25: RNE ties); E4M3's max 448, the
    clamp 480 and values between, its smallest normal 2^-6 and step 2^-9 (2^-10, 3·2^-10: ties);
    E5M2's max 57344 and 61440 (max + half an ulp), its step 2^-16 (2^-17, 3·2^-17); bf16/fp32 max,
    fp32 subnormals, ±0, ±inf and NaNs with several payloads."""
    core = torch.tensor([65504.0, 65519.99609375, 65520.0, 65535.0, 65536.0, 98304.0, 1e5, 2.0**-14,
                         2.0**-15, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-26, 1.0, 1.5, 3.4028234663852886e38,
                         448.0, 464.0, 479.0, 480.0, 500.0, 2.0**-6, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 7 * 2.0**-9,
                         57344.0, 61440.0, 2.0**-16, 2.0**-17, 3 * 2.0**-17,
                         2.0**-126, 1e-45, 1e-40, 0.0])
    b = core.view(torch.int32)
    near = torch.cat([b - 2, b - 1, b, b + 1, b + 2]).clamp(min=0)  # all positive patterns < inf here
    specials = torch.tensor([0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FBFFFFF, 0x7FC00001,
                             0x007FFFFF, 0x00000001], dtype=torch.int32)
    mags = torch.cat([near, specials])
    return torch.cat([mags, mags | (-(1 << 31))]).view(torch.float32)


def test_fast_codec_fp32_fraction_bits(device):
    """The fast paths read the fp32 bits below each format's last place (16 for bf16, 13 for fp16
    normals, 20 / 21 for E4M3 / E5M2 normals, more for subnormals), which bf16 inputs leave (mostly)
    zero: random fp32 patterns over every exponent (fp32 subnormals and NaNs included), patterns with
    exponents around the formats' ranges oversampled, and fast_boundary_values; RNE, and SR with the
    words of SR_WORDS and random words."""
    g = torch.Generator().manual_seed(22)
    n = 1 << 14
    b = torch.randint(-2**31, 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    near = (b & ~(0xFF << 23)) | (torch.randint(95, 146, (n,), generator=g).to(torch.int32) << 23)
    sub = b & (0x807FFFFF - (1 << 32))  # fp32 subnormals of both signs
    x = torch.cat([b.view(torch.float32), near.view(torch.float32), sub.view(torch.float32), fast_boundary_values()])
    xs, rb = with_words(x, seed=23)
    for fmt in FAST_FORMATS:
        check_fast_codec(fmt, x, None, device)
        check_fast_codec(fmt, xs, rb, device)


# ------------------------------------------------------------------------------------------------
# NVFP4
# ------------------------------------------------------------------------------------------------
# one base shape plus rows that each change one factor
NVFP4_SHAPES = {
    "base-2x64x128": (2, 64, 128),
    "odd-rows-3x5x48": (3, 5, 48),
    "one-matrix-7x32": (7, 32),
    "vector-48": (48,),
    "two-pass-2x96x128": (2, 96, 128),  # 12288 elements > one register tile: two passes per matrix
    "lead-dims-2x3x4x16": (2, 3, 4, 16),
}


# per-row global scales: one program per row, so a few small shapes suffice
NVFP4_CASES = [("nvfp4", k) for k in NVFP4_SHAPES] + [
    ("nvfp4-row", k) for k in ("odd-rows-3x5x48", "vector-48", "lead-dims-2x3x4x16")]


@pytest.mark.parametrize("fmt,shape", [(f, NVFP4_SHAPES[k]) for f, k in NVFP4_CASES],
                         ids=[f"{f}-{k}" for f, k in NVFP4_CASES])
def test_nvfp4_quantize_matches_reference(fmt, shape, device):
    x = state_like(shape, seed=hash(shape) % 1000, device=device)
    got = tq.quantize(x, fmt)
    want = ref_quantize(x, fmt)
    assert_same_qtensor(got, want)
    assert_same_bits(tq.dequantize(want), ref_dequantize(want), f"{fmt} dequantize")


@pytest.mark.parametrize("fmt", ["nvfp4-sr", "nvfp4-row-sr"])
def test_nvfp4_sr_explicit_rbits_and_seed(fmt, device):
    x = state_like((3, 5, 48), seed=11, device=device)
    rb = torch.randint(0, 2**32, x.shape, generator=torch.Generator().manual_seed(5)).to(device)
    assert_same_qtensor(tq.quantize(x, fmt, rbits=rb), ref_quantize(x, fmt, rbits=rb))
    assert_same_qtensor(tq.quantize(x, fmt, seed=1234), ref_quantize(x, fmt, seed=1234))
    # the two-pass launch draws in-kernel Philox tile by tile: same values
    gran = "row" if "row" in fmt else "matrix"
    assert_same_qtensor(tq.nvfp4_quantize(x, sr=True, granularity=gran, seed=1234, tile=32),
                        ref_quantize(x, fmt, seed=1234))
    # the rbits are actually used: other bits give other codes somewhere
    other = tq.quantize(x, fmt, rbits=rb ^ 0x8000)
    assert not torch.equal(other.data.cpu(), tq.quantize(x, fmt, rbits=rb).data.cpu())


@pytest.mark.parametrize("layout", ["block", "tile"])
@pytest.mark.parametrize("sr", [False, True], ids=["rne", "sr"])
@pytest.mark.parametrize("shape", ["base-2x64x128", "odd-rows-3x5x48", "vector-48", "two-pass-2x96x128"])
def test_nvfp4_quantize_both_layouts(layout, sr, shape, device):
    """Both kernels (one thread per 16-element block, and a block over 4 threads) in both rounding
    modes, one-tile and two-pass, in-kernel Philox and explicit words, equal the reference."""
    x = state_like(NVFP4_SHAPES[shape], seed=17, device=device)
    fmt = "nvfp4-sr" if sr else "nvfp4"
    kw = dict(sr=sr, layout=layout, check_finite=False)
    if sr:
        rb = torch.randint(0, 2**32, x.shape, generator=torch.Generator().manual_seed(8)).to(device)
        assert_same_qtensor(tq.nvfp4_quantize(x, seed=99, **kw), ref_quantize(x, fmt, seed=99))
        assert_same_qtensor(tq.nvfp4_quantize(x, rbits=rb, **kw), ref_quantize(x, fmt, rbits=rb))
        # tiles smaller than the matrix: the two-pass launch draws Philox tile by tile
        assert_same_qtensor(tq.nvfp4_quantize(x, seed=99, tile=64, **kw), ref_quantize(x, fmt, seed=99))
    else:
        assert_same_qtensor(tq.nvfp4_quantize(x, **kw), ref_quantize(x, fmt))
        assert_same_qtensor(tq.nvfp4_quantize(x, tile=32, **kw), ref_quantize(x, fmt))
    with pytest.raises(ValueError, match="layout"):
        tq.nvfp4_quantize(x, sr=sr, seed=1, layout="rows")


def test_nvfp4_sr_special_blocks_both_layouts(device):
    """Zero, E4M3-subnormal and zero block scales, fp32 subnormals and E2M1 grid points under SR."""
    x = torch.zeros(4, 4, 32)
    x[0, 0, :16] = 1.0
    x[0, 1, :16] = 2e-5
    x[0, 2, :16] = 1e-9
    x[0, 3, :16] = -1e-6
    x[2] = torch.linspace(-6, 6, 128).reshape(4, 32)
    x[3] = 1e-40
    x[3, 0, 0] = 3e38
    x = x.to(device)
    for layout in ("block", "tile"):
        assert_same_qtensor(tq.nvfp4_quantize(x, sr=True, seed=5, layout=layout), ref_quantize(x, "nvfp4-sr", seed=5))


def test_nvfp4_state_rbits_int64_layout(device):
    """rbits as the state machine passes them: int64 words from philox.state_rbits."""
    from precision_lab.quant.philox import state_rbits

    x = state_like((2, 3, 16, 32), seed=6, device=device)  # [B, H, R, C]
    rb = state_rbits(9, 2, torch.arange(2)[:, None], torch.arange(3)[None, :], 4, (16, 32)).to(device)
    assert rb.dtype == torch.int64
    assert_same_qtensor(tq.quantize(x, "nvfp4-sr", rbits=rb), ref_quantize(x, "nvfp4-sr", rbits=rb))


def test_nvfp4_special_blocks(device):
    """Zero blocks, an all-zero matrix, E4M3-subnormal and zero block scales, a single huge value,
    fp32 subnormals, exact ties at every E2M1 grid midpoint."""
    x = torch.zeros(5, 4, 32)
    x[0, 0, :16] = 1.0  # matrix 0: one block of ones, the other blocks zero
    x[0, 1, :16] = 2e-5  # block scale 2e-5 · 448 ≈ 0.009 is an E4M3 subnormal
    x[0, 2, :16] = 1e-9  # block scale rounds to 0 → enc = FLT_MAX, codes 0
    x[0, 3, :16] = -1e-6  # also a zero scale, negative inputs (codes -0)
    # matrix 1 stays all zero: S_enc = 1
    x[2] = torch.linspace(-6, 6, 128).reshape(4, 32)  # E2M1 ties at 0.25, 0.75, 1.25, ... when amax = 6
    x[2, 0, :12] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0, 6.0])
    x[3] = 1e-40  # fp32 subnormals only
    x[4, 0, 0] = 3e38  # near FLT_MAX next to small values
    x[4, 1:] = torch.randn(3, 32, generator=torch.Generator().manual_seed(7))
    x = x.to(device)
    for fmt in ("nvfp4", "nvfp4-row"):
        got, want = tq.quantize(x, fmt), ref_quantize(x, fmt)
        assert_same_qtensor(got, want)
        assert_same_bits(tq.dequantize(got), ref_dequantize(want), f"{fmt} dequantize")
    scale_bytes = tq.quantize(x, "nvfp4").scale.view(torch.uint8).cpu()
    assert int(scale_bytes[0, 1, 0]) in range(1, 8), "expected an E4M3 subnormal block scale"
    assert int(scale_bytes[0, 2, 0]) == 0, "expected a zero block scale"
    assert float(tq.quantize(x, "nvfp4").global_scale[1]) == 1.0  # all-zero matrix: S_dec = 1


@triton.jit
def _block_scale_probe_kernel(amax_ptr, code_ptr, enc_ptr, n, s_enc, s_dec, HW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    codes, enc = qc.nvfp4_block_scales(tl.load(amax_ptr + offs, mask=mask, other=0), s_enc, s_dec, HW)
    tl.store(code_ptr + offs, codes, mask=mask)
    tl.store(enc_ptr + offs, enc, mask=mask)


def block_scale_amaxes() -> torch.Tensor:
    """Non-negative fp32 block amaxes: every positive fp16 pattern (each E4M3 binade many times over,
    E4M3 ties among them), random fp32 patterns over the whole range, the edges 448/464/480 with their
    fp32 neighbours, 0, fp32 subnormals, FLT_MAX, inf and NaN."""
    g = torch.Generator().manual_seed(17)
    f16 = all_16bit(torch.float16).float()
    f16 = f16[(f16 >= 0) & torch.isfinite(f16)]
    rand = torch.randint(0, 0x7F800000, (1 << 16,), generator=g, dtype=torch.int32).view(torch.float32)
    edges = torch.tensor([448.0, 464.0, 480.0, 2.0**-6, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 0.0, 1e-40,
                          3.4028234663852886e38, float("inf"), float("nan")])
    nbrs = torch.cat([edges.view(torch.int32) + d for d in (-1, 1)]).view(torch.float32)
    x = torch.cat([f16, rand, edges, nbrs[torch.isfinite(nbrs) & (nbrs >= 0)]])
    return x.view(torch.int32)


@pytest.mark.parametrize("s_enc", [6.0, 2688.0 / 3.0, 1e-3, 1e30], ids=["six", "amax3", "small", "huge"])
def test_nvfp4_block_scales_match_reference(s_enc, device):
    """The block-scale chain: E4M3 scale bytes equal the reference's RNE rounding of amax · (s_enc · 1/6),
    and enc is 1 / (scale · s_dec) rounded once; on the GPU the hardware conversions (HW=True, what
    the compiled decode kernels' NVFP4 stores use) give the same scale bytes and enc bits as the
    integer path (the interpreter rounds fp32 → fp8 wrongly, so HW runs on the GPU only)."""
    amax = block_scale_amaxes()
    s_enc_t = torch.tensor(s_enc, dtype=torch.float32)
    s_dec_t = torch.tensor(1.0, dtype=torch.float32) / s_enc_t
    one_sixth = torch.tensor(0x3E2AAAAB, dtype=torch.int32).view(torch.float32)
    y = amax.view(torch.float32) * (s_enc_t * one_sixth)
    want_codes = rounding.round_to_code(y, rounding.E4M3)
    scale = rounding.decode(want_codes, rounding.E4M3).float()
    want_enc = torch.tensor(1.0, dtype=torch.float32) / (scale * s_dec_t)
    want_enc = torch.where(want_enc > 3.4028234663852886e38, 3.4028234663852886e38, want_enc)
    n = amax.numel()
    for hw in ([False, True] if device == "cuda" else [False]):
        codes = torch.empty(n, dtype=torch.int32, device=device)
        enc = torch.empty(n, dtype=torch.float32, device=device)
        _block_scale_probe_kernel[(triton.cdiv(n, 4096),)](amax.to(device), codes, enc, n, s_enc_t.item(),
                                                           s_dec_t.item(), HW=hw, BLOCK=4096)
        assert_same_bits(codes.cpu(), want_codes, f"HW={hw} scale bytes")
        # NaN amax: both give a NaN enc, whose payload is the platform's (the GPU's 0x7FFFFFFF, torch's
        # 0x7FC00000); every other enc bit for bit
        enc = enc.cpu()
        assert torch.equal(enc.isnan(), want_enc.isnan()), f"HW={hw} enc: NaN where the reference has none"
        assert_same_bits(torch.where(enc.isnan(), 0.0, enc), torch.where(want_enc.isnan(), 0.0, want_enc), f"HW={hw} enc")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_nvfp4_non_finite_input_raises_like_reference(bad, device):
    x = state_like((2, 4, 32), seed=8)
    x[1, 2, 5] = bad
    x = x.to(device)
    with pytest.raises(ValueError, match="non-finite"):
        ref_quantize(x, "nvfp4")
    with pytest.raises(ValueError, match=r"non-finite.*index \(1, 2, 5\)"):
        tq.quantize(x, "nvfp4")
    # without the host check the kernel marks the matrix by a NaN global scale, the others are valid
    qt = tq.nvfp4_quantize(x, check_finite=False)
    assert torch.isnan(qt.global_scale[1]) and not torch.isnan(qt.global_scale[0])


def test_bad_inputs_have_clear_errors(device):
    x = torch.randn(4, 40, device=device)
    with pytest.raises(ValueError, match="not divisible by the block size 16"):
        tq.quantize(x, "nvfp4")
    with pytest.raises(TypeError, match="float32/float16/bfloat16"):
        tq.nvfp4_quantize(torch.ones(4, 16, dtype=torch.int32, device=device))
    with pytest.raises(NotImplementedError, match="no Triton kernel"):
        tq.quantize(torch.randn(16, 16, device=device), "nvfp4-2d")
    with pytest.raises(NotImplementedError, match="float64"):
        tq.quantize(torch.randn(4, 16, dtype=torch.float64, device=device), "fp16")
    with pytest.raises(ValueError, match="rbits.*or seed"):
        tq.quantize(torch.randn(4, 16, device=device), "nvfp4-sr")
    with pytest.raises(ValueError, match="shape"):
        tq.quantize(torch.randn(4, 16, device=device), "fp16-sr", rbits=torch.zeros(4, 15, dtype=torch.int64))


def test_fallback_records_the_reference_path(device):
    x = torch.randn(32, 32, device=device)
    qt = tq.quantize(x, "nvfp4-2d", fallback=True)
    assert qt.meta["implementation"] == "torch-reference"
    assert_same_qtensor(qt, ref_quantize(x, "nvfp4-2d"))


def test_codecs_docstring_documents_every_helper():
    jit_types = {"JITFunction", "InterpretedFunction"}  # the latter under TRITON_INTERPRET=1
    public = [n for n, v in vars(qc).items() if type(v).__name__ in jit_types and not n.startswith("_")]
    assert len(public) >= 15
    missing = [n for n in public if f"``{n}(" not in qc.__doc__ and f"``{n}``" not in qc.__doc__ and f"{n}(" not in qc.__doc__]
    assert not missing, f"codecs helpers without documentation in the module docstring: {missing}"


def test_bench_smoke(tmp_path, device, monkeypatch):
    """The quantizer benchmark end to end on a tiny state (CPU: interpreter, a smoke run): every
    kernel's reference check passes and the file is a bench-quant result the report reads (its class,
    precision_lab.bench.schema). Its timings mean nothing here."""
    import json

    from precision_lab.bench import quant_kernels
    from precision_lab.bench.schema import QuantKernelsResult, load
    from precision_lab.provenance import git_hash

    if git_hash() is None:  # a GPU run records a commit: a copied tree without .git names one
        monkeypatch.setenv("PRECISION_LAB_GIT", "0000000")
    rc = quant_kernels.run(shape=(3, 2, 16, 32), check_chunk=2, rep_ms=5, out_dir=tmp_path, device=str(device))
    out = json.loads((tmp_path / "bench_quant.json").read_text())
    assert rc == 0
    assert out["kind"] == "bench-quant" and out["schema_version"] == 2
    res = load(out)
    assert isinstance(res, QuantKernelsResult) and res.provenance.smoke == (device == "cpu")
    assert (res.ceiling is None) == (device == "cpu")  # a smoke run measures no copy ceiling
    assert all(k.check == "pass" and k.GBps > 0 for k in res.kernels.values()), out["kernels"]
    assert out["kernels"]["nvfp4 quantize"]["bytes"] == 4 * 3072 + 3072 // 2 + 3072 // 16 + 4 * 6
    assert {"fp16-sr quantize", "bf16-sr quantize", "fp8e4m3-sr quantize", "fp8e5m2-sr quantize"} <= set(out["kernels"])
    assert out["kernels"]["fp8e4m3-sr quantize"]["bytes"] == 5 * 3072
    assert (tmp_path / "bench_quant.png").stat().st_size > 0


def test_without_gpu_or_interpreter_the_reference_serves_the_same_codes(monkeypatch):
    """On CPU without TRITON_INTERPRET=1 a launch would die in triton ("0 active drivers"): by default
    quantize/dequantize are served by the torch reference with the same codes and say so;
    fallback=False refuses with a message that says how to proceed."""
    from precision_lab.kernels import runtime

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(2, 4, 32)
    assert runtime.triton_unavailable_reason(x.device) is not None
    assert runtime.triton_unavailable_reason("cuda") is None
    for fmt, kw in (("nvfp4", {}), ("nvfp4-row-sr", {"seed": 3}), ("fp8e4m3", {}), ("bf16-sr", {"seed": 5})):
        qt = tq.quantize(x, fmt, **kw)
        assert qt.meta["implementation"] == "torch-reference"
        assert "TRITON_INTERPRET" in qt.meta["fallback_reason"]
        assert_same_qtensor(qt, ref_quantize(x, fmt, **kw))
        assert torch.equal(tq.dequantize(qt), ref_dequantize(qt))
    with pytest.raises(NotImplementedError, match="TRITON_INTERPRET is not 1"):
        tq.quantize(x, "nvfp4", fallback=False)
    with pytest.raises(NotImplementedError, match="TRITON_INTERPRET is not 1"):
        tq.dequantize(ref_quantize(x, "nvfp4"), fallback=False)
    with pytest.raises(NotImplementedError, match="no Triton kernel"):  # not a device question: still asked for
        tq.quantize(torch.randn(16, 16), "nvfp4-2d")
    with pytest.raises(RuntimeError, match="set TRITON_INTERPRET=1"):
        runtime.require_triton(x.device, "test")


def test_readme_quantize_kernel_snippet_runs_as_written_on_cpu():
    """The README's Quantizers and quantize-kernel snippets, run in that order in a fresh process
    without TRITON_INTERPRET (a user's CPU set-up)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    quant = next(b for b in blocks if "from precision_lab.quant import get_quantizer" in b)
    kernel = next(b for b in blocks if "from precision_lab.kernels.quant import quantize" in b)
    code = quant + kernel + "assert qt.meta['implementation'] == 'torch-reference'\nprint(x_hat.shape)\n"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("torch.Size([4, 64, 128])")
