"""The CPU-side pieces of the decode-kernel benchmark (precision_lab.bench): launch-shape
candidates, finding the fla peers' autotuners, merging per-operator result files, buffer sets (the
timings themselves need the GPU)."""
import json
import sys
import types

import pytest
import triton
import triton.language as tl

from precision_lab.bench import decode_kernels as bench_kernels
from precision_lab.bench import peers, problems
from precision_lab.bench.schema import (
    Ceiling,
    DecodeKernelsResult,
    Device,
    KernelCheck,
    KernelRow,
    Provenance,
    load,
    to_json,
)
from precision_lab.bench.tables import decode_kernel_tables


def test_tune_candidates_join_spaces_and_drop_keywords_a_wrapper_lacks(monkeypatch):
    monkeypatch.setitem(bench_kernels.TUNE_SPACE_WIDE["gdn"], "conventional",
                        [dict(block_r=[8, 16], num_warps=[2]), dict(block_r=[8], num_warps=[2, 4], no_such_kw=[1, 2])])
    got = bench_kernels.tune_candidates("gdn", "conventional", wide=True)
    assert got == [dict(block_r=8, num_warps=2), dict(block_r=16, num_warps=2), dict(block_r=8, num_warps=4)]
    assert bench_kernels.tune_candidates("mamba2", "verify") == [dict(block_r=64, num_warps=4)]


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
