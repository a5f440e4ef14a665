"""The ReplaySSM state machine (precision_lab.engines.torch_decode) against conventional decode.

float64 runs use the "fp32" format, which the state machine applies as the identity in every
compute dtype (see precision_lab.state.StateWriter), so these tests see the algebra without fp32 rounding.
"""
import pytest
import torch
from precision_lab.quant import fake_quantize, get_quantizer
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE, state_rbits

from precision_lab.engines.torch_decode import run_decode
from precision_lab.layer import Drafts, random_inputs, run_layer
from precision_lab.policy import StatePolicy
from precision_lab.recurrences import _core, prepare

KINDS = ["mamba2", "gdn", "kda"]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def conventional_states(inp) -> list[torch.Tensor]:
    """State after every token of an unquantized conventional run (index n = n tokens consumed)."""
    p = prepare(inp)
    S = _core.zeros_state(p)
    out = [S]
    for t in range(p.k.shape[1]):
        S, _, _ = _core.step(S, p.token(t))
        out.append(S)
    return out


# ---------------------------------------------------------------------------------------------
# float64 equivalence and write counts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_replay_equals_conventional_float64_1000_steps(kind):
    inp = random_inputs(kind, batch=1, tokens=1000, heads=2, rows=8, cols=16, seed=1)
    y_ref, s_ref = run_layer(inp, "fp32")
    assert s_ref.state_writes == 1000 and s_ref.record_writes == 0
    policies = ["shared:fp32", "split:fp32/fp32"] + (["split:fp32/fp32@fold=buffered"] if kind != "mamba2" else [])
    for pol in policies:
        y, s = run_layer(inp, pol)
        assert rel(y, y_ref) <= 1e-12, pol
        # measured by the code path: 62 flushes (steps 15, 31, ..., 991), 938 buffered records
        assert (s.state_writes, s.flushes, s.record_writes) == (62, 62, 1000 - 62), pol
        assert s.copy_writes == (124 if pol.startswith("split") else 62)
        assert s.state.window == 1000 - 62 * 16 and s.state.step == 1000


@pytest.mark.parametrize("kind", KINDS)
def test_speculative_4_drafts_300_rounds_float64(kind):
    gen = torch.Generator().manual_seed(10)
    accept = torch.randint(1, 6, (300,), generator=gen)       # 1..T with T = 5
    n_tok = int(accept.sum())
    inp = random_inputs(kind, batch=1, tokens=n_tok, heads=2, rows=8, cols=16, seed=2)
    y_ref, _ = run_layer(inp, "fp32")
    states = conventional_states(inp)
    # the snapshot-per-draft baseline, measured on the conventional path
    y_snap, s_snap = run_layer(inp, "fp32", drafts=Drafts(4, accept))
    assert rel(y_snap, y_ref) <= 1e-12
    assert s_snap.state_writes == 5 * 300 and s_snap.extra["rounds"] == 300
    for pol in ("shared:fp32", "split:fp32/fp32"):
        trace: list = []
        y, s = run_decode(inp, StatePolicy.parse(pol), drafts=Drafts(4, accept), trace=trace)
        assert rel(y, y_ref) <= 1e-12, pol
        assert s.extra["rounds"] == 300 and s.implementation.endswith("replay-speculative")
        assert len(trace) == s.flushes == s.state_writes
        assert s.state_writes < s_snap.state_writes / 5      # ~1 write per 2-3 rounds at L = 16, T = 5
        assert s.record_writes == 5 * 300                    # every verified token wrote a record
        for n, U in trace:                                   # nothing from a draft in the checkpoint
            assert rel(U, states[n]) <= 1e-12, (pol, n)


