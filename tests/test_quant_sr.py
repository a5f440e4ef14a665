"""Stochastic rounding (docs/design.md §5): round away from zero iff floor(frac · 2^16) + (r & 0xFFFF) >= 2^16.
Bracket, fixed points, exhaustive r, saturation, determinism under a seed, independence of counters."""
import math

import numpy as np
import pytest
import torch
from precision_lab.quant import get_quantizer, philox
from precision_lab.quant import oracle as O

SR_ELEMENTS = {"bf16-sr": "bf16", "fp16-sr": "fp16", "fp8e4m3-sr": "e4m3", "fp8e5m2-sr": "e5m2"}
ALL_R = torch.arange(1 << 16, dtype=torch.int64)


def neighbours(name: str, x: np.ndarray):
    """(lo, hi): the grid points of format ``name`` around |x| (float64, from the oracle's grid)."""
    vals, _ = O.grid(name)
    a = np.minimum(np.abs(x), vals[-1])
    i = np.searchsorted(vals, a, side="right") - 1
    return vals[i], np.where(vals[i] == a, vals[i], vals[np.minimum(i + 1, len(vals) - 1)])


def _log_uniform(name, n, seed):
    g = np.random.default_rng(seed)
    vmax = O.SPECS[name].max_finite
    tiny = O.grid(name)[0][1]  # smallest subnormal
    mag = np.exp(g.uniform(np.log(tiny / 4), np.log(vmax), n)).astype(np.float32)
    return torch.from_numpy(np.where(g.random(n) < 0.5, -mag, mag))


@pytest.mark.parametrize("qname", list(SR_ELEMENTS))
def test_bracket(qname):
    name = SR_ELEMENTS[qname]
    x = _log_uniform(name, 50000, 0)
    rb = torch.randint(0, 1 << 32, x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.int64)
    xh = get_quantizer(qname).fake(x, rbits=rb).double().numpy()
    lo, hi = neighbours(name, x.double().numpy())
    assert ((np.abs(xh) == lo) | (np.abs(xh) == hi)).all()
    assert (np.signbit(xh) == np.signbit(x.numpy())).all()
    assert (np.abs(xh) != lo).any() and (np.abs(xh) != hi).any()  # both neighbours occur


@pytest.mark.parametrize("qname", list(SR_ELEMENTS))
def test_representable_values_never_move(qname):
    name = SR_ELEMENTS[qname]
    vals, _ = O.grid(name)
    v = np.concatenate([vals, -vals])
    x = torch.from_numpy(v).float().repeat(4)
    rb = torch.randint(0, 1 << 32, x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.int64)
    assert torch.equal(get_quantizer(qname).fake(x, rbits=rb), x)


@pytest.mark.parametrize("qname", list(SR_ELEMENTS))
def test_exhaustive_r_counts_round_ups(qname):
    """Over all 2^16 values of r, x rounds up exactly floor(frac · 2^16) times."""
    name = SR_ELEMENTS[qname]
    q = get_quantizer(qname)
    xs = _log_uniform(name, 6, 3).tolist() + [float(O.grid(name)[0][1]) * 0.3, O.SPECS[name].max_finite * 0.99]
    for xv in (float(np.float32(v)) for v in xs):  # the exact fp32 input values
        x = torch.full((1 << 16,), xv, dtype=torch.float32)
        xh = q.fake(x, rbits=ALL_R).double().numpy()
        lo, hi = (float(t[0]) for t in neighbours(name, np.array([xv], dtype=np.float64)))
        frac = (abs(np.float64(xv)) - lo) / (hi - lo) if hi > lo else 0.0
        ups = int((np.abs(xh) == hi).sum()) if hi > lo else 0
        assert ups == math.floor(frac * 65536), f"{qname} x={xv!r}: {ups} round-ups, frac={frac}"
        # the ones that round up are exactly the largest r values
        if 0 < ups < 65536:
            assert (np.abs(xh[-ups:]) == hi).all() and (np.abs(xh[:-ups]) == lo).all()


def _exact_scale_nvfp4(x_elems: torch.Tensor) -> torch.Tensor:
    """A [1, 32] matrix whose first element 2688 makes S_enc = 1 and whose second block has block
    amax 6 · 2^-3, so its block scale is exactly 2^-3 and enc, dec are exact powers of two."""
    m = torch.zeros(x_elems.shape[0], 32)
    m[:, 0] = 2688.0
    m[:, 16] = 6 * 2.0**-3
    m[:, 17] = x_elems
    return m


def test_nvfp4_sr_bracket_fixed_points_and_exhaustive_r():
    q = get_quantizer("nvfp4-sr")
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    for v in grid:  # element grid points × 2^-3 never move
        m = _exact_scale_nvfp4(torch.full((4096,), -v * 2.0**-3))
        out = q.fake(m, rbits=torch.randint(0, 1 << 16, m.shape, generator=torch.Generator().manual_seed(0)))
        assert torch.equal(out, m)
    for y, lo, hi in [(2.3, 2.0, 3.0), (0.1, 0.0, 0.5), (5.9, 4.0, 6.0), (1.26, 1.0, 1.5)]:
        xv = torch.tensor(y * 2.0**-3, dtype=torch.float32)
        m = _exact_scale_nvfp4(xv.expand(1 << 16))
        rb = torch.zeros(m.shape, dtype=torch.int64)
        rb[:, 17] = ALL_R
        out = q.fake(m, rbits=rb)[:, 17] * 8
        assert set(out.unique().tolist()) <= {lo, hi}
        frac = (float(xv) * 8 - lo) / (hi - lo)
        assert int((out == hi).sum()) == math.floor(frac * 65536)


