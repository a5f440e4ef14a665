"""The CPU-side pieces of the decode-kernel benchmark (precision_lab.bench): launch-shape
candidates, finding the fla peers' autotuners, merging per-operator result files, buffer sets (the
timings themselves need the GPU)."""
import dataclasses
import json
import sys
import types

import pytest
import triton
import triton.language as tl
from precision_lab.kernels.common.launch import FP4_DECODES

from precision_lab.bench import decode_kernels as bench_kernels
from precision_lab.bench import peers, problems
from precision_lab.bench.schema import (
    Ceiling,
    DecodeKernelsResult,
    Device,
    KernelCheck,
    KernelRow,
    Provenance,
    dump,
    load,
    to_json,
)
from precision_lab.bench.tables import decode_kernel_tables


def test_tune_candidates_join_spaces_and_drop_keywords_a_wrapper_lacks(monkeypatch):
    monkeypatch.setitem(bench_kernels.TUNE_SPACE_WIDE["gdn"], "conventional",
                        [dict(block_r=[8, 16], num_warps=[2]), dict(block_r=[8], num_warps=[2, 4], no_such_kw=[1, 2])])
    got = bench_kernels.tune_candidates("gdn", "conventional", wide=True)
    assert got == [dict(block_r=8, num_warps=2), dict(block_r=16, num_warps=2), dict(block_r=8, num_warps=4)]
    assert bench_kernels.tune_candidates("mamba2", "verify") == [dict(block_r=64, num_warps=4, window_bound=None),
                                                                 dict(block_r=64, num_warps=4, window_bound="W")]
    # GDN's wrapper has no window_bound: its verify is not multiplied by it
    assert all("window_bound" not in c for c in bench_kernels.tune_candidates("gdn", "verify"))


def test_tune_candidates_try_the_nvfp4_decodes_only_where_nvfp4_is_read():
    """The non-flush tuning times every NVFP4 element decode (fp16 patterns, inline PTX, tensor-core
    products through shared memory and from registers) when the read copy is NVFP4; other read formats do not multiply their candidates by a
    keyword they ignore."""
    for op in ("mamba2", "gdn"):
        for wide in (False, True):
            nv = bench_kernels.tune_candidates(op, "nonflush", wide, read="nvfp4")
            other = bench_kernels.tune_candidates(op, "nonflush", wide, read="fp32")
            assert {c["fp4_decode"] for c in nv} == set(FP4_DECODES) == {"fp16", "ptx", "mma", "mma-ptx"}
            assert all("fp4_decode" not in c for c in other)
            assert len(nv) == 4 * len(other)


def test_nonflush_tuning_times_the_wrappers_rule():
    """Every operator's output-only tuning has candidates that leave the launch shape to the wrapper,
    whose rule may add what no explicit shape gets (Mamba-2: the NVFP4 step's register cap)."""
    for op in ("mamba2", "gdn"):
        for read in ("nvfp4", "fp32"):
            cands = bench_kernels.tune_candidates(op, "nonflush", read=read)
            assert any(c.get("num_warps") is None and c.get("block_r") is None for c in cands)


@triton.jit
def _toy_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))


def test_fla_autotuners_are_found_behind_heuristics(monkeypatch):
    """fla wraps its kernels as heuristics(autotune(jit)); the peer clears those autotuners' choices
    before each batch, so they must be found through the wrapper."""
    tuned = triton.autotune(configs=[triton.Config({}, num_warps=4), triton.Config({}, num_warps=8)],
                            key=["BLOCK"])(_toy_kernel)
    wrapped = triton.heuristics({"BLOCK": lambda args: 16})(tuned)
    mod = types.ModuleType("fla.ops.toy")
    mod.kernel, mod.other = wrapped, 3
    monkeypatch.setitem(sys.modules, "fla.ops.toy", mod)
    monkeypatch.setitem(sys.modules, "not_fla.ops", types.SimpleNamespace(k=tuned))
    assert sum(f is tuned for f in peers.fla_autotuners()) == 1
    also = types.ModuleType("fla.ops.toy_again")  # the same kernel reached twice is one autotuner
    also.kernel = tuned
    monkeypatch.setitem(sys.modules, "fla.ops.toy_again", also)
    assert sum(f is tuned for f in peers.fla_autotuners()) == 1


def _part(op, ceiling, check_ok=True, peer="0.6.0"):
    """A per-operator checkpoint as ``run`` writes it after each operator (fixture numbers)."""
    prov = Provenance(created="2026-12-01T00:00:00+00:00", command=f"--ops {op}", git="abc1234", versions={},
                      device=Device(gpu="NVIDIA H200"), seconds=9.0, settings={"ops": [op]})
    return to_json(DecodeKernelsResult(
        provenance=prov, ceiling=Ceiling(method="torch copy_ (events)", bytes=1 << 31, us=500.0, GBps=ceiling,
                                         timing="events"),
        peers={"flash-linear-attention": peer}, partial=True,
        correctness={f"{op}:fp32": KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=check_ok),
                     f"{op}:shared:fp32": KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=check_ok)},
        rows=[KernelRow(op=op, tag="batch", kernel=k, batch=256, us=us, GBps=1.0, pct_ceiling=1.0)
              for k, us in (("conventional", 500.0), ("nonflush", 250.0), ("flush", 1000.0))]))


