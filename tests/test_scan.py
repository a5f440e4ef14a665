"""The scan engine (precision_lab.engines.torch_scan) against the decode engine (the ground truth), every mode.

float64 compute: outputs agree to 1e-12 and the stored checkpoints are the same bits, in every mode
and format, SR included (the fold and the SR bits are the decode engine's; only the output
arithmetic differs). float32 compute: lossless policies agree to fp32 rounding; for Mamba-2 the
stored states are the same bits even with lossy SR formats (its records do not depend on the state).
Lengths are awkward on purpose: T not a multiple of L, prefill, segments cut mid-window.
"""
import dataclasses

import pytest
import torch

import precision_lab.engines.torch_scan as scan_mod
from precision_lab.layer import random_inputs, run_layer
from precision_lab.policy import StatePolicy

KINDS = ("mamba2", "gdn", "kda")
# every mode; lossy SR formats; both GDN folds; L that does not divide T; L = 1 (every step flushes)
POLICIES = (
    "fp32",
    "conventional:fp16-sr",
    "conventional:nvfp4-sr",
    "shared:nvfp4-sr@L8",
    "shared:fp32@L5",
    "split:fp32/nvfp4@L8",
    "split:fp16-sr/nvfp4@L8",
    "split:fp16-sr/nvfp4@L8@fold=buffered",
    "split:bf16-sr/fp8e4m3@L5@fold=buffered",
    "split:fp16-sr/nvfp4@L1",
)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def inputs(kind: str, tokens: int = 45, dtype=torch.float64, seed: int = 0):
    # state [8, 32]: NVFP4 blocks of 16 need C % 16 == 0; 4 heads in 2 groups / key heads (GVA)
    return random_inputs(kind, batch=2, tokens=tokens, heads=4, rows=8, cols=32, groups=2, dtype=dtype, seed=seed)


def cut(inp, t0: int, t1: int):
    """Tokens t0..t1-1 of a layer's inputs (per-token tensors have the token axis at dim 1)."""
    T = inp.k.shape[1] if hasattr(inp, "k") else inp.x.shape[1]
    return dataclasses.replace(inp, **{f: v[:, t0:t1] for f, v in vars(inp).items()
                                       if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[1] == T})


def assert_same_state(a, b, tol: float = 0.0):
    """Same counters and record layout; checkpoints bit-identical (tol = 0) or within rel. tol."""
    assert (a.window, a.step, a.writes, a.prefill_tokens) == (b.window, b.step, b.writes, b.prefill_tokens)
    assert (a.read is a.update) == (b.read is b.update)
    for x, y in ((a.update, b.update), (a.read, b.read)):
        assert x.dtype == y.dtype
        assert torch.equal(x, y) if tol == 0 else rel(x, y) <= tol
    assert set(a.records) == set(b.records)
    for name in a.records:
        assert a.records[name].shape == b.records[name].shape, name
        if a.records[name].numel():
            assert rel(a.records[name], b.records[name]) <= max(tol, 1e-12), name


def bitwise_states(kind: str, policy: str) -> bool:
    """Where the scan stores the decode engine's exact bits (float64 compute): a lossy update format
    (its rounding absorbs the last-bit differences of GDN/KDA's d's), and Mamba-2 windows (same
    fold). Identity storage of the delta rule keeps last-bit differences, and the fp32 / conventional
    identity path runs chunked."""
    p = StatePolicy.parse(policy)
    return p.update != "fp32" or (kind == "mamba2" and p.is_replay)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_scan_equals_decode_float64(kind, policy):
    inp = inputs(kind)
    prefill = 7 if "nvfp4" in policy else 0  # half the rows start from a prefill
    y_d, s_d = run_layer(inp, policy, "decode", prefill_len=prefill)
    y_s, s_s = run_layer(inp, policy, "scan", prefill_len=prefill)
    assert s_s.engine == "scan" and s_s.implementation.startswith("torch-scan:")
    assert rel(y_s, y_d) <= 1e-12
    assert_same_state(s_s.state, s_d.state, 0.0 if bitwise_states(kind, policy) else 1e-12)
    for f in ("state_writes", "record_writes", "copy_writes", "flushes"):
        assert getattr(s_s, f) == getattr(s_d, f), f


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ("fp32", "shared:fp32@L8", "split:fp32/fp32"))
def test_scan_equals_decode_float32_lossless(kind, policy):
    inp = inputs(kind, tokens=40, dtype=torch.float32)
    y_d, s_d = run_layer(inp, policy, "decode")
    y_s, s_s = run_layer(inp, policy, "scan")
    assert y_s.dtype == torch.float32
    assert rel(y_s, y_d) <= 2e-6
    assert_same_state(s_s.state, s_d.state, 2e-6)


