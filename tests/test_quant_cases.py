"""Hand-picked rounding cases with their bit patterns, the special-value policy, bad input, and an
SQNR floor per format (a sanity check on top of the bit tests)."""
import math
import re
import struct

import pytest
import torch
from precision_lab.quant import get_quantizer, known_quantizers
from precision_lab.quant import rounding as R


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def code(name: str, x: float) -> int:
    return int(R.round_to_code(torch.tensor([x], dtype=torch.float32), R.ELEMENT_FORMATS[name])[0])


@pytest.mark.parametrize("name,x,want", [
    # ties go to the even code
    ("fp16", 1 + 2**-11, 0x3C00), ("fp16", 1 + 3 * 2**-11, 0x3C02), ("fp16", -(1 + 2**-11), 0xBC00),
    ("bf16", 1 + 2**-8, 0x3F80), ("bf16", 1 + 3 * 2**-8, 0x3F82),
    ("e4m3", 1.0625, 0x38), ("e4m3", 1.1875, 0x3A), ("e5m2", 1.125, 0x3C), ("e5m2", 1.375, 0x3E),
    ("e2m1", 0.25, 0x0), ("e2m1", 0.75, 0x2), ("e2m1", 1.25, 0x2), ("e2m1", 1.75, 0x4), ("e2m1", 2.5, 0x4),
    ("e2m1", 3.5, 0x6), ("e2m1", 5.0, 0x6), ("e2m1", -5.0, 0xE),
    # just off a tie
    ("e4m3", f32(0x3F880001), 0x39), ("e2m1", f32(0x40A00001), 0x7),
    # saturation (satfinite formats clamp first, inf included) and IEEE overflow
    ("e4m3", 448.0, 0x7E), ("e4m3", 464.0, 0x7E), ("e4m3", 1e30, 0x7E), ("e4m3", math.inf, 0x7E),
    ("e4m3", -math.inf, 0xFE), ("e5m2", 61440.0, 0x7B), ("e5m2", math.inf, 0x7B), ("e2m1", 7.0, 0x7),
    ("e2m1", -math.inf, 0xF), ("fp16", 65519.0, 0x7BFF), ("fp16", 65520.0, 0x7C00), ("fp16", -math.inf, 0xFC00),
    ("bf16", f32(0x7F7FFFFF), 0x7F80), ("bf16", math.inf, 0x7F80),
    # subnormals of the target, and fp32 subnormal input
    ("e4m3", 2**-9, 0x01), ("e4m3", 2**-10, 0x00), ("e4m3", 1.5 * 2**-10, 0x01), ("e4m3", 3 * 2**-10, 0x02),
    ("e4m3", 7 * 2**-9, 0x07), ("e4m3", 15 * 2**-10, 0x08), ("e5m2", 2**-16, 0x01), ("e5m2", 2**-17, 0x00),
    ("fp16", 2**-24, 0x0001), ("fp16", 2**-25, 0x0000), ("fp16", 3 * 2**-25, 0x0002), ("bf16", 2.0**-130, 0x0008),
    ("bf16", f32(0x00000001), 0x0000), ("e2m1", 0.5, 0x1), ("e2m1", 0.2500001, 0x1),
    # signed zeros
    ("e4m3", -0.0, 0x80), ("e4m3", -1e-10, 0x80), ("e2m1", -0.1, 0x8), ("fp16", -0.0, 0x8000),
])
def test_hand_cases(name, x, want):
    assert code(name, x) == want, f"{name}({x!r}) = {code(name, x):#x}, want {want:#x}"