def test_resummarise_merges_the_operators_runs(tmp_path):
    a, b = tmp_path / "m2.json", tmp_path / "gdn.json"
    a.write_text(json.dumps(_part("mamba2", 4100.0)))
    b.write_text(json.dumps(_part("gdn", 4200.0, check_ok=False)))
    out = tmp_path / "merged" / "bench_kernels.json"
    returned = bench_kernels.resummarise([a, b], out)
    res = json.loads(out.read_text())
    assert res == to_json(returned) and load(res) == returned
    assert res["schema_version"] == 2 and res["partial"] is False
    assert len(res["rows"]) == 6 and set(res["correctness"]) == {"mamba2:fp32", "mamba2:shared:fp32", "gdn:fp32",
                                                                 "gdn:shared:fp32"}
    assert res["ceiling"]["GBps"] == 4200.0  # the higher copy measurement is the ceiling
    assert res["provenance"]["device"]["gpu"] == "NVIDIA H200" and res["provenance"]["git"] == "abc1234"
    assert [p["command"] for p in res["provenance"]["merged_from"]] == ["--ops mamba2", "--ops gdn"]
    assert res["peers"] == {"flash-linear-attention": "0.6.0"}
    m2 = res["summary"]["mamba2"]["batch"]["256"]
    assert m2["replay_amortised_us"] == pytest.approx((15 * 250 + 1000) / 16)
    assert m2["speedup_vs_conventional"] == pytest.approx(500 / ((15 * 250 + 1000) / 16))
    assert res["summary"]["gdn"]["batch"]["256"]["speedup_vs_conventional"] is None  # its checks failed
    tables = decode_kernel_tables(returned)
    assert "### Targets" in tables and "| mamba2 | 256 | 500.0 | 1 | 250.0 | 1000.0 | 296.9 | — | 1.68 | — |" in tables
    assert (out.parent / "bench_kernels_batch.png").stat().st_size > 0


def test_targets_carry_the_ratio_their_bytes_allow():
    """Every ratio target records its byte bound: its ratio with each ReplaySSM kernel moving its
    counted bytes at the copy ceiling and the baseline at its measured time (fixture rows, a 5000
    GB/s ceiling: 1 GB takes 200 µs). Batch 1 and the fractions of a byte bound get none, and a
    row without a byte count leaves its bound unknown rather than guessed."""
    def row(kernel, tag, us, nbytes=None, **kw):
        return KernelRow(op="gdn", kernel=kernel, tag=tag, batch=kw.pop("batch", 256), us=us, bytes=nbytes,
                         GBps=None if nbytes is None else nbytes / (us * 1e3), pct_ceiling=1.0, **kw)

    rows = [row("conventional", "batch", 500.0, 2e9), row("nonflush", "batch", 250.0, 1e9),
            row("flush", "batch", 1000.0, 2e9), row("fla", "batch", 600.0),
            row("nonflush", "read", 250.0, 1e9, read="fp32"), row("nonflush", "read", 100.0, 0.25e9, read="nvfp4"),
            row("flush", "update", 900.0, 1e9, update="fp16-sr", read="nvfp4"),
            row("conventional", "convfmt", 400.0, 1e9, update="fp16-sr"),
            row("nonflush", "T8", 700.0, 1.5e9, T=8), row("flush", "T8", 1500.0, 2.5e9, T=8),
            row("conventional", "batch", 5.0, 1e6, batch=1), row("nonflush", "batch", 5.5, 0.5e6, batch=1),
            row("flush", "batch", 8.0, 1e6, batch=1)]
    names = ("gdn:fp32", "gdn:shared:fp32", "gdn:split:fp32/nvfp4", "gdn:split:fp16-sr/nvfp4",
             "gdn:conventional:fp16-sr", "gdn:verify-T4", "gdn:verify-T4-flush")
    checks = {n: KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=True) for n in names}
    t = bench_kernels.summarise(rows, checks, 5000.0)["gdn"].targets
    replay = (15 * 200 + 400) / 16  # µs per token at the ceiling
    assert t["replay_vs_conventional"].value == pytest.approx(500 / ((15 * 250 + 1000) / 16))
    assert t["replay_vs_conventional"].byte_bound == pytest.approx(500 / replay)
    assert t["replay_vs_fla"].byte_bound == pytest.approx(600 / replay)
    assert t["nvfp4_vs_fp32_read_nonflush"].byte_bound == pytest.approx(250 / 50)
    assert t["split_fp16-sr_nvfp4_vs_conventional"].byte_bound == pytest.approx(500 / ((15 * 50 + 200) / 16))
    assert t["fp16sr_flush_vs_fp16sr_conventional"].byte_bound == pytest.approx(200 / 400)  # an "at most" target
    assert t["verify_T8_vs_conventional"].byte_bound == pytest.approx((300 + 500) / 2 / 500)  # 2 rounds per flush
    assert t["verify_T8_vs_conventional"].target == 1.3
    for name in ("batch1_replay_vs_conventional", "conventional_pct_ceiling", "nvfp4_nonflush_pct_byte_bound"):
        assert t[name].byte_bound is None
    assert t["split_fp8e4m3-sr_nvfp4_vs_conventional"].byte_bound is None  # its flush was not measured
    rows[2].bytes = None  # the flush without a byte count
    t = bench_kernels.summarise(rows, checks, 5000.0)["gdn"].targets
    assert t["replay_vs_conventional"].byte_bound is None and t["replay_vs_conventional"].value is not None


@pytest.mark.parametrize("op", ["mamba2", "gdn"])
def test_problem_buffer_sets_have_the_real_shapes(op):
    """A buffer set at the benchmark's model shapes (batch 2, fp32 pools need no kernel to seed)."""
    p = problems.PROBLEMS[op](2, "cpu", upd="fp32", read="fp32", ring=16, W=5, T=3)
    dims = problems.MAMBA2 if op == "mamba2" else problems.GDN
    H, R, C = (dims["H"], dims["P"], dims["N"]) if op == "mamba2" else (dims["Hv"], dims["V"], dims["K"])
    for pool in (p.upd, p.read):
        assert pool.data.shape == (2, H, R, C) and pool.data.abs().sum() > 0
    assert p.wlen.tolist() == [5, 5] and p.slots.tolist() == [0, 1] and p.rec.ring == 16
    assert (p.x if op == "mamba2" else p.v).shape[:2] == (2, 3)


