"""One state model for every engine (precision_lab.state): the packed device layout converts to and
from the tensor LayerState losslessly (codes included), the schedule is written once, and a stream
cut anywhere continues on any engine. Kernels run under the interpreter on CPU (tiny shapes)."""
from dataclasses import replace

import pytest
import torch

from precision_lab.engines import ENGINES, check_engine, resolve
from precision_lab.layer import Drafts, random_inputs, run_layer
from precision_lab.state import (
    DeviceState,
    LayerState,
    commit_window,
    is_flush,
    is_spec_flush,
    select_rows,
)
from tests._decode_kernel_checks import assert_same_codes


def _slice(inp, a, b):
    names = ("x", "dt", "B", "C", "z") if inp.kind == "mamba2" else ("q", "k", "v", "g", "beta")
    return replace(inp, **{n: getattr(inp, n)[:, a:b] for n in names if getattr(inp, n) is not None})


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the kernels compiled where a GPU is present


def _on(inp, dev=DEV):
    return replace(inp, **{k: v.to(dev) for k, v in vars(inp).items() if isinstance(v, torch.Tensor)})


def _inputs(kind, tokens, seed=0):
    return _on(random_inputs(kind, batch=2, tokens=tokens, heads=4, rows=8, cols=16, groups=2,
                             dtype=torch.float32, seed=seed))


def _same_state(a: LayerState, b: LayerState):
    assert torch.equal(a.update, b.update) and torch.equal(a.read, b.read)
    assert a.records.keys() == b.records.keys()
    for k in a.records:
        assert torch.equal(a.records[k], b.records[k]), k
    assert (a.window, a.step, a.writes, a.prefill_tokens) == (b.window, b.step, b.writes, b.prefill_tokens)
    assert torch.equal(a.seq_ids, b.seq_ids)


# ---------------------------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------------------------
def test_schedule_rules():
    assert [is_flush(w, 4) for w in range(4)] == [False, False, False, True]
    assert is_spec_flush(5, 2, 8) is True and is_spec_flush(4, 2, 8) is False and is_spec_flush(3, 3, 8) is True
    assert commit_window(5, 2, False) == 7 and commit_window(5, 2, True) == 2


def test_engine_names_and_auto_resolution():
    assert ENGINES == ("decode", "scan", "triton", "triton-decode")
    assert resolve("auto", tokens=1, device="cpu") == "decode"
    assert resolve("auto", tokens=7, device="cpu") == "scan"
    assert resolve("auto", tokens=None, device="cpu") == "scan"
    assert resolve("auto", tokens=1, device="cuda") == "triton-decode"
    assert resolve("auto", tokens=7, device="cuda") == "triton"
    assert resolve("scan", tokens=1, device="cuda") == "scan"
    with pytest.raises(ValueError, match="unknown engine 'fast'; expected one of decode, scan"):
        check_engine("fast")
    with pytest.raises(ValueError, match="unknown engine"):
        run_layer(_inputs("mamba2", 4), "fp32", engine="auto")  # a layer call names a real engine


# ---------------------------------------------------------------------------------------------
# Lossless conversion
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,policy", [
    ("mamba2", "split:fp16-sr/nvfp4@L8"), ("mamba2", "shared:nvfp4-sr@L8"), ("mamba2", "conventional:bf16-sr"),
    ("gdn", "split:fp8e4m3-sr/nvfp4@L8"), ("gdn", "split:fp32/nvfp4@L8@fold=buffered"), ("gdn", "fp32"),
])
def test_device_state_round_trip_is_lossless(kind, policy):
    """LayerState (mid-window, after flushes) -> DeviceState -> LayerState: the same values, records,
    counters and NVFP4 codes bit for bit."""
    inp = _inputs(kind, 21)
    _, st = run_layer(inp, policy, engine="decode", prefill_len=3)
    s = st.state
    assert not s.policy.is_replay or s.window > 0
    groups = inp.B.shape[2] if kind == "mamba2" else inp.q.shape[2]
    ds = DeviceState.from_layer_state(s, groups)
    back = ds.to_layer_state()
    _same_state(back, s)
    if s.update_codes is not None:
        for name in ("data", "scale", "gscale"):
            a, b = getattr(back.update_codes, name), getattr(s.update_codes, name)
            assert (a is None and b is None) or torch.equal(a, b)
    # the device copy is what the kernels read: its window pointers and SR event counter
    assert ds.wlen.tolist() == [s.window] * 2 and ds.events.tolist() == [s.writes + 1] * 2
    assert ds.update.data.device.type == s.update.device.type