@pytest.mark.parametrize("name,want", [("fp16", 0x7E00), ("bf16", 0x7FC0), ("e4m3", 0x7F), ("e5m2", 0x7E)])
def test_nan_becomes_canonical_nan(name, want):
    assert code(name, math.nan) == want
    assert code(name, -math.nan) == want | R.ELEMENT_FORMATS[name].sign_bit
    q = {"fp16": "fp16", "bf16": "bf16", "e4m3": "fp8e4m3", "e5m2": "fp8e5m2"}[name]
    assert torch.isnan(get_quantizer(q).fake(torch.tensor([1.0, math.nan]))).tolist() == [False, True]


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4-sr", "mxfp4", "mxfp8", "fp8e4m3-mat", "fp8e5m2-row-sr"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_scaled_formats_refuse_non_finite(name, bad):
    x = torch.ones(2, 64)
    x[1, 5] = bad
    with pytest.raises(ValueError, match=r"non-finite.*\(1, 5\)"):
        get_quantizer(name).quantize(x, seed=0)


def test_e2m1_codec_refuses_nan():
    with pytest.raises(ValueError, match="no NaN"):
        R.round_to_code(torch.tensor([math.nan]), R.E2M1)


def _nvfp4(x, name="nvfp4"):
    q = get_quantizer(name)
    qt = q.quantize(x)
    return qt, R.unpack_nibbles(qt.data), qt.scale.view(torch.uint8), q.dequantize(qt)


def test_nvfp4_zero_block_and_zero_matrix():
    x = torch.zeros(2, 1, 32)
    x[0, 0, 16:] = torch.linspace(-3, 3, 16)
    qt, codes, s, xh = _nvfp4(x)
    assert s[0, 0, 0] == 0 and (codes[0, 0, :16] == 0).all() and (xh[0, 0, :16] == 0).all()
    # the all-zero matrix: S_enc = 1, S_dec = 1, every scale and code 0, exact zeros back
    assert qt.global_scale[1] == 1.0 and (s[1] == 0).all() and (codes[1] == 0).all() and (xh[1] == 0).all()
    assert not torch.signbit(xh[1]).any()


def test_nvfp4_chain_by_hand():
    """amax 2688 gives S_enc = S_dec = 1, so block scales are e4m3(block_amax · fp32(1/6))."""
    x = torch.zeros(1, 64)
    x[0, 0] = 2688.0                       # block 0: s = e4m3(448) = 0x7E, element 2688/448 = 6 → 0x7
    x[0, 16:32] = torch.tensor([0.01] + [0.0] * 15)  # block 1: 0.01/6 → E4M3 subnormal 2^-9 (0x01)
    x[0, 32] = 12.0                        # block 2 mixed range: s = e4m3(2) = 0x40; 12/2 = 6
    x[0, 33] = 0.4                         #   0.4/2 = 0.2 → e2m1 0; 1.0/2 = 0.5 → 0x1; 5/2 = 2.5 → 2 (tie, even)
    x[0, 34] = -1.0
    x[0, 35] = 5.0
    x[0, 48] = f32(0x40E3FFFF)            # block 3: the NVFP4 scale tie (next test)
    qt, codes, s, xh = _nvfp4(x)
    assert qt.global_scale.item() == 1.0
    assert s[0].tolist() == [0x7E, 0x01, 0x40, 0x3A]
    assert codes[0, 0] == 0x7 and xh[0, 0] == 2688.0
    # 0.01 · enc, enc = 1/2^-9 = 512: 5.12 → 6 (code 7); x̂ = 6 · 2^-9
    assert codes[0, 16] == 0x7 and xh[0, 16].item() == 6 * 2**-9
    assert codes[0, 32:36].tolist() == [0x7, 0x0, 0x9, 0x4]
    assert xh[0, 32:36].tolist() == [12.0, 0.0, -1.0, 4.0]


def test_nvfp4_scale_rounds_once():
    """block_amax · (S_enc · fp32(1/6)) = 1.1875 exactly, a tie between E4M3 1.125 (0x39) and 1.25
    (0x3A) that goes to even 0x3A; (block_amax / 6) · S_enc rounds twice to just below the tie → 0x39."""
    ba = f32(0x40E3FFFF)  # 7.1249995
    one_rounding = torch.tensor(ba) * torch.tensor(1 / 6, dtype=torch.float32)
    two_roundings = torch.tensor(ba) / 6
    assert one_rounding.item() == 1.1875 and two_roundings.item() < 1.1875
    assert code("e4m3", one_rounding.item()) == 0x3A and code("e4m3", two_roundings.item()) == 0x39
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 16] = 2688.0, ba
    _, _, s, _ = _nvfp4(x)
    assert s[0, 1] == 0x3A