def test_run_records_every_row_and_writes_what_the_report_reads(tmp_path, monkeypatch):
    """run()'s bookkeeping on the CPU, with the GPU parts (checks, ceiling, timings, peer) replaced by
    fixture values: every row tagged and logged, a checkpoint per operator, the summary on top, and a
    result file of the current version."""
    from precision_lab.report import build_report

    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    names = ("fp32", "shared:fp32", "shared:fp32:one-launch", "split:fp32/nvfp4", "verify-T4", "verify-T4-flush")
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: {
        f"{op}:{n}": {"rel_err": {"y": 1e-7}, "tol": 1e-5, "ok": True} for op in ops for n in names})
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    per_token = {"conventional": 2.0, "nonflush": 1.0, "flush": 4.0}

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        nbytes = dk.step_bytes(op, kind, B, upd, read, W, T)
        form = dk.launch_form(op, kind, B, T, fold_new, fused)
        us = per_token[kind] * B * T + W + (0.5 if form is False and B == 1 else 0)  # a second launch at batch 1
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": dict(cfg or {}), "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3, "timing": "fixture",
                "buffer_sets": 1, "fused_scores": form}

    monkeypatch.setattr(dk, "measure", measure)
    monkeypatch.setattr(dk, "fla_peer", lambda op, B, dev: {"op": op, "kernel": "fla", "batch": B, "us": 3.0 * B,
                                                            "bytes": 1.0, "GBps": 1.0, "implementation": "fla.fixture"})
    monkeypatch.setattr(dk, "fla_versions", lambda: {"flash-linear-attention": "0.6.0"})
    out, log = tmp_path / "k.json", tmp_path / "rows.jsonl"
    res = dk.run(output=out, quick=True, ops=("mamba2", "gdn"), log=log)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [json.loads(json.dumps(
        dataclasses.asdict(r))) for r in res.rows]
    checkpoint = load(json.loads(out.read_text()))  # the last per-operator checkpoint: every row, no summary
    assert checkpoint.partial and checkpoint.summary is None and len(checkpoint.rows) == len(res.rows)
    assert {r.tag for r in res.rows} == {"tune", "batch", "fused", "fused-nvfp4", "L16", "T1", "T8", "read", "update",
                                         "convfmt"} | {f"batch1-round{i}" for i in range(dk.BATCH1_ROUNDS)}
    # every replay row says which launch form it ran in: the rule's at batch 1 and 256 (GDN: 32 value
    # heads, Mamba-2: 128), both forms in the "fused" rows, none for other kernels
    form = {(r.op, r.tag, r.kernel, r.batch, r.fused_scores) for r in res.rows if r.kernel in ("nonflush", "flush")}
    assert all(f is not None for *_, f in form)
    assert ("gdn", "batch", "nonflush", 1, True) in form and ("mamba2", "batch", "flush", 256, False) in form
    assert {f for op, tag, k, b, f in form if tag == "fused"} == {True, False}
    assert {(k, f) for op, tag, k, b, f in form if tag == "fused-nvfp4"} == {(k, f) for k in ("nonflush", "flush")
                                                                             for f in (True, False)}
    assert {(r.kernel, r.update) for r in res.rows if r.tag == "fused-nvfp4"} == {("nonflush", "fp32"),
                                                                                ("flush", "fp16-sr")}
    assert {r.batch for r in res.rows if r.tag == "fused"} == {1, 4, 8, 16}  # the quick run's small batches
    assert {r.read for r in res.rows if r.tag == "fused-nvfp4"} == {"nvfp4"}
    assert all(r.fused_scores is None for r in res.rows if r.kernel not in ("nonflush", "flush"))
    lf = res.summary["mamba2"].launch_forms[1]
    assert (lf.conventional_us, lf.nonflush_one_launch_us, lf.nonflush_two_launch_us) == (2.0, 8.0, 8.5)
    assert lf.nonflush_one_launch_vs_conventional == pytest.approx(2.0 / 8.0)
    assert "### One-token ReplaySSM steps" in decode_kernel_tables(res)
    assert all(r.pct_ceiling == pytest.approx(100 * r.GBps / 4000.0) for r in res.rows)
    assert res.peers == {"flash-linear-attention": "0.6.0"} and res.provenance.git == "abc1234"
    b256 = res.summary["gdn"].batch[256]
    amortised = (15 * (1.0 * 256 + 7) + 4.0 * 256 + 15) / 16
    assert (b256.conventional_us, b256.replay_amortised_us) == (512.0, pytest.approx(amortised))
    assert b256.speedup_vs_fla == pytest.approx(3.0 * 256 / amortised)
    dump(res, tmp_path / "final" / "bench_kernels.json")
    build_report([tmp_path / "final" / "bench_kernels.json"], tmp_path / "report")
    md = (tmp_path / "report" / "index.md").read_text()
    assert md.count("| 256 | 512 |") == 2 and f"| 263 | 1039 | {amortised:.4g} | 768 |" in md