def test_rejected_drafts_never_leak():
    """Huge rejected drafts: if any entered the checkpoint or a later window, outputs would explode."""
    gen = torch.Generator().manual_seed(3)
    accept = torch.randint(1, 4, (60,), generator=gen)
    n_tok = int(accept.sum())
    inp = random_inputs("gdn", batch=2, tokens=n_tok, seed=4)
    junk = random_inputs("gdn", batch=2, tokens=60 * 3, seed=5)
    junk.v = junk.v * 1e6
    y_ref, _ = run_layer(inp, "fp32")
    for pol in ("split:fp32/fp32@L6", "split:fp32/fp32@L6@fold=buffered", "shared:fp32@L9"):
        y, s = run_layer(inp, pol, drafts={"n": 2, "accept": accept, "rejected": junk})
        assert rel(y, y_ref) <= 1e-12, pol


def test_speculative_window_errors():
    inp = random_inputs("mamba2", batch=1, tokens=10)
    with pytest.raises(ValueError, match="L >= T"):
        run_layer(inp, "shared:fp32@L4", drafts=Drafts(4, [1] * 10))
    with pytest.raises(ValueError, match="L >= 2T"):
        run_layer(inp, "shared:fp32@L8", drafts=Drafts(4, [1] * 10))
    with pytest.raises(ValueError, match="1..T"):
        run_layer(inp, "shared:fp32", drafts=Drafts(4, [6] * 10))
    with pytest.raises(ValueError, match="schedule"):
        run_layer(inp, "shared:fp32", drafts=Drafts(4, [1] * 3))


# ---------------------------------------------------------------------------------------------
# fp32 rounding
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_fp32_modes_agree_with_float64_to_fp32_rounding(kind):
    inp64 = random_inputs(kind, batch=2, tokens=200, seed=6)
    inp32 = random_inputs(kind, batch=2, tokens=200, seed=6, dtype=torch.float32)
    y64, _ = run_layer(inp64, "fp32")
    y32, _ = run_layer(inp32, "fp32")
    assert y32.dtype == torch.float32
    assert 1e-9 < rel(y32.double(), y64) < 2e-6          # fp32 rounding, not float64, not worse
    for pol in ("shared:fp32", "split:fp32/fp32"):
        y, _ = run_layer(inp32, pol)
        assert rel(y.double(), y32.double()) < 2e-6, pol
        assert rel(y.double(), y64) < 2e-6, pol


# ---------------------------------------------------------------------------------------------
# Prefill and segments
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_chunked_prefill_then_decode_equals_decode(kind):
    inp = random_inputs(kind, batch=2, tokens=150, seed=7)
    y_ref, _ = run_layer(inp, "fp32")
    for pol in ("fp32", "shared:fp32", "split:fp32/fp32@L8"):
        y, s = run_layer(inp, pol, prefill_len=70)   # prefill crosses a 64-token chunk boundary
        assert rel(y, y_ref) <= 1e-12, pol
        flushes = 80 // 8 if "L8" in pol else (80 // 16 if pol != "fp32" else 0)
        assert s.state_writes == 1 + (80 if pol == "fp32" else flushes), pol
        assert s.state.prefill_tokens == 70 and s.state.step == 80


@pytest.mark.parametrize("pol", ["split:fp16-sr/nvfp4-sr", "shared:nvfp4-sr@L8",
                                 "split:bf16-sr/fp8e4m3@fold=buffered", "conventional:bf16-sr"])
def test_segments_equal_one_run_bit_for_bit(pol):
    kind = "kda" if "buffered" in pol else "gdn" if "shared" in pol else "mamba2"
    inp = random_inputs(kind, batch=2, tokens=90, seed=8, dtype=torch.float32)
    S0 = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(1))
    kw = dict(layer_index=3, seq_ids=torch.tensor([7, 1000]))
    y_full, s_full = run_layer(inp, pol, initial_state=S0, prefill_len=11, **kw)
    cuts = [0, 11, 12, 19, 35, 36, 61, 90]          # mid-window splits, a 1-token segment
    ys, state = [], None
    for t0, t1 in zip(cuts[:-1], cuts[1:]):
        seg = type(inp)(**{k: (v[:, t0:t1] if isinstance(v, torch.Tensor) and v.dim() > 1 else v)
                           for k, v in vars(inp).items()})
        if state is None:
            y, s = run_layer(seg, pol, initial_state=S0, prefill_len=11, **kw)
        else:
            y, s = run_layer(seg, pol, state=state, **kw)
        ys.append(y)
        state = s.state
    assert torch.equal(torch.cat(ys, 1), y_full)
    assert torch.equal(state.update, s_full.state.update) and torch.equal(state.read, s_full.state.read)
    assert state.writes == s_full.state.writes and state.window == s_full.state.window
    for k in s_full.state.records:
        assert torch.equal(state.records[k], s_full.state.records[k])