def test_nvfp4_global_scale_extremes():
    # tiny amax: 2688/amax overflows fp32 → S_enc = FLT_MAX
    x = torch.full((1, 16), f32(0x00000001))
    qt, codes, s, xh = _nvfp4(x)
    flt_max = torch.tensor(torch.finfo(torch.float32).max)
    assert qt.global_scale.item() == (1 / flt_max).item()  # fp32 subnormal 2^-128 · (1 + ...)
    # the chain then gives block scale e4m3(2^-149 · FLT_MAX/6) = 0: such a matrix flushes to zero
    assert (s == 0).all() and (xh == 0).all()
    # large amax: S_enc small, elements still reach 6 at the block max
    y = torch.tensor([[3e38] + [1.0] * 15])
    qt, codes, s, yh = _nvfp4(y)
    assert codes[0, 0] == 0x7 and abs(yh[0, 0].item() / 3e38 - 1) < 0.01


def test_nvfp4_layout_low_nibble_is_even_element():
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1], x[0, 2] = 6.0, -0.5, 1.0  # amax 6: S_enc = 448, block scale 448, enc ≈ 1: codes 7, 9, 2
    qt, codes, *_ = _nvfp4(x)
    assert codes[0, :3].tolist() == [0x7, 0x9, 0x2]
    assert qt.data[0, 0].item() == 0x97 and qt.data[0, 1].item() == 0x02


@pytest.mark.parametrize("spec", [dict(granularity="row"), dict(block_rows=16), dict(granularity="tile", tile=(16, 32)),
                                  dict(block_rows=16, granularity="row")])