@pytest.mark.parametrize("failed", [(), ("mma-ptx",)])
def test_a_decode_that_failed_its_check_is_not_timed(tmp_path, monkeypatch, failed):
    """The NVFP4 decodes are tuning candidates only once their correctness check passed: with the
    fastest decode's check failing, the tuning times the others, the NVFP4 read row runs the fastest
    of them, and the NVFP4 target is still reported (its row ran a checked decode); with every check
    passing, the fastest wins. Fixture timings: "mma-ptx" fastest, then "mma"."""
    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    names = ["fp32", "shared:fp32", "shared:fp32:one-launch", "split:fp32/nvfp4", "verify-T4", "verify-T4-flush"]
    names += list(dk.FP4_DECODE_CHECKS.values())
    bad = {f"gdn:{dk.FP4_DECODE_CHECKS[d]}" for d in failed}
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: {
        f"{op}:{n}": {"rel_err": {"y": 1e-7}, "tol": 1e-5, "ok": f"{op}:{n}" not in bad} for op in ops for n in names})
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    speed = {"fp16": 1.0, "ptx": 1.2, "mma": 0.9, "mma-ptx": 0.8}

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        nbytes = dk.step_bytes(op, kind, B, upd, read, W, T)
        us = B * T + W + 1.0
        if kind == "nonflush" and read == "nvfp4":
            us *= speed[(cfg or {}).get("fp4_decode", "fp16")]
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": dict(cfg or {}), "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3, "timing": "fixture",
                "buffer_sets": 1, "fused_scores": dk.launch_form(op, kind, B, T, fold_new, fused)}

    monkeypatch.setattr(dk, "measure", measure)
    monkeypatch.setattr(dk, "fla_peer", lambda op, B, dev: {"op": op, "kernel": "fla", "batch": B, "us": 3.0 * B,
                                                            "bytes": 1.0, "GBps": 1.0, "implementation": "fla.fixture"})
    monkeypatch.setattr(dk, "fla_versions", lambda: {"flash-linear-attention": "0.6.0"})
    res = dk.run(output=tmp_path / "k.json", quick=True, ops=("gdn",))
    tuned = {r.cfg.get("fp4_decode") for r in res.rows if r.tag == "tune" and r.read == "nvfp4"}
    assert tuned == set(dk.FP4_DECODE_CHECKS) - set(failed) | {"fp16"}
    (read_row,) = [r for r in res.rows if r.tag == "read" and r.kernel == "nonflush" and r.read == "nvfp4"]
    assert read_row.cfg["fp4_decode"] == ("mma" if failed else "mma-ptx")
    assert res.summary["gdn"].targets["nvfp4_nonflush_pct_byte_bound"].value is not None


def test_each_stored_format_is_timed_at_its_own_fastest_conventional_shape(tmp_path, monkeypatch):
    """The conventional step of every 16-bit and FP8 stored format (the baseline of its flush target)
    is tuned in its own format over the conventional space and the wrappers' per-format rule ({}), and
    its "convfmt" row runs the winner; fp32 takes its batch-256 tuning and NVFP4 the wrappers' launch."""
    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: {})
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    monkeypatch.setattr(dk, "fla_peer", lambda op, B, dev: {"op": op, "kernel": "fla", "batch": B, "us": 3.0 * B,
                                                            "bytes": 1.0, "GBps": 1.0, "implementation": "fla.fixture"})
    monkeypatch.setattr(dk, "fla_versions", lambda: {"flash-linear-attention": "0.6.0"})
    # fp32 is fastest at the space's first shape, fp16-SR at (32 rows, 4 warps), bf16-SR at its rule ({})
    fastest = {"fp32": {"block_r": 16, "num_warps": 4}, "fp16-sr": {"block_r": 32, "num_warps": 4}, "bf16-sr": {}}

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        nbytes = dk.step_bytes(op, kind, B, upd, read, W, T)
        cfg = dict(cfg or {})
        us = 1.0 * B * T + W + (0.0 if kind != "conventional" or cfg == fastest.get(upd) else 1.0)
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": cfg, "us": us, "bytes": nbytes, "GBps": nbytes / us / 1e3, "timing": "fixture",
                "buffer_sets": 1, "fused_scores": dk.launch_form(op, kind, B, T, fold_new, fused)}

    monkeypatch.setattr(dk, "measure", measure)
    res = dk.run(output=tmp_path / "k.json", quick=True, ops=("mamba2",))
    conv = {r.update: r.cfg for r in res.rows if r.tag == "convfmt"}
    assert conv == {"fp32": fastest["fp32"], "bf16": {}, "fp16-sr": fastest["fp16-sr"], "bf16-sr": {}, "nvfp4": {}}
    space = dk.tune_candidates("mamba2", "conventional")
    for cf in ("bf16", "fp16-sr", "bf16-sr"):
        tried = [r.cfg for r in res.rows if r.tag == "tune" and r.kernel == "conventional" and r.update == cf]
        assert tried == [{}] + space
    assert [r.cfg for r in res.rows if r.tag == "tune" and r.kernel == "conventional" and r.update == "fp32"] == space


def test_small_batch_tuning_times_the_wrappers_defaults_and_the_small_space(tmp_path, monkeypatch):
    """--tune-batches: a tune-only run at each given batch over TUNE_SPACE_SMALL, every candidate
    beside the wrappers' defaults ({}), for the conventional step, the fp32 flush and the non-flush
    step from fp32 and NVFP4 read copies; no checks and no summary."""
    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: pytest.fail("a tune-only run checks nothing"))
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    seen = []

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        seen.append((op, kind, B, read, tuple(sorted((cfg or {}).items()))))
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": dict(cfg or {}), "us": 1.0 + B, "bytes": 1.0, "GBps": 1.0, "timing": "fixture",
                "buffer_sets": 1, "fused_scores": None}

    monkeypatch.setattr(dk, "measure", measure)
    res = dk.run(output=tmp_path / "small.json", ops=("gdn",), tune_batches=[1, 4])
    assert res.summary is None and {r.tag for r in res.rows} == {"tune"} and res.provenance.settings["tune_batches"] == [1, 4]
    for B in (1, 4):
        nonflush = {c for op, k, b, rf, c in seen if k == "nonflush" and b == B and rf == "nvfp4"}
        space = dk.TUNE_SPACE_SMALL["gdn"]["nonflush"][0]
        assert len(nonflush) == 1 + len(space["block_r"]) * len(space["num_warps"]) and () in nonflush
        assert {k for op, k, b, rf, c in seen if b == B} == {"conventional", "flush", "nonflush"}
    assert {s[2] for s in seen} == {1, 4}


