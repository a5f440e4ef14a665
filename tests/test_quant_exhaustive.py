"""Every fp16 and every bf16 bit pattern through each element format and through the NVFP4 chain,
against the independent float64 oracle (precision_lab.quant.oracle), at zero tolerance on codes."""
import numpy as np
import pytest
import torch
from precision_lab.quant import get_quantizer
from precision_lab.quant import oracle as O
from precision_lab.quant import rounding as R

ELEMENTS = ["bf16", "fp16", "e4m3", "e5m2", "e2m1"]


def all_patterns(dtype: torch.dtype) -> torch.Tensor:
    """The 65536 values of a 16-bit float format as float32 (exact), in bit-pattern order."""
    bits = torch.arange(1 << 16, dtype=torch.int32)
    return torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16).view(dtype).float()


@pytest.fixture(scope="module", params=[torch.float16, torch.bfloat16], ids=["fp16-patterns", "bf16-patterns"])
def patterns(request):
    return all_patterns(request.param)


def _inputs_for(name, x):
    # E2M1 has no NaN: the NaN policy is tested separately (round_to_code raises)
    return torch.where(torch.isnan(x), torch.zeros_like(x), x) if name == "e2m1" else x


@pytest.mark.parametrize("name", ELEMENTS)
def test_rne_every_pattern_matches_oracle(patterns, name):
    x = _inputs_for(name, patterns)
    got = R.round_to_code(x, R.ELEMENT_FORMATS[name]).numpy()
    want = O.round_codes(name, x.double().numpy())
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{name}: {bad.size} mismatches, first x={x[bad[0]].item()!r} got {got[bad[0]]:#x} want {want[bad[0]]:#x}"


@pytest.mark.parametrize("name", ELEMENTS)
@pytest.mark.parametrize("rkind", ["random", "zero", "max"])
def test_sr_every_pattern_matches_oracle(patterns, name, rkind):
    x = _inputs_for(name, patterns)
    g = torch.Generator().manual_seed(7)
    r = {"random": torch.randint(0, 1 << 32, x.shape, generator=g, dtype=torch.int64),
         "zero": torch.zeros(x.shape, dtype=torch.int64),
         "max": torch.full(x.shape, 0xFFFF, dtype=torch.int64)}[rkind]
    got = R.round_to_code(x, R.ELEMENT_FORMATS[name], r).numpy()
    want = O.round_codes(name, x.double().numpy(), (r & 0xFFFF).numpy())
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{name}: {bad.size} mismatches, first x={x[bad[0]].item()!r} got {got[bad[0]]:#x} want {want[bad[0]]:#x}"


@pytest.mark.parametrize("name", ELEMENTS)
def test_decode_every_code_matches_oracle(name):
    fmt = R.ELEMENT_FORMATS[name]
    codes = torch.arange(1 << fmt.bits)
    got = R.decode(codes, fmt).double().numpy()
    want = O.value_of(name, codes.numpy())
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{name}: code {int(np.nonzero(~same)[0][0]):#x}"
    # -0 keeps its sign
    assert np.signbit(got[fmt.sign_bit]) and not np.signbit(got[0])


@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_ieee_formats_equal_torch_cast(patterns, name, dtype):
    """The plain bf16/fp16 formats are exactly the IEEE cast (NaN payloads aside)."""
    q = get_quantizer(name)
    got = q.fake(patterns)
    want = patterns.to(dtype).float()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert torch.equal(got[ok].view(torch.int32), want[ok].view(torch.int32))


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3", "e5m2", "e2m1"])
def test_float64_input_rounds_once(name):
    """float64 input is rounded directly (not through fp32): values just off a tie by less than
    fp32 resolution must still round away from the tie."""
    vals, _ = O.grid(name)
    fin = vals[1:-1]
    mids = (fin[:-1] + fin[1:]) / 2
    x = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), -mids * (1 + 2.0**-40)])
    got = R.round_to_code(torch.from_numpy(x), R.ELEMENT_FORMATS[name]).numpy()
    assert (got == O.round_codes(name, x)).all()
    g = np.random.default_rng(3)
    y = g.standard_normal(20000) * np.exp(g.standard_normal(20000) * 3)
    r = g.integers(0, 1 << 16, y.shape)
    got = R.round_to_code(torch.from_numpy(y), R.ELEMENT_FORMATS[name], torch.from_numpy(r)).numpy()
    assert (got == O.round_codes(name, y, r)).all()


def _finite_blocks(patterns: torch.Tensor, shuffle: bool) -> torch.Tensor:
    x = patterns[torch.isfinite(patterns)]
    if shuffle:  # mixed-range blocks; sorted order gives blocks of similar magnitude
        x = x[torch.randperm(x.numel(), generator=torch.Generator().manual_seed(0))]
    n = x.numel() // 256 * 256
    return x[:n].reshape(-1, 4, 64)  # matrices [4, 64]: 16 blocks of 16 each