def test_nvfp4_values_without_codes_are_refused_and_elementwise_ones_reencode():
    inp = _inputs("mamba2", 11)
    _, st = run_layer(inp, "split:fp16-sr/nvfp4@L8", engine="decode")
    no_codes = st.state.with_values(st.state.update, st.state.read)
    with pytest.raises(ValueError, match="NVFP4 cannot be re-encoded losslessly"):
        DeviceState.from_layer_state(no_codes, 2)
    _, st8 = run_layer(inp, "split:fp16-sr/fp8e4m3-sr@L8", engine="decode")
    s8 = st8.state.with_values(st8.state.update, st8.state.read)
    _same_state(DeviceState.from_layer_state(s8, 2).to_layer_state(), st8.state)
    # values that the codes do not stand for: a modified state is caught, not silently packed
    bad = replace(st8.state, update=st8.state.update + 1e-3)
    with pytest.raises(ValueError, match="do not reproduce its values"):
        DeviceState.from_layer_state(bad, 2)


def test_writer_codes_decode_to_the_stored_values():
    """The codes a torch engine keeps beside a lossy copy are exactly its values (fake == decode of
    the codes), SR bits included."""
    inp = _inputs("gdn", 9)
    for pol in ("shared:nvfp4-sr@L4", "conventional:fp8e4m3-sr", "split:bf16-sr/nvfp4@L4"):
        _, st = run_layer(inp, pol, engine="scan")
        s = st.state
        assert torch.equal(s.update_codes.dequantize(), s.update.float())
        assert torch.equal(s.read_codes.dequantize(), s.read.float())


def test_select_rows_branches_both_storages():
    inp = _inputs("gdn", 13)
    _, st = run_layer(inp, "split:fp16-sr/nvfp4@L8", engine="decode")
    idx = torch.tensor([1, 1, 0])
    sel = select_rows(st.state, idx)
    assert torch.equal(sel.update, st.state.update[idx.to(sel.update.device)]) and sel.seq_ids.tolist() == [1, 1, 0]
    ds = select_rows(DeviceState.from_layer_state(st.state, 2), idx)
    _same_state(ds.to_layer_state(), sel)


# ---------------------------------------------------------------------------------------------
# The triton-decode engine against the ground truth, and streams cut across engines
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_cut_stream_continues_on_every_engine(kind):
    """decode -> triton-decode -> scan -> triton-decode -> decode agrees with one decode run (fp32
    tolerance: the kernels sum in another order) and writes the same number of times."""
    pol = "split:fp16-sr/nvfp4@L8"
    inp = _inputs(kind, 40, seed=3)
    y_ref, ref = run_layer(inp, pol, engine="decode", prefill_len=4)
    cuts = [(0, 13, "decode"), (13, 22, "triton-decode"), (22, 30, "scan"), (30, 35, "triton-decode"),
            (35, 40, "decode")]
    ys, state, writes = [], None, 0
    for a, b, eng in cuts:
        kw = dict(prefill_len=4) if state is None else dict(state=state)
        y, st = run_layer(_slice(inp, a, b), pol, engine=eng, **kw)
        ys.append(y)
        state, writes = st.state, writes + st.state_writes
    assert _rel(torch.cat(ys, 1), y_ref) < 1e-5
    assert _rel(state.update, ref.state.update) < 1e-3 and writes == ref.state_writes
    assert (state.window, state.step, state.writes) == (ref.state.window, ref.state.step, ref.state.writes)


@pytest.mark.parametrize("n_drafts", [1, 2, 3])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_triton_decode_speculative_rounds_match_decode(kind, n_drafts):
    inp = _inputs(kind, 26, seed=5)
    T = 1 + n_drafts
    drafts = Drafts(n=n_drafts, accept=[1 + (r * 7) % T for r in range(26)])
    for pol in ("shared:nvfp4-sr@L8", "split:fp16-sr/nvfp4@L8"):
        y0, s0 = run_layer(inp, pol, engine="decode", prefill_len=3, drafts=drafts)
        y1, s1 = run_layer(inp, pol, engine="triton-decode", prefill_len=3, drafts=drafts)
        # (rows = 8 pads the verify block's 16-row tile: the case docs/pitfalls.md §12 is about)
        assert "triton:" in s1.implementation and "fallback" not in s1.implementation
        assert _rel(y1, y0) < 1e-5
        assert (s1.state_writes, s1.record_writes, s1.state.window) == (s0.state_writes, s0.record_writes,
                                                                        s0.state.window)