def test_batch1_rows_are_timed_in_interleaved_rounds_and_the_median_round_stands(tmp_path, monkeypatch):
    """The batch-1 rows of the batch sweep: BATCH1_ROUNDS rounds, the order reversed every other round,
    every round's rows kept (tags "batch1-round<i>"), each kernel's median row as its "batch" row, and
    the batch-1 target's spread over the rounds' own ratios."""
    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    names = ("fp32", "shared:fp32", "shared:fp32:one-launch")
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: {
        f"{op}:{n}": {"rel_err": {"y": 0.0}, "tol": 1e-5, "ok": True} for op in ops for n in names})
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    monkeypatch.setattr(dk, "fla_peer", lambda op, B, dev: {"op": op, "kernel": "fla", "batch": B, "us": 3.0,
                                                            "bytes": 1.0, "GBps": 1.0, "implementation": "fla.fixture"})
    monkeypatch.setattr(dk, "fla_versions", lambda: {})
    # each kernel's batch-1 time in the order its rounds are timed: medians 4.1 (round 3), 4.2 (round 0), 6.0
    per_round = {"conventional": [4.0, 4.4, 3.9, 4.1, 4.2], "nonflush": [4.2, 4.3, 4.1, 4.5, 4.0],
                 "flush": [6.0, 6.4, 5.6, 6.2, 5.8]}
    order = []

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        if B == 1 and len(order) < 15:  # the batch sweep's rows come first at batch 1 (the "fused" rows later)
            order.append(kind)
            us = per_round[kind][sum(k == kind for k in order) - 1]
        else:
            us = 2.0
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": dict(cfg or {}), "us": us, "bytes": 1.0, "GBps": 1.0 / us / 1e3, "timing": "fixture",
                "buffer_sets": 1, "fused_scores": dk.launch_form(op, kind, B, T, fold_new, fused)}

    monkeypatch.setattr(dk, "measure", measure)
    res = dk.run(output=tmp_path / "k.json", quick=True, ops=("gdn",))
    kinds = ["conventional", "nonflush", "flush"]
    assert dk.BATCH1_ROUNDS == 5
    assert order == (kinds + kinds[::-1]) * 2 + kinds  # interleaved, reversed every other round
    rounds = [r for r in res.rows if r.tag.startswith("batch1-round")]
    assert [(r.tag, r.kernel, r.us) for r in rounds] == [
        (f"batch1-round{i}", k, per_round[k][i]) for i in range(5) for k in (kinds if i % 2 == 0 else kinds[::-1])]
    assert all((r.batch, r.W) == (1, {"conventional": 0, "nonflush": 7, "flush": 15}[r.kernel]) for r in rounds)
    batch1 = {r.kernel: r.us for r in res.rows if r.tag == "batch" and r.batch == 1 and r.kernel in kinds}
    assert batch1 == {"conventional": 4.1, "nonflush": 4.2, "flush": 6.0}
    e = res.summary["gdn"].batch[1]
    assert e.speedup_vs_conventional == pytest.approx(4.1 / ((15 * 4.2 + 6.0) / 16))  # the median rows' ratio
    each = [per_round["conventional"][i] / ((15 * per_round["nonflush"][i] + per_round["flush"][i]) / 16)
            for i in range(5)]
    assert bench_kernels._round_speedups(res.rows, "gdn", 1) == pytest.approx(each)
    t = res.summary["gdn"].targets["batch1_replay_vs_conventional"]
    assert t.spread == pytest.approx([min(each), max(each)]) and t.value == e.speedup_vs_conventional
    assert bench_kernels._round_speedups(res.rows, "gdn", 16) == []  # timed once
    assert res.summary["gdn"].targets["replay_vs_conventional"].spread is None
    assert f"| gdn | batch1_replay_vs_conventional | {t.value:.2f} ({min(each):.2f}–{max(each):.2f} over the rounds) |" \
        in decode_kernel_tables(res)
    assert load(json.loads(json.dumps(to_json(res)))) == res  # the new fields survive the file


def _replace_the_gpu_parts(monkeypatch, measure):
    """run() on the CPU: fixture checks (the fp32 stream passes), ceiling and peer, and ``measure`` for
    the timings."""
    dk = bench_kernels
    monkeypatch.setenv("PRECISION_LAB_GIT", "abc1234")
    monkeypatch.setattr(dk, "check_correctness", lambda dev, ops: {f"{op}:fp32": {"rel_err": {"y": 0.0}, "tol": 1e-5,
                                                                               "ok": True} for op in ops})
    monkeypatch.setattr(dk, "copy_ceiling", lambda dev: Ceiling(method="fixture", bytes=8, us=1.0, GBps=4000.0,
                                                               timing="fixture"))
    monkeypatch.setattr(dk, "measure", measure)
    monkeypatch.setattr(dk, "fla_peer", lambda op, B, dev: {"op": op, "kernel": "fla", "batch": B, "us": 3.0,
                                                            "bytes": 1.0, "GBps": 1.0, "implementation": "fla.fixture"})
    monkeypatch.setattr(dk, "fla_versions", lambda: {})