# ---------------------------------------------------------------------------------------------
# Lossy modes: the policy is applied, and where
# ---------------------------------------------------------------------------------------------
def _flush_mask(T: int, L: int) -> torch.Tensor:
    return (torch.arange(T) % L) == L - 1


@pytest.mark.parametrize("kind", KINDS)
def test_split_update_path_is_exact_and_reads_are_lossy(kind):
    """split:fp32/F keeps the recurrence in fp32: checkpoints and flush-step outputs equal
    shared:fp32 bit for bit (Mamba-2; GDN/KDA with the recompute fold), while the non-flush outputs
    read the lossy copy. With fold=buffered, read error enters the GDN/KDA checkpoint."""
    inp = random_inputs(kind, batch=2, tokens=64, seed=9, dtype=torch.float32)
    y_ex, s_ex = run_layer(inp, "shared:fp32")
    y_sp, s_sp = run_layer(inp, "split:fp32/nvfp4")
    flush = _flush_mask(64, 16)
    assert torch.equal(s_sp.state.update, s_ex.state.update)
    assert torch.equal(y_sp[:, flush], y_ex[:, flush])
    assert rel(y_sp[:, ~flush].double(), y_ex[:, ~flush].double()) > 1e-3
    assert not torch.equal(s_sp.state.read, s_sp.state.update)
    # both copies are cast from the same fp32 result (the fp32 update copy is that result itself)
    assert torch.equal(s_sp.state.read, get_quantizer("nvfp4").fake(s_sp.state.update))
    if kind != "mamba2":
        _, s_buf = run_layer(inp, "split:fp32/nvfp4@fold=buffered")
        assert rel(s_buf.state.update.double(), s_ex.state.update.double()) > 1e-4
        # in shared mode both folds are the same arithmetic
        pb = StatePolicy("shared", "nvfp4-sr", "nvfp4-sr", gdn_fold="buffered")
        y_b, st_b = run_layer(inp, pb)
        y_r, st_r = run_layer(inp, "shared:nvfp4-sr")
        assert torch.equal(y_b, y_r) and torch.equal(st_b.state.update, st_r.state.update)


def test_lossy_modes_change_outputs_as_expected():
    inp = random_inputs("mamba2", batch=2, tokens=512, seed=3, dtype=torch.float32)
    ref = random_inputs("mamba2", batch=2, tokens=512, seed=3)
    y64, _ = run_layer(ref, "fp32")

    def err(pol):
        y, s = run_layer(inp, pol)
        e = ((y.double() - y64).norm(dim=-1) / y64.norm(dim=-1))
        return float(e[:, 256:].mean()), s

    e_fp32, _ = err("fp32")
    e_conv, s_conv = err("conventional:nvfp4-sr")
    e_shared, s_shared = err("shared:nvfp4-sr")
    e_split, s_split = err("split:fp32/nvfp4")
    e_split16, _ = err("split:fp16-sr/nvfp4")
    e_bf16, _ = err("conventional:bf16")
    assert e_fp32 < 1e-5
    assert 1e-4 < e_bf16 < e_conv                       # a lossy format is applied, and which one matters
    assert e_split < e_shared < e_conv                  # fewer lossy writes, and none in the recurrence
    assert abs(e_split16 - e_split) < 0.1 * e_split     # fp16-SR update tracks fp32
    assert (s_conv.state_writes, s_shared.state_writes, s_split.copy_writes) == (512, 32, 64)
    # conventional stores round_F every step: the stored state is bf16-representable
    _, s = run_layer(inp, "conventional:bf16")
    assert torch.equal(s.state.update, s.state.update.to(torch.bfloat16).float())