@pytest.mark.parametrize("policy", ("shared:nvfp4-sr", "split:fp16-sr/nvfp4@L8", "split:bf16-sr/fp8e4m3-sr@L4"))
def test_scan_mamba2_float32_lossy_states_bitwise(policy):
    """Mamba-2's records do not depend on the state: the scan folds exactly what decode folds, so even
    fp32 SR runs store identical bits, and the outputs differ only by fp32 output arithmetic."""
    inp = inputs("mamba2", tokens=70, dtype=torch.float32)
    y_d, s_d = run_layer(inp, policy, "decode", prefill_len=3)
    y_s, s_s = run_layer(inp, policy, "scan", prefill_len=3)
    assert rel(y_s, y_d) <= 2e-6
    assert_same_state(s_s.state, s_d.state)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ("split:fp16-sr/nvfp4@L8", "split:fp16-sr/nvfp4@L8@fold=buffered",
                                    "conventional:nvfp4-sr"))
def test_segments_mid_window_any_engine(kind, policy):
    """A stream cut anywhere (mid-window, empty segment, one token) and served by alternating engines,
    from a given initial state with a prefill, equals one decode run of the whole stream."""
    inp = inputs(kind, tokens=50)
    S0 = torch.randn(2, 4, 8, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    y_ref, s_ref = run_layer(inp, policy, "decode", initial_state=S0, prefill_len=5)
    cuts = [(0, 13), (13, 14), (14, 14), (14, 33), (33, 50)]
    engines = ["scan", "decode", "scan", "scan", "scan"]
    parts, st = [], None
    for (a, b), eng in zip(cuts, engines):
        kw = {"initial_state": S0, "prefill_len": 5} if st is None else {"state": st}
        y, s = run_layer(cut(inp, a, b), policy, eng, **kw)
        parts.append(y)
        st = s.state
    assert rel(torch.cat(parts, 1), y_ref) <= 1e-12
    assert_same_state(st, s_ref.state)


def test_blocks_of_windows(monkeypatch):
    """Full windows are batched in blocks; one window per block must give the same result."""
    inp = inputs("kda", tokens=64)
    pol = "split:fp16-sr/nvfp4@L4"
    y_big, s_big = run_layer(inp, pol, "scan")
    monkeypatch.setattr(scan_mod, "_BLOCK_ELEMENTS", 1)
    y_one, s_one = run_layer(inp, pol, "scan")
    assert rel(y_one, y_big) <= 1e-12
    assert torch.equal(s_one.state.update, s_big.state.update)


def test_gdn_folds_differ_and_follow_decode():
    """The two GDN folds give different results (so a test mixing them up would fail), and the scan
    engine follows the decode engine in each."""
    inp = inputs("gdn", tokens=48)
    out = {}
    for fold in ("recompute", "buffered"):
        pol = f"split:fp32/nvfp4@L8@fold={fold}"
        y_d, _ = run_layer(inp, pol, "decode")
        y_s, _ = run_layer(inp, pol, "scan")
        assert rel(y_s, y_d) <= 1e-12
        out[fold] = y_s
    assert rel(out["recompute"], out["buffered"]) > 1e-4


def test_sr_seed_and_layer_index_change_bits():
    inp = inputs("mamba2", tokens=32)
    base, _ = run_layer(inp, "shared:nvfp4-sr@L8", "scan")
    seeded, _ = run_layer(inp, "shared:nvfp4-sr@L8@seed=3", "scan")
    layered, _ = run_layer(inp, "shared:nvfp4-sr@L8", "scan", layer_index=1)
    dec, _ = run_layer(inp, "shared:nvfp4-sr@L8", "decode", layer_index=1)
    assert rel(seeded, base) > 1e-3 and rel(layered, base) > 1e-3
    assert rel(layered, dec) <= 1e-12


def test_errors():
    inp = inputs("gdn", tokens=10)
    with pytest.raises(ValueError, match="prefill_len"):
        run_layer(inp, "split:fp32/nvfp4", "scan", prefill_len=11)
    _, s = run_layer(inp, "split:fp32/nvfp4", "scan")
    with pytest.raises(ValueError, match="policy"):
        run_layer(inp, "shared:nvfp4", "scan", state=s.state)
    with pytest.raises(ValueError, match="runs token by token"):
        run_layer(inp, "split:fp32/nvfp4", "scan", drafts={"n": 1, "accept": [1] * 10})