def test_format_flush_rows_take_the_wrappers_rule_not_the_fp32_flush_shape(tmp_path, monkeypatch):
    """The flush is tuned on the shared fp32 flush; when an uncapped shape wins there, the flush rows of
    the read and update formats still run the wrappers' per-format rule (no block_r, num_warps or
    max_registers), while the fp32 rows (batch, L and draft sweeps) take the winner."""
    dk = bench_kernels

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        cfg = dict(cfg or {})
        us = 1.0 if cfg.get("max_registers") == 0 else 2.0   # the uncapped candidate wins the tuning
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": cfg, "us": us, "bytes": 1.0, "GBps": 1.0, "timing": "fixture", "buffer_sets": 1,
                "fused_scores": None}

    _replace_the_gpu_parts(monkeypatch, measure)
    res = dk.run(output=tmp_path / "k.json", quick=True, ops=("mamba2",))
    flushes = [r for r in res.rows if r.kernel == "flush"]
    fmt_rows = [r for r in flushes if r.tag in ("read", "update")]
    assert {(r.update, r.read) for r in fmt_rows} >= {("fp32", "nvfp4"), ("fp16-sr", "nvfp4"), ("fp32", "bf16")}
    assert all(not set(r.cfg) & set(dk.FLUSH_SHAPE_KEYWORDS) for r in fmt_rows)
    fp32_rows = [r for r in flushes if r.tag in ("L16", "T1", "T8") or (r.tag == "batch" and r.batch == 256)]
    assert len(fp32_rows) >= 4 and all(r.cfg.get("max_registers") == 0 for r in fp32_rows)
    assert dk.format_flush_cfg({"max_registers": 0, "block_r": 16, "num_warps": 2, "fold_precision": "tf32x3"}) == {
        "fold_precision": "tf32x3"}


def test_speculative_flush_is_tuned_over_tiles_on_top_of_the_fp32_flush_winner(tmp_path, monkeypatch):
    """Mamba-2's speculative flush (T > 1) is tuned over ``tiles_per_program`` (one tile at the rule against
    the multi-tile kernel) and ``window_bound`` (None, or the row's window W = 16: WINDOW), every
    candidate carrying the fp32 flush's winning keywords, and the draft sweep's flush row takes the
    winner; the T = 1 row and GDN (no such candidate) keep the fp32 flush's. Verify (W = 8) is tuned
    over the window bound too, and its row takes the winner."""
    dk = bench_kernels

    def measure(op, kind, B, dev, *, upd="fp32", read=None, ring=16, W=0, T=1, fold_new=None, cfg=None, fused=None):
        cfg = dict(cfg or {})
        us = 1.0 if cfg.get("max_registers") == 0 else 2.0        # the fp32 flush's winner: uncapped
        us += 0.0 if cfg.get("tiles_per_program") == 4 else 0.5   # the speculative flush's: 4 tiles
        us -= 0.25 if cfg.get("window_bound") == W else 0.0       # ... over the window's tiles
        return {"op": op, "kernel": kind, "batch": B, "update": upd, "read": read, "W": W, "T": T, "ring": ring,
                "cfg": cfg, "us": us, "bytes": 1.0, "GBps": 1.0, "timing": "fixture", "buffer_sets": 1,
                "fused_scores": None}

    _replace_the_gpu_parts(monkeypatch, measure)
    res = dk.run(output=tmp_path / "k.json", quick=True, ops=("mamba2", "gdn"))
    spec_tune = [r for r in res.rows if r.tag == "tune" and r.kernel == "flush" and r.T == 8]
    assert {r.op for r in spec_tune} == {"mamba2"}
    assert sorted(str(r.cfg.get("tiles_per_program")) for r in spec_tune) == sorted(["4", "8", "16", "None"] * 6)
    # None: the base's 0
    assert sorted(str(r.cfg.get("max_registers")) for r in spec_tune) == ["0"] * 8 + ["224"] * 8 + ["255"] * 8
    assert sorted(str(r.cfg.get("window_bound")) for r in spec_tune) == ["16"] * 12 + ["None"] * 12
    assert all(r.W == 16 and r.ring == 32 for r in spec_tune)
    row = {(r.op, r.T): {k: v for k, v in r.cfg.items() if v is not None}  # (None: the wrapper's rule)
           for r in res.rows if r.tag in ("T1", "T8") and r.kernel == "flush"}
    assert row["mamba2", 8] == {"max_registers": 0, "fold_precision": "tf32x3", "tiles_per_program": 4,
                                "window_bound": 16}
    assert "tiles_per_program" not in row["mamba2", 1] and "tiles_per_program" not in row["gdn", 8]
    verify = {r.op: r for r in res.rows if r.tag == "T8" and r.kernel == "nonflush"}
    assert verify["mamba2"].cfg.get("window_bound") == 8 and verify["mamba2"].W == 8
    assert "window_bound" not in verify["gdn"].cfg


