"""The decode benchmark's bytes model (precision_lab/bench/byte_models.py) against what the kernels
touch: every record field the model counts as read at a window position is one the step reads, and
every field it leaves out is one the step never reads; the records it counts as written are the ones
the step writes.

"Reads" is observed, not assumed: one field of the window's records is poisoned with NaN and the
step runs. A field the step reads reaches its output (or the flushed state) as NaN; a field it does
not read leaves them finite. "Writes": records past the window start as NaN, and a field the step
writes there is finite afterwards. The steps are the ones the decode benchmark times, at the
wrappers' default rules (a flush row without a read format is a shared-mode flush, one with it a
split-mode flush, which re-solves GDN's d's under the default recompute fold).
"""
import json
from pathlib import Path

import pytest
import torch
from precision_lab.kernels.gdn.decode import gdn_replay_step
from precision_lab.kernels.mamba2.decode import mamba2_replay_step

from precision_lab.bench import decode_kernels as dk
from precision_lab.bench.byte_models import (
    WINDOW_READS,
    bytes_conventional,
    bytes_flush,
    bytes_nonflush,
    record_bytes,
    record_fields,
    state_bytes,
    step_bytes,
    token_bytes,
    window_read_bytes,
)
from precision_lab.bench.decode_kernels import recount_bytes, row_bytes
from precision_lab.bench.problems import state_dims
from precision_lab.bench.schema import KernelRow, load
from tests._decode_kernel_checks import gather
from tests.test_kernels_gdn_decode import NEW as GDN_NEW
from tests.test_kernels_gdn_decode import _replay_setup as gdn_setup
from tests.test_kernels_mamba2_decode import _replay_setup as mamba2_setup

ROOT = Path(__file__).resolve().parents[1]
W = 5
RING = 16

# the steps whose bytes the benchmark counts: name -> (T, flush, shared mode, launch form: True one
# launch, False a scores kernel then the step kernel, None the wrappers' rule)
STEPS = {
    "nonflush, two launches": (1, False, False, False),
    "nonflush, one launch": (1, False, False, True),
    "verify": (2, False, False, None),
    "shared flush": (1, True, True, None),
    "split flush": (1, True, False, None),
    "speculative flush": (2, True, True, None),
}


def _positions(s, offset, n):
    """(slot, ring position) of logical positions offset..offset+n-1 of every live sequence."""
    start = int(s["start"][0])
    return [(int(slot), (start + offset + j) % RING) for slot in s["slots"].tolist() if slot >= 0 for j in range(n)]


def _run(op, step, device, poison=None):
    """Run one benchmark step on a fresh set-up with record field ``poison`` NaN over the window.
    Returns (whether the output or the flushed state holds a NaN, the records afterwards, the set-up)."""
    T, flush, shared, fused = STEPS[step]
    if op == "gdn":
        s = gdn_setup(device, "fp32", "fp32", W=W, T=T, exact=False)
    else:
        s = mamba2_setup(device, "fp32", "fp32", W=W, T=T, exact=False, ring=RING)
    rec = s["rec"]
    for name in record_fields(op):  # everything past the window unwritten (NaN), so writes show
        for slot, q in _positions(s, W, RING - W):
            getattr(rec, name)[slot, q] = float("nan")
    if poison:
        for slot, q in _positions(s, 0, W):
            getattr(rec, poison)[slot, q] = float("nan")
    n = s["new"]
    read = None if shared else s["rd"]
    kw = dict(flush=flush, fold_new=flush and T == 1, fused_scores=fused)
    if op == "gdn":
        out = gdn_replay_step(s["upd"], read, rec, s["slots"], s["start"], s["wlen"], *(n[k] for k in GDN_NEW), **kw)
    else:
        out = mamba2_replay_step(s["upd"], read, rec, s["slots"], s["start"], s["wlen"], n["x"], n["dt"], n["A"],
                                 n["B"], n["C"], n["D"], n["dt_bias"], n["z"], **kw)
    live = (s["slots"] >= 0).to(out.device)
    nan = bool(torch.isnan(out[live]).any())
    if flush:
        nan = nan or bool(torch.isnan(gather(s["upd"], s["slots"]).dequantize()).any())
    return nan, rec, s