def test_nvfp4_granularity_options(spec):
    """Each option equals the default chain applied to the group on its own (per-row = each row as a
    matrix; 2-D blocks: block amax over 16×16 tiles)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 64, generator=g) * torch.exp(torch.randn(2, 32, 1, generator=g) * 3)
    q = get_quantizer("nvfp4", **spec)
    xh = q.fake(x)
    if spec.get("block_rows") == 16:
        assert q.quantize(x).scale.shape == (2, 2, 4)
        # a 2-D block quantizes like a 1×16 block whose amax is the tile's amax: transposing the tile
        # (and the matrix) gives the same codes when the global group is the whole matrix
        if "granularity" not in spec:
            xt = get_quantizer("nvfp4", block_rows=16).fake(x.transpose(-1, -2).contiguous())
            assert torch.equal(xt.transpose(-1, -2), xh)
        return
    if spec.get("granularity") == "row":
        want = torch.stack([get_quantizer("nvfp4").fake(x[:, i:i + 1, :]) for i in range(32)], dim=1).squeeze(2)
    else:
        tiles = x.reshape(2, 2, 16, 2, 32).permute(0, 1, 3, 2, 4)  # [2, R/16, C/32, 16, 32]
        want = get_quantizer("nvfp4").fake(tiles).permute(0, 1, 3, 2, 4).reshape(2, 32, 64)
    assert torch.equal(xh, want)


def test_mx_scale_rules():
    """floor clips the block max into the element range; rceil keeps it."""
    x = torch.zeros(1, 32)
    x[0, 0] = 7.0  # E2M1: floor → X = 2^(2-2) = 1, 7 clips to 6; rceil → X = 2^ceil(log2 7/6) = 2, 7/2 = 3.5 → 4
    fl, rc = get_quantizer("mxfp4-floor").quantize(x), get_quantizer("mxfp4").quantize(x)
    assert fl.scale.item() == 127 and rc.scale.item() == 128
    assert get_quantizer("mxfp4-floor").dequantize(fl)[0, 0] == 6.0
    assert get_quantizer("mxfp4").dequantize(rc)[0, 0] == 8.0
    x[0, 0] = 500.0  # E4M3: floor → 2^(8-8) = 1, 500 clips to 448; rceil → 2^ceil(log2(500/448)) = 2, 250 → 256
    assert get_quantizer("mxfp8-floor").fake(x)[0, 0] == 448.0
    assert get_quantizer("mxfp8").fake(x)[0, 0] == 512.0
    # zero block → code 0; exact powers of two stay exact under both rules
    z = get_quantizer("mxfp8").quantize(torch.zeros(2, 32))
    assert (z.scale == 0).all() and (z.data == 0).all()
    p = torch.tensor([[2.0**k for k in range(-8, 24)]])
    for name in ("mxfp8", "mxfp8-floor"):
        assert get_quantizer(name).fake(p)[0, -1] == 2.0**23


@pytest.mark.parametrize("name,shape,match", [
    ("nvfp4", (4, 40), r"last-axis \(C\) size 40 is not divisible by the block size 16"),
    ("nvfp4-2d", (8, 32), r"row \(R\) size 8 is not divisible by the block size 16"),
    ("mxfp8", (2, 48), r"size 48 is not divisible by the block size 32"),
])
def test_sizes_not_divisible_are_errors(name, shape, match):
    with pytest.raises(ValueError, match=match):
        get_quantizer(name).quantize(torch.ones(shape))


@pytest.mark.parametrize("name", ["fp16", "fp8e4m3", "nvfp4", "mxfp4", "fp8e4m3-row"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_input_is_an_error(name, dtype):
    with pytest.raises(TypeError, match="floating-point"):
        get_quantizer(name).quantize(torch.ones(2, 32, dtype=dtype))


def test_bad_rbits_and_missing_bits():
    q = get_quantizer("fp16-sr")
    x = torch.ones(4, 16)
    with pytest.raises(ValueError, match="rbits"):
        q.quantize(x, rbits=torch.zeros(4, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="integer"):
        q.quantize(x, rbits=torch.zeros(4, 16))
    with pytest.raises(ValueError, match="pass rbits .* or seed"):
        q.fake(x)
    # deterministic formats ignore bits (the contract: only stochastic formats consume them)
    assert torch.equal(get_quantizer("fp16").fake(x, rbits=torch.zeros(1)), x)


def test_unknown_name_lists_known_formats():
    with pytest.raises(ValueError) as e:
        get_quantizer("nvfp5")
    for n in ("nvfp4", "fp16-sr", "mxfp8", "fp8e4m3-row"):
        assert n in str(e.value)


def test_qtensor_of_another_format_is_refused():
    qt = get_quantizer("nvfp4").quantize(torch.ones(1, 16))
    with pytest.raises(ValueError, match="nvfp4-row"):
        get_quantizer("nvfp4-row").dequantize(qt)


def test_float_inputs_of_every_width_and_shapes():
    x = torch.randn(3, 2, 32)
    for name in ("fp16", "nvfp4", "mxfp8", "fp8e4m3-mat"):
        q = get_quantizer(name)
        ref = q.fake(x)
        assert ref.dtype == torch.float32 and ref.shape == x.shape
        assert torch.equal(q.fake(x.double()), ref)  # these values are fp32 already
        assert torch.equal(q.fake(x[0, 0]), q.fake(x[0, :1])[0])  # a vector is one 1-row matrix
    assert get_quantizer("fp8e4m3").fake(x.half()).dtype == torch.float32
    # non-contiguous views and tensors that require grad quantize like their contiguous values
    xt = torch.randn(64, 32).t()
    for name in ("nvfp4-sr", "fp16-sr", "mxfp8", "fp8e4m3-row"):
        q = get_quantizer(name)
        want = q.fake(xt.contiguous(), seed=3)
        assert torch.equal(q.fake(xt, seed=3), want)
        assert torch.equal(q.fake(xt.contiguous().requires_grad_(), seed=3), want)


def test_storage_bytes():
    x = torch.randn(4, 64, 128)
    assert get_quantizer("nvfp4").quantize(x).nbytes() == x.numel() // 2 + x.numel() // 16 + 4 * 4
    assert get_quantizer("fp16").quantize(x).nbytes() == 2 * x.numel()
    assert get_quantizer("mxfp4").quantize(x).nbytes() == x.numel() // 2 + x.numel() // 32


# SQNR floors (dB) on Gaussian data: a few dB under the measured value, so a broken format fails.
SQNR_FLOOR = {"fp32": 200, "bf16": 50, "fp16": 68, "fp8e4m3": 29, "fp8e5m2": 23, "nvfp4": 18, "mxfp8": 29,
              "mxfp4": 16}


@pytest.mark.parametrize("name", [n for n in known_quantizers() if not n.endswith("-sr")] +
                         [n for n in known_quantizers() if n.endswith("-sr")])
def test_sqnr_floor(name):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, 128, generator=g)
    xh = get_quantizer(name).fake(x, seed=5)
    err = (xh - x).double().pow(2).sum()
    sqnr = math.inf if err == 0 else 10 * math.log10(float(x.double().pow(2).sum() / err))
    base = name.removesuffix("-sr")
    family = next(k for k in sorted(SQNR_FLOOR, key=len, reverse=True) if base.startswith(k))
    floor = SQNR_FLOOR[family] - (4 if name.endswith("-sr") else 0) - (2 if "2d" in base or "floor" in base else 0)
    assert sqnr >= floor, f"{name}: SQNR {sqnr:.1f} dB < {floor} dB"


def test_fp32_format_from_float64_is_the_ieee_cast():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4096, generator=g, dtype=torch.float64) * torch.exp(torch.randn(4096, generator=g, dtype=torch.float64) * 40)
    x = torch.cat([x, torch.tensor([math.inf, -math.inf, 0.0, -0.0, 1e-50, 2.0**-149 * 1.5, 2.0**-150])])
    got = get_quantizer("fp32").fake(x)
    assert torch.equal(got.view(torch.int32), x.float().view(torch.int32))
    bits = R.round_to_code(torch.tensor([math.nan, -math.nan]), R.FP32)
    assert bits.tolist() == [0x7FC00000, -(1 << 31) | 0x7FC00000]


@pytest.mark.parametrize("name", known_quantizers())
@pytest.mark.parametrize("shape", [(0, 32), (2, 0, 32), (0,)])
def test_empty_tensors_round_trip_or_are_refused_clearly(name, shape):
    q = get_quantizer(name)
    x = torch.empty(shape)
    kw = {"seed": 0} if q.stochastic else {}
    scaled_by_data = (q.scale_format or "").startswith(("e4m3", "fp32"))  # scales derived from the data's max
    if scaled_by_data:
        with pytest.raises(ValueError, match=rf"^{name}: cannot quantize an empty tensor \(shape {re.escape(str(shape))}"):
            q.quantize(x, **kw)
    else:
        y = q.fake(x, **kw)
        assert y.shape == shape and y.dtype == torch.float32


@pytest.mark.parametrize("name", ["fp16", "bf16-sr", "fp8e4m3", "nvfp4", "mxfp8"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_input_comes_back_as_float32_as_documented(name, dtype):
    q = get_quantizer(name)
    x = torch.linspace(-3, 3, 64, dtype=dtype).reshape(2, 32)
    kw = {"seed": 0} if q.stochastic else {}
    assert q.dequantize(q.quantize(x, **kw)).dtype == torch.float32 and q.fake(x, **kw).dtype == torch.float32
    assert "float32" in type(q).dequantize.__doc__ and "float16/bfloat16" in type(q).fake.__doc__