def test_a_multi_tile_speculative_flush_row_stands_on_its_own_check():
    """The verify-round ratio from a speculative flush timed in the multi-tile kernel is given only when
    that tile count's check passed (``<op>:verify-T4-flush-tiles<n>``), besides the one-tile checks; each
    tile count the flush is tuned over is checked, with and without the window's history tiles
    (``-window``), and so is verify's windowed form (``<op>:verify-T4-window``)."""
    def row(kernel, tag, us, **kw):
        return KernelRow(op="mamba2", kernel=kernel, tag=tag, batch=256, us=us, bytes=1e9, GBps=1e9 / (us * 1e3),
                         pct_ceiling=1.0, **kw)

    rows = [row("conventional", "batch", 500.0), row("nonflush", "T8", 600.0, T=8),
            row("flush", "T8", 800.0, T=8, cfg={"tiles_per_program": 4})]
    names = ["mamba2:fp32", "mamba2:verify-T4", "mamba2:verify-T4-flush"]
    checks = {n: KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=True) for n in names}
    draft = bench_kernels.summarise(rows, checks, 5000.0)["mamba2"].drafts[8]
    assert draft.ratio_to_one_conventional_step is None            # the 4-tile kernel was not checked
    checks["mamba2:verify-T4-flush-tiles4"] = KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=True)
    draft = bench_kernels.summarise(rows, checks, 5000.0)["mamba2"].drafts[8]
    assert draft.ratio_to_one_conventional_step == pytest.approx((600 + 800) / 2 / 500)
    # both timed with the window's history tiles: each stands on its windowed check
    rows[1:] = [row("nonflush", "T8", 600.0, T=8, cfg={"window_bound": 8}),
                row("flush", "T8", 800.0, T=8, cfg={"tiles_per_program": 4, "window_bound": 16})]
    for name in ("mamba2:verify-T4-window", "mamba2:verify-T4-flush-tiles4-window"):
        assert bench_kernels.summarise(rows, checks, 5000.0)["mamba2"].drafts[8].ratio_to_one_conventional_step is None
        checks[name] = KernelCheck(rel_err={"y": 0.0}, tol=1e-5, ok=True)
    draft = bench_kernels.summarise(rows, checks, 5000.0)["mamba2"].drafts[8]
    assert draft.ratio_to_one_conventional_step == pytest.approx((600 + 800) / 2 / 500)
    W = bench_kernels.WINDOW
    assert bench_kernels.spec_flush_check_forms("mamba2") == [{"window_bound": W}] + [
        {"tiles_per_program": t, **w} for t in (4, 8, 16) for w in ({}, {"window_bound": W})]
    assert bench_kernels.verify_check_forms("mamba2") == [{"window_bound": W}]
    assert bench_kernels.spec_flush_check_forms("gdn") == [] and bench_kernels.verify_check_forms("gdn") == []
    assert bench_kernels.verify_check("mamba2", {"window_bound": 8, "num_warps": 4}) == "mamba2:verify-T4-window"
    assert bench_kernels.spec_flush_check("mamba2", {"max_registers": 0}) == "mamba2:verify-T4-flush"
    assert bench_kernels.spec_flush_check("mamba2", {"tiles_per_program": 1}) == "mamba2:verify-T4-flush"
    assert bench_kernels.spec_flush_check("mamba2", {"tiles_per_program": 2, "num_warps": 8, "max_registers": 0}
                                          ) == "mamba2:verify-T4-flush-tiles2-warps8"


def test_large_batch_launch_rules_switch_the_small_batch_rule_off_and_back():
    """The correctness streams run at batch 2 under Mamba-2's large-batch launch rules (the
    multi-tile, register-capped flush the batch-256 rows time): the rule is off inside, restored
    after, even on an error, and untouched when not asked for."""
    from precision_lab.kernels.mamba2 import decode as md

    keep = md.SMALL_BATCH_HEAD_MATRICES
    assert keep > 0
    with bench_kernels.large_batch_launch_rules():
        assert md.SMALL_BATCH_HEAD_MATRICES == 0
        assert md._flush_launch(2 * 128 > md.SMALL_BATCH_HEAD_MATRICES, (0, 0), None, None, None) == (32, 4, 168, 8)
    assert md.SMALL_BATCH_HEAD_MATRICES == keep
    with bench_kernels.large_batch_launch_rules(False):
        assert md.SMALL_BATCH_HEAD_MATRICES == keep
    with pytest.raises(RuntimeError), bench_kernels.large_batch_launch_rules():
        raise RuntimeError("inside")
    assert md.SMALL_BATCH_HEAD_MATRICES == keep


def test_draft_checks_run_every_form_the_timed_run_tunes(monkeypatch):
    """``check_drafts`` (on the CPU, Mamba-2 at a small shape with the real one's structure: 16 heads per
    group, so 4, 8 and 16 tiles per program divide a group) runs verify and the speculative flush in
    every launch form TUNE_SPACE tunes them over, the windowed ones over a ring of 32, and each one
    agrees with the step reference."""
    from precision_lab.bench import problems

    for k, v in dict(H=32, P=32, N=32, G=2).items():
        monkeypatch.setitem(problems.MAMBA2, k, v)
    out = bench_kernels.check_drafts("cpu", ops=("mamba2",))
    tiles = [f"-tiles{t}{w}" for t in (4, 8, 16) for w in ("", "-window")]
    assert set(out) == {"mamba2:verify-T4", "mamba2:verify-T4-window", "mamba2:verify-T4-flush",
                        "mamba2:verify-T4-flush-window"} | {f"mamba2:verify-T4-flush{t}" for t in tiles}
    assert all(c["ok"] and c["rel_err"]["y"] < 5e-3 for c in out.values()), out


def _ab_script():
    from tests._scripts import load_script

    return load_script("ab_gdn_batch1_rules")


def test_batch1_rules_ab_checks_each_rule_against_its_alternative(monkeypatch):
    """scripts/ab_gdn_batch1_rules.py: every rule it flips is a constant of the GDN decode module whose
    alternative differs from its value; its check finds the three output-only rules equal bit for bit
    and the fold as products off the loop's states (fp32 rounding); every constant is restored."""
    import torch
    from precision_lab.kernels.gdn import decode

    ab = _ab_script()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    before = {constant: getattr(decode, constant) for _, constant, *_ in ab.CASES}
    assert all(before[constant] != alternative for _, constant, alternative, *_ in ab.CASES)
    monkeypatch.setitem(problems.GDN, "Hk", 1)  # a small head, still a small grid with 64-column quarters
    monkeypatch.setitem(problems.GDN, "Hv", 2)
    monkeypatch.setitem(problems.GDN, "V", 64)
    monkeypatch.setitem(problems.GDN, "K", 64)
    for case, constant, alternative, kind, W in ab.CASES:
        row = ab.check_case(decode, problems.GDNProblem, dev, constant, alternative, kind, W)
        assert row["finite"], case
        if kind == "nonflush":
            assert row["out_rel"] == 0.0 and row["state_bits_equal"], (case, row)
        else:
            assert not row["state_bits_equal"] and 0 < row["state_rel"] < 1e-6, (case, row)
    assert {constant: getattr(decode, constant) for _, constant, *_ in ab.CASES} == before