def _fields_read(op, step, device):
    clean, _, _ = _run(op, step, device)
    assert not clean, f"{op} {step}: the step's output holds NaN with no field poisoned"
    return {name for name in record_fields(op) if _run(op, step, device, poison=name)[0]}


def _fields_written(op, step, device):
    T = STEPS[step][0]
    _, rec, s = _run(op, step, device)
    pos = _positions(s, W, T)
    return {name for name in record_fields(op)
            if all(torch.isfinite(getattr(rec, name)[slot, q]).all() for slot, q in pos)}


@pytest.mark.parametrize("op,step", [(op, step) for op in ("mamba2", "gdn") for step in STEPS])
def test_window_reads_are_what_the_kernels_read(op, step, device):
    resolve = STEPS[step][1] and not STEPS[step][2]  # the benchmark's split-mode flush re-solves (GDN)
    assert _fields_read(op, step, device) == set(WINDOW_READS[op, resolve])


@pytest.mark.parametrize("op,step", [(op, step) for op in ("mamba2", "gdn") for step in STEPS])
def test_written_records_are_what_the_kernels_write(op, step, device):
    """A non-flush step and a speculative flush write their T tokens' records, every field; an
    autoregressive flush (T = 1) folds its token and writes none. The model counts exactly those."""
    T, flush, shared, _ = STEPS[step]
    written = _fields_written(op, step, device)
    d = state_dims(op)
    if flush:
        st = d["H"] * (2 * state_bytes("fp32", d["R"], d["C"]) + (0 if shared else state_bytes("fp32", d["R"], d["C"])))
        counted = bytes_flush(op, 1, "fp32", "fp32", W, T, split=not shared) - st - W * window_read_bytes(
            op, not shared) - T * token_bytes(op)
    else:
        counted = bytes_nonflush(op, 1, "fp32", W, T) - d["H"] * state_bytes("fp32", d["R"], d["C"]) - W * \
            window_read_bytes(op) - T * token_bytes(op)
    if flush and T == 1:
        assert written == set() and counted == 0
    else:
        assert written == set(record_fields(op))
        assert counted == pytest.approx(T * record_bytes(op))


MEASURED = "reports/bench/bench_kernels_round2zf_quick.json"  # counted with the earlier model
# the files README reads for its kernel tables: two recounted, and two measured with the current
# model, whose rows' bytes (counted when they were timed: passed by each sweep in the thirty-first run,
# by ``measure`` through ``step_bytes`` since) must also be what ``row_bytes`` gives them
CURRENT_MODEL = ["reports/bench/bench_kernels_round2zf_quick_recounted.json",
                 "reports/bench/bench_kernels_round2zg_quick_h100_recounted.json",
                 "reports/bench/bench_kernels_round2zh_quick.json",
                 "reports/bench/bench_kernels_round2zi_quick_h100.json"]


def _result(path):
    return load(json.loads((ROOT / path).read_text()))


def test_step_bytes_maps_each_timed_step_to_its_model():
    """``step_bytes``: the one map from a step's fields to the model's functions (a row without a read
    format is shared mode: its non-flush step reads the checkpoint, its flush writes no read copy)."""
    assert step_bytes("gdn", "conventional", 4, "fp16-sr") == bytes_conventional("gdn", 4, "fp16-sr")
    assert step_bytes("gdn", "nonflush", 4, "fp32", "nvfp4", 7) == bytes_nonflush("gdn", 4, "nvfp4", 7)
    assert step_bytes("mamba2", "nonflush", 4, "bf16", None, 7) == bytes_nonflush("mamba2", 4, "bf16", 7)
    assert step_bytes("mamba2", "nonflush", 4, "fp32", None, 8, 8) == bytes_nonflush("mamba2", 4, "fp32", 8, 8)
    assert step_bytes("gdn", "flush", 4, "fp32", None, 15) == bytes_flush("gdn", 4, "fp32", "fp32", 15, split=False)
    assert step_bytes("gdn", "flush", 4, "fp16-sr", "nvfp4", 15) == bytes_flush("gdn", 4, "fp16-sr", "nvfp4", 15)
    assert step_bytes("gdn", "flush", 4, "fp32", None, 16, 8) == bytes_flush("gdn", 4, "fp32", "fp32", 16, 8,
                                                                             split=False)
    with pytest.raises(ValueError, match="verify"):
        step_bytes("gdn", "verify", 4)