def test_sr_bits_follow_the_counter_layout():
    """Prefill result written with event 1 (event 0 = initial cast), copy 0 update / copy 1 read."""
    inp = random_inputs("gdn", batch=2, tokens=20, seed=12, dtype=torch.float32)
    S0 = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(2))
    pol = StatePolicy.parse("split:fp16-sr/nvfp4-sr", seed=99)
    seq = torch.tensor([5, 3])
    _, s = run_layer(inp, pol, initial_state=S0, prefill_len=20, layer_index=4, seq_ids=seq)
    bits = lambda ev, copy: state_rbits(99, 4, seq.view(2, 1), torch.arange(4).view(1, 4), ev, (8, 16), copy)
    U0 = fake_quantize(get_quantizer("fp16-sr"), S0, bits(0, COPY_UPDATE))
    _, S = _core.chunked(prepare(inp), U0, 64)
    assert torch.equal(s.state.update, fake_quantize(get_quantizer("fp16-sr"), S, bits(1, COPY_UPDATE)))
    assert torch.equal(s.state.read, fake_quantize(get_quantizer("nvfp4-sr"), S, bits(1, COPY_READ)))
    # a different seed or sequence id changes the stored bits
    _, s2 = run_layer(inp, StatePolicy.parse(pol, seed=100), initial_state=S0, prefill_len=20, layer_index=4,
                      seq_ids=seq)
    assert not torch.equal(s2.state.update, s.state.update)


def test_non_finite_state_is_reported():
    inp = random_inputs("mamba2", batch=1, tokens=40, seed=1, dtype=torch.float32)
    inp.x[0, 20] = float("inf")
    with pytest.raises(FloatingPointError, match=r"layer 2, decode step 20.*conventional:bf16"):
        run_layer(inp, "conventional:bf16", layer_index=2)
    with pytest.raises(FloatingPointError, match=r"layer 0, decode step 31 \(flush\).*shared:fp16"):
        run_layer(inp, "shared:fp16")
    S0 = torch.full((1, 4, 8, 16), float("nan"))
    with pytest.raises(FloatingPointError, match="initial state"):
        run_layer(inp, "split:fp32/nvfp4", initial_state=S0)


def test_speculative_segments_continue_bit_for_bit():
    """A speculative stream cut at a round boundary, continued from the LayerState (lossy SR mode)."""
    accept = torch.randint(1, 4, (40,), generator=torch.Generator().manual_seed(13))
    n_tok, k = int(accept.sum()), 17
    cut = int(accept[:k].sum())
    inp = random_inputs("gdn", batch=2, tokens=n_tok, seed=14, dtype=torch.float32)
    pol = "split:bf16-sr/nvfp4-sr@L8@fold=buffered"
    y_full, s_full = run_layer(inp, pol, drafts=Drafts(2, accept))
    seg = lambda t0, t1: type(inp)(**{n: (v[:, t0:t1] if isinstance(v, torch.Tensor) else v)
                                      for n, v in vars(inp).items()})
    y1, s1 = run_layer(seg(0, cut), pol, drafts=Drafts(2, accept[:k]))
    y2, s2 = run_layer(seg(cut, n_tok), pol, drafts=Drafts(2, accept[k:]), state=s1.state)
    assert torch.equal(torch.cat([y1, y2], 1), y_full)
    assert torch.equal(s2.state.update, s_full.state.update) and s2.state.window == s_full.state.window
    assert s1.state_writes + s2.state_writes == s_full.state_writes > 0