def test_saturation_under_sr():
    # satfinite formats clamp first: max is a fixed point and SR never leaves the finite range
    for qname, vmax in (("fp8e4m3-sr", 448.0), ("fp8e5m2-sr", 57344.0)):
        x = torch.tensor([vmax, 1e30, math.inf, -math.inf]).repeat_interleave(1 << 16)
        out = get_quantizer(qname).fake(x, rbits=ALL_R.repeat(4))
        assert torch.equal(out.abs(), torch.full_like(out, vmax))
    out = get_quantizer("fp8e4m3-sr").fake(torch.full((1 << 16,), 440.0), rbits=ALL_R)
    assert set(out.unique().tolist()) == {416.0, 448.0} and int((out == 448).sum()) == 65536 * 24 // 32
    # fp16/bf16 follow IEEE: between max and 2^(emax+1) SR picks max or inf (the next grid point)
    out = get_quantizer("fp16-sr").fake(torch.full((1 << 16,), 65519.0), rbits=ALL_R)
    assert set(out.unique().tolist()) == {65504.0, math.inf}
    assert int(torch.isinf(out).sum()) == math.floor((65519 - 65504) / 32 * 65536)
    assert torch.isinf(get_quantizer("fp16-sr").fake(torch.tensor([70000.0]), rbits=torch.zeros(1, dtype=torch.int64))).all()


@pytest.mark.parametrize("qname", ["fp16-sr", "bf16-sr", "fp8e4m3-sr", "nvfp4-sr", "mxfp4-sr", "fp8e5m2-row-sr"])
def test_seed_is_philox_over_groups_of_the_flat_element_index(qname):
    """seed= draws the ad-hoc layout: flat element i is lane i % 8 of Philox(seed, i // 8)."""
    q = get_quantizer(qname)
    x = torch.randn(3, 4, 64, generator=torch.Generator().manual_seed(4))
    a = q.fake(x, seed=11)
    assert torch.equal(a, q.fake(x, seed=11))
    rb = philox.flat_rbits(11, x.numel()).reshape(x.shape)
    assert torch.equal(a, q.fake(x, rbits=rb))
    assert not torch.equal(a, q.fake(x, seed=12))
    # any integer dtype holding the words works (uint32 as docs/design.md §5 names it, int32 views, int64)
    assert torch.equal(a, q.fake(x, rbits=rb.to(torch.uint32))) and torch.equal(a, q.fake(x, rbits=rb.to(torch.int32)))
    # only the low 16 bits matter
    assert torch.equal(a, q.fake(x, rbits=rb & 0xFFFF)) and torch.equal(a, q.fake(x, rbits=rb | (0x5A5A << 16)))


def test_independence_across_counters():
    """At frac = 1/2 each element rounds up with probability 1/2, independently of its neighbours
    (element counter), of the next write event and of the other copy (the state counter layout)."""
    n = 16384
    x = torch.full((n,), 1 + 2**-11)  # fp16: halfway between 1 and 1 + 2^-10
    q = get_quantizer("fp16-sr")
    up = (q.fake(x, seed=3) > 1).double()
    tol = 4 * 0.5 / math.sqrt(n)
    assert abs(up.mean().item() - 0.5) < tol
    assert abs((up[1:] == up[:-1]).double().mean().item() - 0.5) < tol  # lag-1 agreement
    # the documented state counters: (event, copy) streams are uncorrelated
    rb = philox.state_rbits(7, 2, 0, 0, torch.tensor([1, 2]), (64, 256))  # [2, 64, 256]
    rb_read = philox.state_rbits(7, 2, 0, 0, 1, (64, 256), copy=philox.COPY_READ)
    ups = [(q.fake(x.reshape(64, 256), rbits=r) > 1).double() for r in (rb[0], rb[1], rb_read)]
    for a, b in ((0, 1), (0, 2)):
        assert abs((ups[a] == ups[b]).double().mean().item() - 0.5) < tol
    # frac = 1/4 (fp16 1 + 2^-12): P(up) = 1/4
    up4 = (q.fake(torch.full((n,), 1 + 2**-12), seed=5) > 1).double().mean().item()
    assert abs(up4 - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)


def test_sr_is_unbiased_up_to_the_16_bit_truncation():
    """E[SR(x)] over all r = lo + floor(frac · 2^16)/2^16 · (hi - lo): bias below one 2^-16 step."""
    x = _log_uniform("e4m3", 64, 9)
    q = get_quantizer("fp8e4m3-sr")
    mean = q.fake(x[:, None].expand(64, 1 << 16).contiguous(), rbits=ALL_R.expand(64, -1).contiguous()).double().mean(1)
    lo, hi = neighbours("e4m3", x.double().numpy())
    assert (np.abs(mean.numpy() - x.double().numpy()) <= (hi - lo) / 65536 + 1e-300).all()