@pytest.mark.parametrize("kind,kw", [
    ("conventional", dict(upd="bf16")), ("nonflush", dict(read="nvfp4", W=7)), ("nonflush", dict(W=8, T=8)),
    ("flush", dict(W=15)), ("flush", dict(upd="fp16-sr", read="nvfp4", W=15)), ("flush", dict(W=16, T=8))])
def test_measured_rows_count_what_a_recount_counts(kind, kw, monkeypatch):
    """``measure`` counts a step's bytes from the same fields it records, so ``--recount-bytes``
    (``row_bytes``) gives a row measured under the current model its own bytes back. The timing and
    the problem are stubbed: only the bookkeeping runs."""
    monkeypatch.setitem(dk.PROBLEMS, "gdn", lambda B, dev, **k: None)
    monkeypatch.setattr(dk, "time_launches", lambda launch, nsets: (10.0, "stub"))
    row = dk.measure("gdn", kind, 4, "cpu", **kw)
    fields = {k: row[k] for k in ("op", "kernel", "batch", "update", "read", "W", "T", "ring", "us", "bytes")}
    assert row["bytes"] == row_bytes(KernelRow(tag="stub", **fields))
    assert row["GBps"] == pytest.approx(row["bytes"] / 10.0 / 1e3)


def test_recount_keeps_times_and_rescales_rates():
    """``--recount-bytes``: every timed row's bytes become the model's, GB/s and % of ceiling move by the
    same factor, times stay; under the earlier model only GDN rows and the speculative flushes differ."""
    res = _result(MEASURED)
    before = [(r.us, r.bytes, r.GBps, r.pct_ceiling) for r in res.rows]
    changed = recount_bytes(res)
    moved = set()
    for r, (us, nb, gbps, pct) in zip(res.rows, before):
        assert r.us == us
        if us is None or not nb:
            continue
        assert r.bytes == pytest.approx(row_bytes(r), rel=1e-12)
        assert r.GBps == pytest.approx(gbps * r.bytes / nb, rel=1e-12)
        assert r.pct_ceiling == pytest.approx(pct * r.bytes / nb, rel=1e-12)
        if r.bytes != pytest.approx(nb, rel=1e-12):
            moved.add((r.op, r.kernel, (r.T or 1) > 1))
    assert changed > 0 and "bytes recounted" in res.provenance.notes[-1]
    assert {op for op, _, _ in moved} == {"mamba2", "gdn"}
    assert {(k, drafts) for op, k, drafts in moved if op == "mamba2"} == {("flush", True)}


@pytest.mark.parametrize("path", CURRENT_MODEL)
def test_the_standing_files_count_with_the_current_model(path):
    """README's standing tables read these files: a change to the bytes model must recount them. The
    run measured with the current model also shows that ``row_bytes`` (what ``--recount-bytes`` uses)
    maps every row to the bytes its sweep passed."""
    rows = [r for r in _result(path).rows if r.us is not None and r.bytes]
    assert rows
    for r in rows:
        assert r.bytes == pytest.approx(row_bytes(r), rel=1e-12), (r.op, r.kernel, r.tag, r.update, r.read, r.W, r.T)


def test_recount_bytes_needs_resummarise(capsys):
    """``--recount-bytes`` alone would do nothing: refused with the reason."""
    from tests._scripts import load_script

    script = load_script("bench_kernels")
    with pytest.raises(SystemExit) as e:
        script.main(["--recount-bytes", "-o", "unused.json"])
    assert e.value.code == 2
    assert "--recount-bytes needs --resummarise" in capsys.readouterr().err