@pytest.mark.parametrize("granularity", ["matrix", "row"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["sorted", "shuffled"])
@pytest.mark.parametrize("sr", [False, True], ids=["rne", "sr"])
def test_nvfp4_chain_every_pattern_matches_oracle(patterns, granularity, shuffle, sr):
    x = _finite_blocks(patterns, shuffle)
    q = get_quantizer("nvfp4", granularity=granularity, sr=sr)
    rb = torch.randint(0, 1 << 32, x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.int64) if sr else None
    qt = q.quantize(x, rbits=rb)
    codes, s_codes, s_dec = O.nvfp4(x.numpy(), r=None if rb is None else (rb & 0xFFFF).numpy(), group=granularity)
    assert qt.data.dtype == torch.uint8 and qt.data.shape == (*x.shape[:-1], x.shape[-1] // 2)
    assert qt.scale.dtype == torch.float8_e4m3fn and qt.scale.shape == (*x.shape[:-1], x.shape[-1] // 16)
    assert np.array_equal(R.unpack_nibbles(qt.data).numpy(), codes)
    assert np.array_equal(qt.scale.view(torch.uint8).numpy(), s_codes)
    assert np.array_equal(qt.global_scale.numpy().view(np.uint32), s_dec.view(np.uint32))
    # dequant = value(code) · (f32(s) · S_dec), one fp32 product each
    dec = (O.value_of("e4m3", s_codes).astype(np.float32) * (s_dec[..., None, None] if granularity == "matrix"
                                                               else s_dec[..., None])).astype(np.float32)
    want = (O.value_of("e2m1", codes).astype(np.float32) * np.repeat(dec, 16, axis=-1)).astype(np.float32)
    assert np.array_equal(q.dequantize(qt).numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("name,elem", [("mxfp8", "e4m3"), ("mxfp8-floor", "e4m3"), ("mxfp4", "e2m1"),
                                       ("mxfp4-floor", "e2m1"), ("mxfp4-sr", "e2m1")])
def test_mx_every_pattern_matches_oracle(patterns, name, elem):
    """E8M0 scale from float64 log2 (floor: floor(log2 amax) - emax; rceil: ceil(log2 fp32(amax · fp32(1/max))))."""
    x = _finite_blocks(patterns, shuffle=True).reshape(-1, 32)
    rb = torch.randint(0, 1 << 16, x.shape, generator=torch.Generator().manual_seed(2)) if name.endswith("-sr") else None
    qt = get_quantizer(name).quantize(x, rbits=rb)
    xn = x.numpy()
    amax = np.abs(xn).max(axis=1).astype(np.float64)
    vmax, emax = {"e4m3": (448.0, 8), "e2m1": (6.0, 2)}[elem]
    with np.errstate(divide="ignore"):
        if "floor" in name:
            e = np.floor(np.log2(amax)) - emax
        else:
            v = (amax.astype(np.float32) * np.float32(1 / vmax)).astype(np.float64)
            e = np.ceil(np.log2(v))
    e = np.where(amax == 0, -127, np.clip(e, -127, 127)).astype(np.int64)
    assert np.array_equal(qt.scale.numpy().reshape(-1).astype(np.int64), e + 127)
    y = xn.astype(np.float64) / np.exp2(e.astype(np.float64))[:, None]
    codes = O.round_codes(elem, y, None if rb is None else rb.numpy())
    got = R.unpack_nibbles(qt.data).numpy() if elem == "e2m1" else qt.data.numpy()
    assert np.array_equal(got.astype(np.int64), codes)


@pytest.mark.parametrize("name", ["fp8e4m3-mat", "fp8e5m2-row", "fp8e4m3-row-sr"])
def test_scaled_fp8_every_pattern_matches_oracle(patterns, name):
    x = _finite_blocks(patterns, shuffle=False)
    elem, vmax = ("e4m3", 448.0) if "e4m3" in name else ("e5m2", 57344.0)
    rb = torch.randint(0, 1 << 16, x.shape, generator=torch.Generator().manual_seed(3)) if name.endswith("-sr") else None
    qt = get_quantizer(name).quantize(x, rbits=rb)
    xn = x.numpy()
    amax = np.abs(xn).max(axis=(1, 2) if "-mat" in name else 2, keepdims=True)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = np.where(amax == 0, np.float32(1), np.minimum(np.float32(vmax) / amax, np.finfo(np.float32).max))
    s_enc = s_enc.astype(np.float32)
    codes = O.round_codes(elem, (xn * s_enc).astype(np.float32).astype(np.float64), None if rb is None else rb.numpy())
    assert np.array_equal(qt.data.numpy().astype(np.int64), codes)
    assert np.array_equal(qt.scale.numpy(), (np.float32(1) / s_enc).reshape(qt.scale.shape))