def test_batch1_rules_ab_rounds_time_each_form_with_its_rule_set_and_leave_warmup_out():
    """scripts/ab_gdn_batch1_rules.py's rounds (a stand-in ``measure``, no GPU): each form is timed with
    its value in the decode module, the order flips every other round, the warm-up round is written
    (``warmup``) but left out of the ranges, and every constant is restored."""
    from precision_lab.kernels.gdn import decode

    ab = _ab_script()
    rules = {constant: getattr(decode, constant) for _, constant, *_ in ab.CASES}
    seen, rows = [], []

    def measure(op, kind, batch, dev, **kw):
        seen.append({constant: getattr(decode, constant) for constant in rules})
        return {"op": op, "kernel": kind, "batch": batch, "us": float(len(seen))}

    timings = ab.timed_rounds(measure, decode, rules, "cpu", rounds=2, warmup_rounds=1, emit=rows.append)
    per_round = 1 + 2 * len(ab.CASES)
    assert len(rows) == 3 * per_round and [r["rep"] for r in rows[::per_round]] == [-1, 0, 1]
    assert all(r.get("warmup") is True for r in rows[:per_round])
    assert not any("warmup" in r for r in rows[per_round:])
    for row, constants in zip(rows, seen):
        if row["case"] is None:
            assert constants == rules  # the conventional step with every rule at its value
            continue
        constant = next(c for case, c, *_ in ab.CASES if case == row["case"])
        assert constants[constant] == row["value"]
        assert row["value"] == (rules[constant] if row["form"] == "rule" else
                                next(alt for case, _, alt, *_ in ab.CASES if case == row["case"]))
        assert {c: v for c, v in constants.items() if c != constant} == {c: v for c, v in rules.items()
                                                                        if c != constant}
    order = [[(r["case"], r["form"]) for r in rows if r["rep"] == rep] for rep in (0, 1)]
    assert order[1][1:] == order[0][1:][::-1]  # rules and forms reversed every other round
    assert timings[("conventional", "")] == [rows[per_round]["us"], rows[2 * per_round]["us"]]
    assert all(len(us) == 2 for us in timings.values()) and len(timings) == per_round
    assert {constant: getattr(decode, constant) for constant in rules} == rules


def test_nvfp4_decodes_ab_times_every_decode_in_alternating_order():
    """scripts/ab_nvfp4_decodes.py's rounds (a stand-in ``measure``, no GPU): per round and operator the
    conventional step, then the output-only step once per decode at batch 256, W = 7 from an NVFP4 read
    copy, in ``FP4_DECODES`` order and reversed the next round; every row emitted, and the returned
    times keyed by operator and form."""
    from tests._scripts import load_script

    ab = load_script("ab_nvfp4_decodes")
    calls, rows = [], []

    def measure(op, kind, B, dev, **kw):
        calls.append((op, kind, B, kw.get("read"), kw.get("W"), (kw.get("cfg") or {}).get("fp4_decode")))
        return {"op": op, "kernel": kind, "us": float(len(calls))}

    times = ab.timed_rounds(measure, FP4_DECODES, "cpu", 2, rows.append, ops=("gdn",))
    decodes = list(FP4_DECODES)
    want = [("gdn", "conventional", 256, None, None, None)]
    want += [("gdn", "nonflush", 256, "nvfp4", 7, d) for d in decodes]
    want += [("gdn", "conventional", 256, None, None, None)]
    want += [("gdn", "nonflush", 256, "nvfp4", 7, d) for d in reversed(decodes)]
    assert calls == want
    assert [r["rep"] for r in rows] == [0] * (1 + len(decodes)) + [1] * (1 + len(decodes))
    assert times[("gdn", decodes[0])] == [2.0, float(2 * (1 + len(decodes)))]


def test_nvfp4_decodes_ab_times_each_decode_at_each_launch_shape():
    """``--shapes``: every decode at every launch shape, the shape passed to ``measure`` with the decode
    and named in the form ("" the wrappers' own); a malformed shape is refused by name."""
    import argparse

    from tests._scripts import load_script

    ab = load_script("ab_nvfp4_decodes")
    shapes = [ab.parse_shape(""), ab.parse_shape("block_r=128,num_warps=2")]
    assert shapes == [{}, {"block_r": 128, "num_warps": 2}]
    for bad in ("warps=2", "block_r=x", "block_r"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad.split("=")[0]):
            ab.parse_shape(bad)
    cfgs = []

    def measure(op, kind, B, dev, **kw):
        cfgs.append(kw.get("cfg"))
        return {"us": 1.0}

    times = ab.timed_rounds(measure, ("fp16", "mma-ptx"), "cpu", 1, lambda row: None, ops=("gdn",), shapes=shapes)
    assert cfgs[1:] == [{"fp4_decode": "fp16"}, {"fp4_decode": "mma-ptx"},
                        {"fp4_decode": "fp16", "block_r": 128, "num_warps": 2},
                        {"fp4_decode": "mma-ptx", "block_r": 128, "num_warps": 2}]
    assert set(times) == {("gdn", "conventional"), ("gdn", "fp16"), ("gdn", "mma-ptx"),
                          ("gdn", "fp16@block_r=128,num_warps=2"), ("gdn", "mma-ptx@block_r=128,num_warps=2")}