def test_triton_decode_speculative_rounds_over_a_ring_of_32():
    """L = 24 (a ring of 32): the engine passes its window mirror as Mamba-2's ``window_bound``, so
    rounds over up to 16 history records hold them as 16-position tiles and later ones as the ring's
    32 (kernels/mamba2/decode.py); both agree with the torch decode engine."""
    inp = _inputs("mamba2", 40, seed=6)
    drafts = Drafts(n=3, accept=[1 + (r * 5) % 4 for r in range(40)])
    y0, s0 = run_layer(inp, "split:fp16-sr/nvfp4@L24", engine="decode", prefill_len=3, drafts=drafts)
    y1, s1 = run_layer(inp, "split:fp16-sr/nvfp4@L24", engine="triton-decode", prefill_len=3, drafts=drafts)
    assert "triton:" in s1.implementation and "fallback" not in s1.implementation
    assert _rel(y1, y0) < 1e-5
    assert (s1.state_writes, s1.record_writes, s1.state.window) == (s0.state_writes, s0.record_writes, s0.state.window)
    assert s0.state_writes >= 2  # the stream crossed speculative flushes


def test_shared_lossy_window_after_a_speculative_flush_round_is_re_solved():
    """A speculative flush round commits GDN d's computed from the unrounded S, which an NVFP4
    checkpoint does not store (docs/design.md §4.5): the device state marks its window, and the next
    flush re-solves those d's from U as the reference's recompute fold does. Continued token by token
    on both engines, the outputs agree; the same kernels told the window came from U (the stored d's
    folded as they are) do not."""
    pol = "shared:nvfp4-sr@L8"
    inp = _inputs("gdn", 19, seed=7)
    # prefill 3, then four rounds of T = 2 all accepted: W 0 -> 2 -> 4 -> 6, the fourth a flush round (W = 2)
    y, st = run_layer(_slice(inp, 0, 11), pol, engine="triton-decode", prefill_len=3, drafts=Drafts(n=1, accept=[2] * 4))
    ds = st.extra["device_state"]
    assert (ds.window, ds.flushes, ds.window_from_update) == (2, 1, False)
    rest = _slice(inp, 11, 19)  # W 2 -> 7, then an autoregressive flush and one more token
    y_ref, ref = run_layer(rest, pol, engine="decode", state=st.state)
    y_kernel, kst = run_layer(rest, pol, engine="triton-decode", state=ds)
    assert kst.flushes == 1 == ref.flushes and kst.extra["device_state"].window_from_update
    assert _rel(y_kernel, y_ref) < 1e-5
    y_stored, _ = run_layer(rest, pol, engine="triton-decode", state=replace(ds, window_from_update=True))
    assert _rel(y_stored[:, -2:], y_ref[:, -2:]) > 1e-4
    assert not DeviceState.from_layer_state(st.state, 2, DEV).window_from_update  # a packed window: unknown


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_scan_written_nvfp4_state_continues_on_torch_then_returns_to_the_kernels(kind):
    """The Triton scan returns NVFP4 copies as values only, which cannot be packed (NVFP4 values do
    not re-encode to their codes). A stream it wrote continues on the torch decode engine, by name,
    until a flush writes codes again; then the kernels take it back. The outputs agree with one
    decode run throughout."""
    pol = "split:fp16-sr/nvfp4@L8"
    inp = _inputs(kind, 30, seed=7)
    y_ref, ref = run_layer(inp, pol, engine="decode")
    y0, s0 = run_layer(_slice(inp, 0, 12), pol, engine="triton")   # every token a decode step
    assert s0.state.read_codes is None and s0.state.window == 4   # window 4 of 8: flush at 16
    y1, s1 = run_layer(_slice(inp, 12, 14), pol, engine="triton-decode", state=s0.state)
    assert s1.implementation.startswith("torch fallback (the read copy was written as NVFP4 values "
                                        "without codes")
    y2, s2 = run_layer(_slice(inp, 14, 18), pol, engine="triton-decode", state=s1.state)
    assert "fallback" in s2.implementation and s2.flushes == 1 and s2.state.read_codes is not None
    y3, s3 = run_layer(_slice(inp, 18, 30), pol, engine="triton-decode", state=s2.state)
    assert "fallback" not in s3.implementation and s3.implementation.startswith("triton:")
    assert _rel(torch.cat([y0, y1, y2, y3], 1), y_ref) < 1e-5
    assert s3.state.writes == ref.state.writes and s3.state.window == ref.state.window


class _NoLaunch:
    """Stands in for a scores kernel that a one-launch stream must never start."""

    def __getitem__(self, grid):
        raise AssertionError("the one-launch form started a scores kernel")


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_triton_decode_one_launch_stream(kind, monkeypatch):
    """A whole stream (prefill, non-flush steps, flushes) on the triton-decode engine with the
    one-launch form of the replay steps forced on (the scores kernels replaced by a stub that fails
    if started) and forced off: both agree with the decode engine, and with each other on the state
    codes and the records bit for bit (GDN's d records, and with q/k normalisation on a GPU its whole
    state, within fp32 rounding: see tests/test_kernels_gdn_decode.py)."""
    from precision_lab.kernels.common import launch
    from precision_lab.kernels.gdn import decode as gdn_decode
    from precision_lab.kernels.mamba2 import decode as m2_decode

    pol = "split:fp16-sr/nvfp4@L8"
    inp = _inputs(kind, 21, seed=8)
    y_ref, ref = run_layer(inp, pol, engine="decode", prefill_len=3)
    runs = {}
    for fused in (True, False):
        with monkeypatch.context() as m:
            m.setattr(launch, "FORCED_LAUNCH_FORM", fused)
            if fused:
                m.setattr(m2_decode, "mamba2_replay_scores_kernel", _NoLaunch())
                m.setattr(gdn_decode, "gdn_replay_scores_kernel", _NoLaunch())
            runs[fused] = run_layer(inp, pol, engine="triton-decode", prefill_len=3)
    for y, st in runs.values():
        assert "triton:" in st.implementation and "fallback" not in st.implementation
        assert _rel(y, y_ref) < 1e-5 and st.state_writes == ref.state_writes
    y1, one = runs[True][0], runs[True][1].state
    y2, two = runs[False][0], runs[False][1].state
    assert _rel(y1, y2) < 1e-6
    assert (one.window, one.step, one.writes) == (two.window, two.step, two.writes) == (ref.state.window,
                                                                                        ref.state.step,
                                                                                        ref.state.writes)
    exact = kind == "mamba2" or DEV == "cpu"
    for name in ("update", "read"):
        a, b = getattr(one, name), getattr(two, name)
        assert torch.equal(a, b) if exact else _rel(a, b) < 1e-3, name
        codes_a, codes_b = getattr(one, f"{name}_codes"), getattr(two, f"{name}_codes")
        if exact and codes_a is not None:
            assert_same_codes(codes_a, codes_b)
    for name in one.records:  # (GDN's "u" records are its d's)
        a, b = one.records[name], two.records[name]
        if exact and not (kind == "gdn" and name == "u"):
            assert torch.equal(a, b), name
        else:
            assert _rel(a, b) < 1e-5, name


def test_triton_decode_falls_back_by_name():
    """What the kernels cannot hold runs on the torch decode engine, and says so."""
    wide = _on(random_inputs("gdn", batch=1, tokens=6, heads=2, rows=8, cols=32, dtype=torch.float32))
    y0, _ = run_layer(wide, "shared:mxfp8@L4", engine="decode")
    y1, st = run_layer(wide, "shared:mxfp8@L4", engine="triton-decode")
    assert st.implementation.startswith("torch fallback (update format 'mxfp8' has no Triton codec)")
    assert torch.equal(y0, y1)
    kda = _on(random_inputs("kda", batch=1, tokens=5, heads=2, rows=8, cols=16, dtype=torch.float32))
    _, st = run_layer(kda, "fp32", engine="triton-decode")
    assert "no Triton decode kernel for kda" in st.implementation
    _, st = run_layer(_inputs("mamba2", 6), "conventional:bf16", engine="triton-decode",
                      drafts=Drafts(n=1, accept=[1, 2, 2, 1]))
    assert "snapshot-per-draft" in st.implementation
