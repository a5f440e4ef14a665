"""The report builder (precision_lab/report, ``precision-lab report``) on fixture results of every kind.

Fixtures come from the producers' own code where that is cheap (the simulator at 300 steps, the KL
driver's ``summarize`` on random per-position arrays, the lm-eval study's ``summarize`` on random
per-item scores); the benchmark files, which need a GPU, are built from their result classes
(precision_lab.bench.schema) with fixture numbers. Every number the tests compare is read back from
the rendered Markdown tables.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

from precision_lab.cli import main as cli_main
from precision_lab.provenance import provenance
from precision_lab.report import ResultError, build_report
from precision_lab.report.style import PolicyColors

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------
# fixtures in the producers' schemas
# ------------------------------------------------------------------------------------------------
def make_sim() -> dict:
    from precision_lab.sim import SimConfig, run_sim

    cfg = SimConfig(steps=300, heads=2, rows=16, cols=32, avg=64, bins=16,
                    policies=("fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"))
    return run_sim(cfg, log=lambda *a: None)


def _kl_settings(model, policies, D, T, **extra):
    return {"model": model, "model_seed": 0, "dtype": None, "data": "default", "docs": D, "tokens": T + 8,
            "prefill": 8, "policies": list(policies), "seed": 0, "batch_size": D, "segment": 512,
            "engine": "scan", "skip_short": False, "doc_tokens_sha": "0123456789abcdef", **extra}


def make_kl_v1(model="tiny-qwen3.5", policies=("shared:nvfp4-sr", "split:fp32/nvfp4"), seed=0) -> dict:
    """A kl summary in the layout of schema version 1 (every policy against fp32, no floor), as the
    committed reports/ files hold it; statistics from kl.summarize."""
    from precision_lab.evals import kl as klmod

    rng = np.random.default_rng(seed)
    P, D, T = len(policies), 3, 40
    kl = rng.exponential(1.0, (P, D, T)) * np.linspace(0.01, 0.1, T) * np.arange(1, P + 1)[:, None, None]
    agree = rng.random((P, D, T)) > 0.2
    nll = rng.random((P + 1, D, T)) + 2.0
    settings = _kl_settings(model, policies, D, T)
    return {"kind": "kl", "schema_version": 1,
            "provenance": provenance(policies=list(policies), reference="fp32", model=model, data="default", seed=0,
                                     engine="scan", implementations=["scan:torch-scan:replay-window"],
                                     fingerprint="f" * 16, settings=settings),
            "model": {"name": model, "seed": 0, "dtype": None},
            "data": {"source": "default", "docs": D, "tokens": T + 8, "prefill": 8, "decode_tokens": T,
                     "doc_ids": [f"doc{i}" for i in range(D)], "titles": [None] * D},
            "reference": "fp32", "policies": list(policies), "seed": 0,
            "engine": {"requested": "auto", "used": "scan", "implementations": ["scan:torch-scan:replay-window"]},
            "length_definition": "decode steps taken when the position is predicted (1 = first decode token)",
            "results": klmod.summarize(kl, agree, nll, list(policies)),
            "timing": {"seconds_this_process": 1.0, "batches_this_process": 1}}


def make_kl(model="tiny-qwen3.5", policies=("shared:nvfp4-sr", "split:fp32/nvfp4"), seed=0, per_layer_of=None,
            T=40) -> dict:
    """A kl (schema 2) or kl-layers summary as evals/kl.py's run_kl writes it, with its statistics
    from kl.summarize_plan on random per-position arrays (floors a hundred times smaller than the
    policies' KLs, except in the first document, where they are larger)."""
    from precision_lab.evals import kl as klmod

    rng = np.random.default_rng(seed)
    plan = klmod.build_plan(policies, per_layer_of=per_layer_of)
    G, C, D = len(plan.rows), len(plan.pairs), 3
    scale = np.array([1e-2 if plan.rows[a].role == "base" and plan.rows[b].role == "reference" else 1.0 + c
                      for c, (a, b) in enumerate(plan.pairs)])
    kl = rng.exponential(1.0, (C, D, T)) * np.linspace(0.01, 0.1, T) * scale[:, None, None]
    kl[:, 0] *= np.where(scale < 1, 1e3, 1.0)[:, None]
    agree = rng.random((C, D, T)) > 0.2
    nll = rng.random((G, D, T)) + 2.0
    settings = _kl_settings(model, policies, D, T, layout="grouped", sr_seeds=1, per_layer=per_layer_of is not None,
                            schema_version=2)
    out = {"kind": "kl" if per_layer_of is None else "kl-layers", "schema_version": 2 if per_layer_of is None else 1,
           "provenance": provenance(policies=list(policies), reference="matched", model=model, data="default",
                                    seed=0, engine="scan", implementations=["scan:torch-scan:replay-window"],
                                    fingerprint="f" * 16, settings=settings),
           "model": {"name": model, "seed": 0, "dtype": None},
           "data": {"source": "default", "docs": D, "tokens": T + 8, "prefill": 8, "decode_tokens": T,
                    "doc_ids": [f"doc{i}" for i in range(D)], "titles": [None] * D},
           "reference": "matched", "base": "fp32", "policies": list(policies), "seed": 0,
           "rows": [{"name": r.name, "role": r.role, "implementations": None} for r in plan.rows],
           "layout": {"name": "grouped", "check": None},
           "engine": {"requested": "auto", "used": "scan", "implementations": ["scan:torch-scan:replay-window"]},
           "length_definition": "decode steps taken when the position is predicted (1 = first decode token)",
           **klmod.summarize_plan(plan, kl, agree, nll),
           "timing": {"seconds_this_process": 1.0, "batches_this_process": 1}}
    if per_layer_of is not None:
        out["ssm_layers"] = [{"index": j, "module": f"model.layers.{j}.linear_attn", "layer_idx": j, "kind": "gdn"}
                             for j in range(per_layer_of)]
    return out


def make_lmeval(tmp: Path) -> dict:
    """An lmeval summary from the study's own summarize() on random paired per-item records."""
    from precision_lab.evals.lmeval_runner import LMEvalConfig, Study

    cfg = LMEvalConfig(model="tiny-qwen3.5", tasks=["gpqa", "math_hard"], out=str(tmp / "lmeval"), synthetic=True,
                       limit=12, policies=["fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"], n_boot=200)
    rng = np.random.default_rng(1)
    records: dict = {}
    for task, n in (("gpqa", 12), ("math_hard", 9)):
        lengths = rng.integers(5, 60, n)
        base = rng.random(n) > 0.5
        records[task] = {}
        for i, pol in enumerate(cfg.policies):
            flip = rng.random(n) < 0.25 * i
            scores = np.where(flip, ~base, base).astype(float)
            samples = [{"task": f"{task}_sub", "doc_id": j, "prompt_hash": f"h{j}", "score": float(scores[j]),
                        "response": f"r{j}-{pol if flip[j] else ''}", "filtered": None, "target": "A",
                        "gen_tokens": int(lengths[j]) + (3 if flip[j] else 0)} for j in range(n)]
            records[task][pol] = {"samples": samples, "served": {"layers.0": {"decode:torch-replay": n}}}
    return Study(cfg).summarize(records)


def bench_provenance(**settings):
    """A benchmark provenance as a GPU run records it (fixture values: commit, device)."""
    from precision_lab.bench.schema import Device, Provenance

    return Provenance(created="2026-12-01T00:00:00+00:00", command="bench.py", git="abc1234",
                      versions={"torch": "2.11.0", "triton": "3.6.0"},
                      device=Device(gpu="NVIDIA H200", gpu_count=1, cuda="13.0"), settings=settings)


def fixture_ceiling(GBps: float):
    from precision_lab.bench.schema import Ceiling

    return Ceiling(method="torch copy_ (events)", bytes=1 << 31, us=(1 << 31) / GBps / 1e3, GBps=GBps, timing="events")


def make_bench_quant() -> dict:
    """A bench-quant result as the quantizer benchmark writes it (numbers are fixture values)."""
    from precision_lab.bench.schema import QuantKernel, QuantKernelsResult, QuantTarget, to_json

    kernels = {"nvfp4 quantize": QuantKernel(check="pass", check_detail="bit-exact", bytes=4_500_000, median_ms=0.0021,
                                             GBps=2142.9, frac_of_copy=0.5214, elements_per_s=4.7e11),
               "fp8e4m3 dequantize": QuantKernel(check="pass", check_detail="bit-exact", bytes=5_000_000,
                                                 median_ms=0.0015, GBps=3333.3, frac_of_copy=0.8111),
               "bf16-sr quantize": QuantKernel(check="FAIL", check_detail="data differs in slice 0:32", bytes=6_000_000)}
    return to_json(QuantKernelsResult(
        provenance=bench_provenance(rep_ms=200.0), ceiling=fixture_ceiling(4110.0), peers={}, shape=[8, 4, 64, 128],
        dtype="float32", timing="do_bench median", implementation="precision_lab.kernels.quant.triton_quant",
        sr_seed=1234, state_bytes=1_048_576, n_elements=262_144, n_matrices=32, kernels=kernels,
        torch_reference_nvfp4=None,
        target=QuantTarget(kernel="nvfp4 quantize", fraction_of_copy=0.8, achieved_fraction=0.5214, met=False),
        bytes_model={"copy": "read 4N + write 4N"}))


def make_bench_scan() -> dict:
    """A bench-scan result as the scan benchmark writes it (numbers are fixture values)."""
    from precision_lab.bench.schema import ScanCheck, ScanKernelsResult, ScanLayer, ScanRow, to_json

    rows = []
    for arch in ("gdn", "mamba2"):
        for b in (1, 2, 4, 8):
            for j, pol in enumerate(("fp32", "split:fp16-sr/nvfp4")):
                ms = 10.0 * b / (j + 1) + (3.5 if arch == "gdn" else 1.25)
                nb = 1_000_000_000 * b
                rows.append(ScanRow(arch=arch, policy=pol, kernel="replay", B=b, T=4096, ms=ms,
                                    tokens_per_s=b * 4096 / ms * 1e3, bytes=nb, GBps=nb / ms / 1e6,
                                    pct_of_copy=nb / ms / 1e6 / 4000.0 * 100))
    rows.append(ScanRow(arch="gdn", policy="conventional:bf16", kernel="recurrent", B=2, T=4096,
                        error="RuntimeError('out of resources')"))
    return to_json(ScanKernelsResult(
        provenance=bench_provenance(T=4096), ceiling=fixture_ceiling(4000.0), peers={}, T=4096,
        layers={"gdn": ScanLayer(model="Qwen3.5-4B GDN layer", dims={"HK": 16}),
                "mamba2": ScanLayer(model="Nemotron-3-Super Mamba-2 layer", dims={"H": 128})},
        bytes_model="each input read once, the output written once",
        checks=[ScanCheck(arch="gdn", policy="fp32", against="scan_reference", T=1024, B=1, ok=True),
                ScanCheck(arch="gdn", policy="conventional:bf16", against="scan_reference", T=1024, B=1, ok=False)],
        rows=rows))


def write(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    objs = {"sim": make_sim(), "kl": make_kl(), "lmeval": make_lmeval(d), "bench-quant": make_bench_quant(),
            "bench-scan": make_bench_scan()}
    return {k: (write(d / f"{k}.json", v), v) for k, v in objs.items()}


@pytest.fixture(scope="module")
def report(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "study"
    index = build_report([p for p, _ in inputs.values()], out)
    return out, index


# ------------------------------------------------------------------------------------------------
# reading the Markdown back
# ------------------------------------------------------------------------------------------------
def md_tables(md: str) -> list[tuple[str, list[dict[str, str]]]]:
    """(caption, rows as dicts header → cell) of every captioned table in index.md, in order."""
    lines = md.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("| ") and i >= 2 and lines[i - 2].startswith("*") and lines[i + 1].startswith("|---"):
            caption = lines[i - 2].strip("*")
            head = [c.strip() for c in line.strip("|").split(" | ")]
            rows, j = [], i + 2
            while j < len(lines) and lines[j].startswith("| "):
                cells = [c.strip() for c in re.split(r"(?<!\\) \| ", lines[j].strip()[2:-2])]
                rows.append(dict(zip(head, cells)))
                j += 1
            out.append((caption, rows))
    return out


def table(md: str, starts: str) -> list[dict[str, str]]:
    found = [rows for cap, rows in md_tables(md) if cap.startswith(starts)]
    assert len(found) == 1, f"expected one table captioned {starts!r}, found {len(found)}"
    return found[0]


def num(cell: str) -> float:
    return float(cell.replace("+", ""))


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------
def test_files_and_figures(report):
    out, index = report
    assert index == out / "index.html" and index.exists() and (out / "index.md").exists()
    pngs = sorted((out / "figures").glob("*.png"))
    # sim, kl, lmeval delta + quartiles, bench-quant bars, bench-scan B sweep for 2 archs
    assert len(pngs) >= 7, [p.name for p in pngs]
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, p
    assert len(list((out / "data").glob("*.json"))) == 5


def test_html_is_self_contained(report):
    out, index = report
    html = index.read_text()
    assert not re.search(r"https?://", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    # links only to anchors of the page itself
    for href in re.findall(r'href="([^"]*)"', html):
        assert href.startswith("#") and f'id="{href[1:]}"' in html, href
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == len(list((out / "figures").glob("*.png")))
    for s in srcs:
        assert not Path(s).is_absolute() and (out / s).is_file(), s
    md = (out / "index.md").read_text()
    for s in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (out / s).is_file(), s
    # tags balance (the page renders as written, not by a browser's error recovery)
    from html.parser import HTMLParser

    class Balance(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.bad = [], []

        def handle_starttag(self, tag, attrs):
            if tag not in ("img", "meta"):
                self.stack.append(tag)

        def handle_endtag(self, tag):
            if self.stack and self.stack[-1] == tag:
                self.stack.pop()
            else:
                self.bad.append(tag)

    b = Balance()
    b.feed(html)
    assert b.bad == [] and b.stack == []
    # both files render the same blocks
    assert html.count("<table>") == html.count("</table>") == len(md_tables(md))
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md) == srcs


def test_sim_table_equals_input(report, inputs):
    md = (report[0] / "index.md").read_text()
    sim = inputs["sim"][1]
    rows = table(md, "Mean relative output error")
    assert [r["policy"] for r in rows] == list(sim["results"])
    for r in rows:
        res = sim["results"][r["policy"]]
        for e, v in zip(sim["window_ends"], res["mean_rel_error_last"]):
            assert num(r[f"t = {e}"]) == pytest.approx(v, rel=1e-3)
        assert int(r["state writes"]) == res["state_writes"]


def cell_num(cell: str) -> float:
    """A table number, without the within-floor mark."""
    return num(cell.replace("‡", "").strip())


def test_kl_tables_equal_input(report, inputs):
    md = (report[0] / "index.md").read_text()
    kl = inputs["kl"][1]
    rows = table(md, "Mean KL (nats per token) against its matched reference at fixed")
    assert [r["policy"] for r in rows] == kl["policies"]
    marks = 0
    for r in rows:
        res = kl["results"][r["policy"]]
        assert r["reference"] == res["reference"]
        buckets = res["buckets"]["log2"]
        cols = [k for k in r if k.startswith("length ")]
        assert len(cols) == len(buckets)  # 40 positions: 6 buckets, all shown
        for c, b in zip(cols, buckets):
            assert c == (f"length {b['lo']}" if b["hi"] <= b["lo"] else f"length {b['lo']}–{b['hi']}")
            assert cell_num(r[c]) == pytest.approx(b["mean"], rel=1e-3)
            assert ("‡" in r[c]) == (b["verdict"] == "within floor")
            marks += "‡" in r[c]
    assert 0 < marks < sum(len(kl["results"][p]["buckets"]["log2"]) for p in kl["policies"])
    floors = table(md, "Floors: mean KL(p_fp32")
    for r in floors:
        ref = kl["references"][r["reference (floor = KL(fp32 ‖ reference))"]]
        for c, b in zip([k for k in r if k.startswith("length ")], ref["floor"]["buckets"]["log2"]):
            assert num(r[c]) == pytest.approx(b["mean"], rel=1e-3)
    over = table(md, "KL over all decode positions")
    for r in over:
        o = kl["results"][r["policy"]]["overall"]
        for k in ("mean", "median", "q99", "max"):
            assert num(r[k]) == pytest.approx(o[k], rel=1e-3)
        assert num(r["floor"]) == pytest.approx(o["floor_mean"], rel=1e-3) and r["verdict"] == o["verdict"]
        assert num(r["top-1 agreement"]) == pytest.approx(o["top1_agreement"], rel=1e-3)
        assert num(r["NLL"]) == pytest.approx(o["nll"], rel=1e-3)
        lo, hi = (num(x) for x in r["95% CI of mean (docs)"].strip("[]").split(", "))
        assert (lo, hi) == (pytest.approx(o["doc_ci95"][0], rel=1e-3), pytest.approx(o["doc_ci95"][1], rel=1e-3))
        vs = kl["results"][r["policy"]]["vs_fp32"]["overall"]["mean"]
        assert num(r["KL vs fp32"]) == pytest.approx(vs, rel=1e-3)


def test_version_1_kl_files_still_render(tmp_path):
    v1 = write(tmp_path / "v1/summary.json", make_kl_v1())
    build_report([v1], tmp_path / "r")
    md = (tmp_path / "r/index.md").read_text()
    assert "schema version 1" in md and "carry no floor" in md
    rows = table(md, "Mean KL (nats per token) against the fp32-state run at fixed")
    data = json.loads(v1.read_text())
    for r in rows:
        for c, b in zip([k for k in r if k.startswith("length ")], data["results"][r["policy"]]["buckets"]["log2"]):
            assert num(r[c]) == pytest.approx(b["mean"], rel=1e-3)


def test_committed_kl_reports_still_build(tmp_path):
    """The KL summaries committed under reports/ (schema version 1) are read as they are."""
    root = Path(__file__).resolve().parents[1] / "reports"
    files = sorted(root.glob("first-study/data/*-kl-kl-*.json"))
    assert files
    build_report(files, tmp_path / "r")
    assert (tmp_path / "r/index.md").read_text().count("### KL vs length:") == len(files)


def test_l_sweep_and_per_layer_sections(tmp_path):
    pols = ("shared:nvfp4-sr", "shared:nvfp4-sr@L8", "shared:nvfp4-sr@L32", "split:fp16-sr/nvfp4",
            "split:fp16-sr/nvfp4@L8", "conventional:bf16")
    main = write(tmp_path / "main.json", make_kl(policies=pols))
    layers = write(tmp_path / "layers.json", make_kl(policies=("shared:nvfp4-sr", "split:fp16-sr/nvfp4"),
                                                     per_layer_of=3))
    build_report([main, layers], tmp_path / "r")
    md = (tmp_path / "r/index.md").read_text()
    data = json.loads(main.read_text())
    sweep = table(md, "Buffer-length sweep")
    assert [r["policy"] for r in sweep] == ["shared:nvfp4-sr", "split:fp16-sr/nvfp4"]
    for r in sweep:
        for L, name in ((8, f"{r['policy']}@L8"), (16, r["policy"]), (32, f"{r['policy']}@L32")):
            if name not in data["results"]:
                assert r[f"L = {L}"] == "—"
                continue
            assert cell_num(r[f"L = {L}"].split(" [")[0]) == pytest.approx(data["results"][name]["overall"]["mean"],
                                                                          rel=1e-3)
    assert (tmp_path / "r/figures/kl-L-sweep-tiny-qwen3.5.png").exists()
    lay = json.loads(layers.read_text())
    rows = table(md, "Mean KL (nats per token) with one SSM layer under the policy")
    assert [r["SSM layer"] for r in rows] == ["0", "1", "2", "all layers", "floor"]
    for p in ("shared:nvfp4-sr", "split:fp16-sr/nvfp4"):
        res = lay["results"][p]
        for r, e in zip(rows[:3], res["per_layer"]):
            assert cell_num(r[p].split(" [")[0]) == pytest.approx(e["overall"]["mean"], rel=1e-3)
        assert cell_num(rows[3][p].split(" [")[0]) == pytest.approx(res["all_layers"]["overall"]["mean"], rel=1e-3)
        assert num(rows[4][p]) == pytest.approx(res["all_layers"]["overall"]["floor_mean"], rel=1e-3)
    assert (tmp_path / "r/figures/kl-layers-tiny-qwen3.5.png").stat().st_size > 5000


def test_lmeval_tables_equal_input(report, inputs):
    md = (report[0] / "index.md").read_text()
    lm = inputs["lmeval"][1]
    assert "SSM layers served by: decode:torch-replay." in md
    long = table(md, "Accuracy and paired difference")
    assert [r["task"] for r in long] == ["gpqa"] * 3 + ["math_hard"] * 3
    wide = table(md, "Accuracy (%) per task")
    assert [r["policy"] for r in wide] == ["fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"]
    for task, n in (("math_hard", 9), ("gpqa", 12)):
        e = lm["tasks"][task]
        col = f"{task} (n={n})"
        assert num(wide[0][col]) == pytest.approx(100 * e["fp32"]["accuracy"], abs=0.006)
        for r in wide[1:]:
            pe = e["policies"][r["policy"]]
            acc, rest = r[col].split(" (", 1)
            delta, ci = rest.rstrip(")").split(" [")
            assert num(acc) == pytest.approx(100 * pe["accuracy"], abs=0.006)
            assert num(delta) == pytest.approx(100 * pe["delta"]["delta"], abs=0.006)
            assert num(ci.split(", ")[0]) == pytest.approx(100 * pe["delta"]["ci_low"], abs=0.006)
    e = lm["tasks"]["gpqa"]
    rows = long[:3]
    assert [r["policy"] for r in rows] == ["fp32", *e["policies"]]
    assert num(rows[0]["accuracy (%)"]) == pytest.approx(100 * e["fp32"]["accuracy"], abs=0.006)
    for r in rows[1:]:
        pe = e["policies"][r["policy"]]
        assert int(r["n"]) == pe["n"] == 12
        assert num(r["accuracy (%)"]) == pytest.approx(100 * pe["accuracy"], abs=0.006)
        assert num(r["Δ vs fp32 (pts)"]) == pytest.approx(100 * pe["delta"]["delta"], abs=0.006)
        lo, hi = (num(x) for x in r["95% CI (pts)"].strip("[]").split(", "))
        assert lo == pytest.approx(100 * pe["delta"]["ci_low"], abs=0.006)
        assert hi == pytest.approx(100 * pe["delta"]["ci_high"], abs=0.006)
        assert num(r["McNemar p"]) == pytest.approx(pe["mcnemar"]["p_value"], rel=5e-3)
        assert r["b / c"] == f"{pe['mcnemar']['b']} / {pe['mcnemar']['c']}"
    # the fixture flips answers for the second and third policy: a nonzero delta must show
    assert any(abs(num(r["Δ vs fp32 (pts)"])) > 0 for r in rows[1:])
    q = table(md, "gpqa: accuracy (%) by quartile")
    quart = e["policies"]["shared:nvfp4-sr"]["by_fp32_length_quartile"]
    cols = [k for k in q[0] if k.startswith("Q")]
    assert len(cols) == 4
    for c, row in zip(cols, quart):
        assert c == f"Q{row['quartile']} ({row['len_min']}–{row['len_max']}, n={row['n']})"
        assert num(q[0][c]) == pytest.approx(100 * row["accuracy"]["fp32"], abs=0.006)
    for r in q[1:]:
        for c, row in zip(cols, e["policies"][r["policy"]]["by_fp32_length_quartile"]):
            assert num(r[c]) == pytest.approx(100 * row["accuracy"]["policy"], abs=0.006)


def test_bench_tables_equal_input(report, inputs):
    md = (report[0] / "index.md").read_text()
    bq = inputs["bench-quant"][1]
    rows = table(md, "Quantize/dequantize kernels")
    assert [r["kernel"] for r in rows] == list(bq["kernels"])
    for r in rows:
        k = bq["kernels"][r["kernel"]]
        if k["check"] != "pass":  # a failed check has no timing, and the report shows none
            assert r["GB/s"] == r["median (ms)"] == "—"
            continue
        assert num(r["GB/s"]) == pytest.approx(k["GBps"], rel=1e-3)
        assert num(r["% of copy"]) == pytest.approx(100 * k["frac_of_copy"], rel=1e-3)
    bs = inputs["bench-scan"][1]
    rows = table(md, "All measurements (rows without a time failed")
    assert len(rows) == len(bs["rows"])
    for r, t in zip(rows, bs["rows"]):
        assert (r["arch"], r["policy"], r["B"]) == (t["arch"], t["policy"], str(t["B"]))
        if t["GBps"] is not None:
            assert num(r["GB/s"]) == pytest.approx(t["GBps"], rel=1e-3)
            assert num(r["ms"]) == pytest.approx(t["ms"], rel=1e-3)
        else:
            assert r["GB/s"] == "—" and "out of resources" in r["error"]
    assert "1 of 2 passed" in md


def test_caveats_and_provenance(report, inputs):
    md = (report[0] / "index.md").read_text()
    cav = md.split("## What these results show")[1].split("\n## ")[0]
    assert re.search(r"Model `tiny-qwen3.5` \(`kl.json`, `[^`]*lmeval.json`\) is a tiny random-init preset", cav)
    assert "SYNTHETIC" in cav and "come from one synthetic layer with random inputs" in cav
    assert "NVIDIA H200" in cav
    # every figure is followed by a provenance line before the next figure or heading
    body = md.split("## Provenance")[0]
    for chunk in body.split("![")[1:]:
        assert "Provenance:" in re.split(r"\n#+ ", chunk)[0]
    assert md.count("Provenance: ") >= 5
    assert inputs["kl"][1]["provenance"]["git"] is None or str(inputs["kl"][1]["provenance"]["git"]) in md


def test_long_kl_runs_keep_the_longest_bucket():
    from precision_lab.evals.kl import log2_buckets

    from precision_lab.report.sections.kl_section import table_buckets

    rows = [{"lo": lo, "hi": hi - 1} for lo, hi in log2_buckets(131072)]  # 18 buckets
    idx = table_buckets(rows)
    assert len(idx) <= 9 and idx[-1] == len(rows) - 1 and idx == sorted(set(idx))
    assert table_buckets(rows[:6]) == list(range(6))


def test_policy_colours_do_not_depend_on_order():
    a = PolicyColors(["split:fp32/nvfp4", "fp32", "shared:nvfp4-sr"])
    b = PolicyColors(["shared:nvfp4-sr", "split:fp32/nvfp4"])
    assert a("fp32") == (0.0, 0.0, 0.0)
    assert a("shared:nvfp4-sr") == b("shared:nvfp4-sr") != a("split:fp32/nvfp4")
    assert a.style("fp32") == "-" and a.style("split:fp32/nvfp4") == b.style("split:fp32/nvfp4") != a.style(
        "shared:nvfp4-sr")


def test_same_setup_merges_and_other_models_split(tmp_path):
    k1 = write(tmp_path / "a/summary.json", make_kl(policies=("shared:nvfp4-sr",)))
    k2 = write(tmp_path / "b/summary.json", make_kl(policies=("split:fp32/nvfp4",), seed=3))
    k3 = write(tmp_path / "c/summary.json", make_kl(model="tiny-nemotron-h"))
    build_report([k1.parent, k2, k3], tmp_path / "r")
    md = (tmp_path / "r/index.md").read_text()
    assert md.count("### KL vs length: tiny-qwen3.5") == 1 and md.count("### KL vs length: tiny-nemotron-h") == 1
    rows = [r for cap, r in md_tables(md) if cap.startswith("Mean KL")]
    assert [[x["policy"] for x in r] for r in rows] == [["shared:nvfp4-sr", "split:fp32/nvfp4"],
                                                        ["shared:nvfp4-sr", "split:fp32/nvfp4"]]


# ------------------------------------------------------------------------------------------------
# refused inputs
# ------------------------------------------------------------------------------------------------
def _bad_cases(tmp: Path, inputs) -> dict[str, tuple[Path, str]]:
    kl = inputs["kl"][1]
    nan_kl = json.dumps(kl).replace(str(kl["results"]["shared:nvfp4-sr"]["overall"]["mean"]), "NaN", 1)
    no_prov = {k: v for k, v in kl.items() if k != "provenance"}
    trunc = json.dumps(kl)[:300]
    (tmp / "trunc.json").write_text(trunc)
    (tmp / "nan.json").write_text(nan_kl)
    (tmp / "binary.json").write_bytes(b"\x00\xff\xfe garbage")
    return {
        "foreign": (write(tmp / "foreign.json", {"results": [1, 2]}), "not a precision-lab result"),
        "list": (write(tmp / "list.json", [1, 2]), "not a precision-lab result"),
        "kind": (write(tmp / "kind.json", {**kl, "kind": "kl-run"}), "unknown result kind 'kl-run'"),
        "schema": (write(tmp / "schema.json", {**kl, "schema_version": 3}), "schema_version 3"),
        "provenance": (write(tmp / "prov.json", no_prov), "no provenance"),
        "missing": (write(tmp / "missing.json", {k: v for k, v in kl.items() if k != "results"}), "without 'results'"),
        "truncated": (tmp / "trunc.json", "not valid JSON"),
        "binary": (tmp / "binary.json", "not valid JSON"),
        "nan": (tmp / "nan.json", "non-finite"),
        "absent": (tmp / "absent.json", "no such file"),
        "folder": (tmp, "a folder without"),
        "policy": (write(tmp / "policy.json", {**kl, "results": {"shared:nvfp4-sr@L16": {}}}), "short_str() form"),
        "layout": (write(tmp / "layout.json", {**kl, "results": {"shared:nvfp4-sr": {
            "overall": {}, "buckets": {"log2": [{"mean": 0.1}]}}}}), "without the layout this version reads"),
    }


@pytest.mark.parametrize("case", ["foreign", "list", "kind", "schema", "provenance", "missing", "truncated",
                                  "binary", "nan", "absent", "folder", "policy", "layout"])
def test_bad_file_refused(tmp_path, inputs, case):
    path, msg = _bad_cases(tmp_path, inputs)[case]
    out = tmp_path / "out"
    with pytest.raises(ResultError, match=re.escape(msg)) as ei:
        build_report([inputs["sim"][0], path], out)
    assert str(path) in str(ei.value)
    assert not out.exists()  # refused before anything is written


def test_mixed_inputs_refused(tmp_path, inputs):
    sim_path, sim = inputs["sim"]
    # the same file twice, and the same content under another name
    with pytest.raises(ResultError, match="given twice"):
        build_report([sim_path, sim_path], tmp_path / "o")
    with pytest.raises(ResultError, match="identical to"):
        build_report([sim_path, write(tmp_path / "copy.json", json.loads(sim_path.read_text()))], tmp_path / "o")
    # a rerun of the same setup holding the same policy, with other numbers: the report would pick one
    rerun = copy.deepcopy(sim)
    rerun["results"] = {"shared:nvfp4-sr": rerun["results"]["shared:nvfp4-sr"]}
    rerun["results"]["shared:nvfp4-sr"]["mean_rel_error_last"][0] *= 2
    with pytest.raises(ResultError, match="two 'sim' results for policy 'shared:nvfp4-sr'"):
        build_report([sim_path, write(tmp_path / "rerun.json", rerun)], tmp_path / "o")
    # two lm-eval summaries of the same model and task: both hold fp32
    lm = inputs["lmeval"][1]
    other = copy.deepcopy(lm)
    other["provenance"]["created"] = "later"
    other["tasks"]["gpqa"]["policies"] = {}
    with pytest.raises(ResultError, match=r"policy 'fp32' \(gpqa\)"):
        build_report([inputs["lmeval"][0], write(tmp_path / "lm2.json", other)], tmp_path / "o")
    # a benchmark smoke run (interpreter timings)
    smoke = copy.deepcopy(inputs["bench-quant"][1])
    smoke["provenance"]["smoke"] = True
    with pytest.raises(ResultError, match="smoke run"):
        build_report([write(tmp_path / "smoke.json", smoke)], tmp_path / "o")
    # another setup of the same kind is not mixed: another architecture renders as its own section
    gdn = copy.deepcopy(sim)
    gdn["settings"]["arch"] = "gdn"
    build_report([sim_path, write(tmp_path / "gdn.json", gdn)], tmp_path / "ok")
    assert (tmp_path / "ok/index.md").read_text().count("### Single-layer simulation: ") == 2


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------
def test_cli_bad_file_one_error_line(tmp_path, capsys):
    bad = write(tmp_path / "bad.json", {"hello": "world"})
    rc = cli_main(["report", str(bad), "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("precision-lab report: error: ") and str(bad) in err[0]


def test_cli_builds(tmp_path, inputs, capsys):
    rc = cli_main(["report", str(inputs["sim"][0]), str(inputs["bench-quant"][0]), "-o", str(tmp_path / "r"),
                   "--title", "Demo"])
    assert rc == 0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "r/index.md").read_text().startswith("# Demo\n")


# ------------------------------------------------------------------------------------------------
# benchmark files outside their schema, and the decode-kernel benchmark's summary
# ------------------------------------------------------------------------------------------------
def test_bench_layouts_outside_the_schema_are_refused(tmp_path):
    """A benchmark file is read through its class: a layout the class does not have is refused with
    the field named, never rendered from guessed field names."""
    rows = [{"arch": "mamba2", "kernel": "replay", "B": b, "us": 20.0 * b} for b in (1, 16)]
    cases = {
        "timings": ({"kind": "bench-kernels", "schema_version": 2, "provenance": {}, "timings": rows},
                    "field(s) 'timings' that DecodeKernelsResult does not have"),
        "v1 rows": ({"kind": "bench-scan", "schema_version": 1, "provenance": provenance(), "shapes": {"T": 4},
                     "checks": [], "timings": [{"arch": "gdn", "policy": "fp32", "B": 1, "T": 4, "us": 3.0}]},
                    "timings[0]: field(s) 'us'"),
        "v1 layout": ({"kind": "bench-kl", "schema_version": 1, "provenance": provenance(model="m"), "tokens": 131072},
                      "without 'model', 'policies', 'engine'"),
        "extra": ({**make_bench_quant(), "speedup": 2.0}, "field(s) 'speedup'"),
        "no git": ({**make_bench_quant(), "provenance": {**make_bench_quant()["provenance"], "git": None}},
                   "provenance.git: null in a GPU result"),
        "version": ({**make_bench_quant(), "schema_version": 3}, "schema_version 3"),
    }
    for name, (obj, msg) in cases.items():
        path = write(tmp_path / f"{name}.json", obj)
        with pytest.raises(ResultError, match=re.escape(msg)) as ei:
            build_report([path], tmp_path / "out")
        assert str(path) in str(ei.value)
    assert not (tmp_path / "out").exists()


def make_bench_kernels_real_schema(partial: bool = False) -> dict:
    """The decode-kernel benchmark's result: fixture timing rows, its own summarise() on top
    (``partial``: a per-operator checkpoint, no summary)."""
    from precision_lab.bench import decode_kernels as bk
    from precision_lab.bench.schema import DecodeKernelsResult, KernelCheck, KernelRow, to_json

    ceiling = fixture_ceiling(4295.0)
    rows = []

    def row(op, kernel, batch, us, tag, **kw):
        rows.append(KernelRow(op=op, kernel=kernel, batch=batch, us=us, bytes=1e6 * batch, GBps=1e3 * batch / us,
                              pct_ceiling=100 * 1e3 * batch / us / ceiling.GBps, tag=tag, update=kw.get("update", "fp32"),
                              read=kw.get("read"), T=kw.get("T", 1)))

    for k, op in enumerate(("mamba2", "gdn")):
        for B in bk.BATCHES:
            row(op, "conventional", B, 10.0 + B + k, "batch")
            row(op, "nonflush", B, 5.0 + B / 2 + k, "batch")
            row(op, "flush", B, 12.0 + B + k, "batch")
            row(op, "fla", B, 14.0 + 1.1 * B + k, "batch")
        for L in bk.LS:
            row(op, "nonflush", 256, 130.0 + L, f"L{L}")
            row(op, "flush", 256, 270.0 + L, f"L{L}")
        for T in bk.DRAFT_T:
            row(op, "nonflush", 256, 140.0 + 3 * T, f"T{T}", T=T)
            row(op, "flush", 256, 280.0 + T, f"T{T}", T=T)
        for rf in bk.READ_FMTS:
            row(op, "nonflush", 256, 30.0 + len(rf), "read", read=rf)
            row(op, "flush", 256, 260.0 + len(rf), "read", read=rf)
        for uf in bk.UPDATE_FMTS:
            row(op, "flush", 256, 250.0 + len(uf), "update", update=uf, read="nvfp4")
        for cf in bk.CONV_FMTS:
            row(op, "conventional", 256, 200.0 + len(cf), "convfmt", update=cf)
    checks = {f"{op}:{name}": KernelCheck(rel_err={"y": 1e-6}, tol=1e-4, ok=name != "verify-T4")
              for op in ("mamba2", "gdn") for name in ("fp32", "shared:fp32", "split:fp32/nvfp4", "verify-T4",
                                                       "verify-T4-flush")}
    return to_json(DecodeKernelsResult(
        provenance=bench_provenance(quick=False), ceiling=ceiling, peers={"flash-linear-attention": "0.6.0"},
        correctness=checks, rows=rows, partial=partial,
        summary=None if partial else bk.summarise(rows, checks, ceiling.GBps)))


def test_bench_kernels_summary(tmp_path):
    bk = make_bench_kernels_real_schema()
    build_report([write(tmp_path / "bench_kernels.json", bk)], tmp_path / "r")
    out = tmp_path / "r"
    figs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert figs == [f"bench-kernels-{op}-{s}.png" for op in ("gdn", "mamba2") for s in ("L", "T", "batch")]
    md = (out / "index.md").read_text()
    assert "Decode kernels: NVIDIA H200" in md and "4295 GB/s" in md
    for op in ("mamba2", "gdn"):
        s = bk["summary"][op]
        rows = table(md, f"{op}: batch sweep")
        assert [r["B"] for r in rows] == [str(b) for b in sorted(int(b) for b in s["batch"])]
        for r in rows:
            e = s["batch"][r["B"]]
            assert num(r["ReplaySSM amortised (µs)"]) == pytest.approx(e["replay_amortised_us"], rel=1e-3)
            assert num(r["speedup vs conventional"]) == pytest.approx(e["speedup_vs_conventional"], rel=1e-3)
            assert num(r["fla (µs)"]) == pytest.approx(e["fla_us"], rel=1e-3)
        for r in table(md, f"{op}: L sweep"):
            e = s["L"][r["L"]]
            assert num(r["speedup vs conventional"]) == pytest.approx(e["speedup_vs_conventional"], rel=1e-3)
        # the verify checks failed in the fixture: the script stores no ratio, and the report shows none
        for r in table(md, f"{op}: draft sweep"):
            assert r["ratio to one conventional step"] == "—"
            assert num(r["verify (µs)"]) == pytest.approx(s["drafts"][r["T"]]["verify_us"], rel=1e-3)
        tg = {r["quantity"]: r for r in table(md, f"{op}: targets")}
        assert tg["verify_T8_vs_conventional"]["met"] == "not measured"
        v = s["targets"]["replay_vs_conventional"]
        assert num(tg["replay_vs_conventional"]["measured"]) == pytest.approx(v["value"], rel=1e-3)
        assert tg["replay_vs_conventional"]["met"] == ("yes" if v["met"] else "NO")
        assert num(tg["replay_vs_conventional"]["byte bound"]) == pytest.approx(v["byte_bound"], rel=1e-3)
        assert tg["batch1_replay_vs_conventional"]["byte bound"] == "—"
    assert "| mamba2:verify-T4 | FAIL |" in md
    assert "Incomplete run" not in md
    bk["incomplete"] = "stopped at its time limit before the GDN storage formats"
    build_report([write(tmp_path / "cut.json", bk)], tmp_path / "r2")
    assert "**Incomplete run**: stopped at its time limit before the GDN storage formats" in \
        (tmp_path / "r2" / "index.md").read_text()
    # a run of one operator (--ops gdn): the other has no rows, and no section of "not measured" targets
    one = dict(bk, rows=[r for r in bk["rows"] if r["op"] == "gdn"], incomplete=None)
    build_report([write(tmp_path / "gdn.json", one)], tmp_path / "r4")
    md = (tmp_path / "r4" / "index.md").read_text()
    assert "gdn: targets" in md and "mamba2: targets" not in md and "mamba2: batch sweep" not in md
    # a per-operator checkpoint has no summary: its checks and measured launches are shown
    part = make_bench_kernels_real_schema(partial=True)
    build_report([write(tmp_path / "part.json", part)], tmp_path / "r3")
    md = (tmp_path / "r3" / "index.md").read_text()
    assert "**Incomplete run**: a per-operator checkpoint" in md and "Peers timed: flash-linear-attention 0.6.0" in md
    rows = table(md, "All measured launches")
    assert len(rows) == len(part["rows"])
    for r, x in zip(rows, part["rows"]):
        assert (r["op"], r["sweep"], r["kernel"], r["B"]) == (x["op"], x["tag"], x["kernel"], str(x["batch"]))
        assert num(r["µs"]) == pytest.approx(x["us"], rel=1e-3)


def test_sim_equivalence_mode(tmp_path):
    from precision_lab.sim import equivalence_result

    eq = equivalence_result(("mamba2", "gdn"), log=lambda *a: None, steps=64, rows=8, cols=16, rounds=8)
    build_report([write(tmp_path / "eq.json", eq)], tmp_path / "r")
    md = (tmp_path / "r/index.md").read_text()
    rows = table(md, "float64 equivalence and state writes")
    assert [r["architecture"] for r in rows] == ["mamba2", "mamba2", "gdn", "gdn"]
    for i, arch in enumerate(("mamba2", "gdn")):
        dec, spec = eq["results"][arch]["decode"], eq["results"][arch]["speculative"]
        for r, part in zip(rows[2 * i:2 * i + 2], (dec, spec)):
            assert num(r["max relative difference"]) == pytest.approx(part["max_rel_diff"], rel=1e-3)
            assert int(r["ReplaySSM state writes"]) == part["replay_state_writes"]
        assert int(rows[2 * i]["baseline state writes"]) == dec["conventional_state_writes"] == 64
        assert int(rows[2 * i + 1]["baseline state writes"]) == spec["snapshot_state_writes"]
    assert "mamba2, gdn" not in md.split("## What these")[0]  # architectures are not listed as policies


def make_bench_kl(ok: bool = True) -> dict:
    """A bench-kl result as the KL engine benchmark writes it (numbers are fixture values)."""
    from precision_lab.bench.schema import (
        EngineCheck,
        EngineVerdict,
        KLEngineResult,
        LongRun,
        Segment,
        SideBySide,
        to_json,
    )

    pols = ["shared:nvfp4-sr", "split:fp16-sr/nvfp4"]
    return to_json(KLEngineResult(
        provenance=bench_provenance(tokens=131072), ceiling=fixture_ceiling(4200.0), peers={}, model="qwen3.5-4b-shape",
        policies=pols, engine="triton", build_seconds=12.5, model_params=4_500_000_000,
        check=EngineCheck(prefill=32, decode_tokens=24, segment=16, weights="float32", seconds=3.0, all_ok=ok,
                          verdicts={p: EngineVerdict(ok=ok, disagreement=1e-4, effect=0.02,
                                                     criterion="max KL <= 0.05 x") for p in pols}),
        side_by_side=SideBySide(prefill=512, decode_tokens=4096, rows=3, weights="bfloat16", prefill_seconds=1.0,
                                teacher_forced_seconds=2.5, teacher_forced_tok_per_s=1638.4,
                                token_by_token_steps_timed=64, token_by_token_seconds_per_step=0.0625,
                                token_by_token_seconds_per_step_stat="median over the timed steps",
                                token_by_token_seconds_for_stream=256.0,
                                token_by_token_note="measured over 64 steps, scaled to 4096", speedup=102.4,
                                speedup_valid=ok),
        long_run=LongRun(tokens=131072, prefill=512, segment=8192, rows=3, weights="bfloat16",
                         decode_tokens_done=130560, seconds=250.0, tokens_per_s_per_row=522.2,
                         estimated_seconds_full=250.0, estimate_note="measured (complete)", target_seconds=300,
                         segments=[Segment(start=512 + 8192 * i, tokens=8192, seconds=10.0 + i) for i in range(4)],
                         peak_gpu_mem_gib=61.5, mean_kl_by_policy_random_weights={p: 1e-3 for p in pols})))


def test_bench_kl(tmp_path):
    build_report([write(tmp_path / "bench_kl.json", make_bench_kl())], tmp_path / "r")
    md = (tmp_path / "r/index.md").read_text()
    sb = {r["quantity"]: r["value"] for r in table(md, "Teacher-forced engine vs token-by-token")}
    assert num(sb["speedup (×)"]) == 102.4 and num(sb["teacher-forced engine (s)"]) == 2.5
    lr = {r["quantity"]: r["value"] for r in table(md, "The long run")}
    assert num(lr["seconds"]) == 250.0 and num(lr["target (s)"]) == 300
    assert [p.name for p in (tmp_path / "r/figures").glob("*.png")] == ["bench-kl-throughput.png"]
    # a failed engine check: the speedup is not shown
    build_report([write(tmp_path / "bad.json", make_bench_kl(ok=False))], tmp_path / "r2")
    md = (tmp_path / "r2/index.md").read_text()
    sb = {r["quantity"]: r["value"] for r in table(md, "Teacher-forced engine vs token-by-token")}
    assert sb["speedup (×)"] == "not reported: engine check failed" and "102.4" not in md


def test_rebuild_replaces_and_failure_keeps(tmp_path, inputs):
    out = tmp_path / "r"
    build_report([inputs["sim"][0], inputs["bench-quant"][0]], out)
    assert (out / "figures/bench-quant.png").exists()
    build_report([inputs["sim"][0]], out)  # a rebuild leaves no figure of the previous build behind
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["sim-mamba2-300.png"]
    before = (out / "index.md").read_text()
    bad = write(tmp_path / "bad.json", {**inputs["kl"][1], "results": {"shared:nvfp4-sr": {
        "overall": {}, "buckets": {"log2": [{"mean": 0.1}]}}}})
    with pytest.raises(ResultError):
        build_report([inputs["sim"][0], bad], out)
    assert (out / "index.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "r"]  # no staging folder left


def test_git_hash_named_in_the_environment_wins(monkeypatch):
    """A tree shipped to another machine may carry a stale .git: the commit named in
    PRECISION_LAB_GIT is the one recorded."""
    from precision_lab.provenance import git_hash

    monkeypatch.setenv("PRECISION_LAB_GIT", "0123abc")
    assert git_hash() == "0123abc"
    monkeypatch.delenv("PRECISION_LAB_GIT")
    assert git_hash() != "0123abc"


def test_rebuild_touches_only_files_the_report_wrote(tmp_path, inputs):
    out = tmp_path / "r"
    build_report([inputs["sim"][0], inputs["bench-quant"][0]], out)
    (out / "figures" / "my-plot.png").write_bytes(b"user's own figure")   # the user's files, beside the report
    (out / "notes.md").write_text("mine")
    build_report([inputs["sim"][0]], out)
    assert (out / "figures" / "my-plot.png").read_bytes() == b"user's own figure"
    assert (out / "notes.md").read_text() == "mine"
    assert not (out / "figures" / "bench-quant.png").exists()               # the report's own stale figure: gone
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["my-plot.png", "sim-mamba2-300.png"]
    # a file of the user's where the report would write one: refused, nothing changed
    fresh = tmp_path / "fresh"
    (fresh / "figures").mkdir(parents=True)
    (fresh / "index.md").write_text("my own index")
    with pytest.raises(ResultError, match="did not write it"):
        build_report([inputs["sim"][0]], fresh)
    assert (fresh / "index.md").read_text() == "my own index" and not (fresh / "index.html").exists()


def test_a_report_built_before_manifests_is_rebuilt_without_touching_other_files(tmp_path, inputs):
    from precision_lab.report.build import MANIFEST

    out = tmp_path / "r"
    build_report([inputs["sim"][0], inputs["bench-quant"][0]], out)
    (out / MANIFEST).unlink()
    (out / "figures" / "my-plot.png").write_bytes(b"user's own figure")
    build_report([inputs["sim"][0]], out)
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["my-plot.png", "sim-mamba2-300.png"]


# ------------------------------------------------------------------------------------------------
# the generation benchmark (kind bench-generate, precision_lab/bench/generate_schema.py)
# ------------------------------------------------------------------------------------------------
GENERATE_JSON = Path(__file__).resolve().parent.parent / "reports" / "bench" / "bench_generate.json"


def make_generate(keep=lambda row: True, check: str = "passed", **settings) -> dict:
    """The committed generation result with only the rows ``keep`` accepts and the given check outcome
    (passed as committed, "skipped" as ``--skip-check`` writes it, or "failed": one verdict failed);
    the ratios recomputed by the writer's own function, as a run with those rows would write them."""
    from precision_lab.bench.generate_schema import Row, load, ratios, to_json

    d = json.loads(GENERATE_JSON.read_text())
    d["rows"] = [r for r in d["rows"] if keep(r)]
    d["settings"].update(settings)
    if check == "skipped":
        d["check"] = {"ok": False, "skipped": True}
    elif check == "failed":
        d["check"]["ok"] = False
        d["check"]["presets"]["tiny-qwen3.5"]["shared:nvfp4-sr"]["ok"] = False
    typed_rows = [Row(**{k: v for k, v in r.items() if k != "graphs"}) for r in d["rows"]]
    d["ratios"] = ratios(typed_rows, d["check"]["ok"], skipped=check == "skipped")
    return to_json(load(d))


def _generate_md(tmp_path, obj, name="bench_generate.json") -> str:
    out = tmp_path / name.replace(".json", "")
    build_report([write(tmp_path / name, obj)], out)
    return (out / "index.md").read_text()


def test_bench_generate_committed_file_renders_its_numbers(tmp_path):
    out = tmp_path / "r"
    build_report([GENERATE_JSON], out)
    md = (out / "index.md").read_text()
    d = json.loads(GENERATE_JSON.read_text())
    assert [p.name for p in (out / "figures").glob("*.png")] == ["bench-generate-qwen3.5-4b-shape.png"]
    assert "## Generation benchmark (whole models)" in md and "### Generation: qwen3.5-4b-shape on NVIDIA H200" in md
    # only what the file holds: one preset at batches 1 and 8 of the 2 presets x 3 batches asked for
    assert "Not timed: `nemotron-3-nano-4b-shape`, `qwen3.5-4b-shape` at batch 64." in md
    assert "Correctness check passed: all 12 verdicts" in md and "SKIPPED" not in md and "FAILED" not in md
    rows = {(x["row"], x["batch"]): x for x in d["rows"]}
    steps = table(md, "qwen3.5-4b-shape: ms per decode step")
    assert [r["row"] for r in steps] == d["settings"]["rows"]
    assert list(steps[0]) == ["row", "B=1 ms/step", "B=1 ÷ fp32", "B=1 ÷ plain", "B=8 ms/step", "B=8 ÷ fp32",
                              "B=8 ÷ plain"]
    for r in steps:
        for b in (1, 8):
            assert num(r[f"B={b} ms/step"]) == pytest.approx(rows[(r["row"], b)]["step_ms_median"], rel=1e-3)
    ratio = {(x["row"], x["batch"], x["over"]): x["ratio"] for x in d["ratios"]}
    for r in steps:
        for b in (1, 8):
            if r["row"] not in ("fp32", "plain transformers"):
                assert num(r[f"B={b} ÷ fp32"]) == pytest.approx(ratio[(r["row"], b, "fp32")], rel=1e-3)
    fp32 = next(r for r in steps if r["row"] == "fp32")
    assert num(fp32["B=8 ÷ plain"]) == pytest.approx(ratio[("fp32", 8, "plain transformers")], rel=1e-3)
    assert num(fp32["B=8 ÷ plain"]) == pytest.approx(8.44120700000417 / 250.2557585806449, rel=1e-3)
    other = table(md, "qwen3.5-4b-shape: prefill time, throughput")
    for r in other:
        for b in (1, 8):
            x = rows[(r["row"], b)]
            assert num(r[f"B={b} prefill (s)"]) == pytest.approx(x["prefill_s"], rel=1e-3)
            assert num(r[f"B={b} tokens/s"]) == pytest.approx(x["tokens_per_s"], rel=1e-3)
    served = {r["row"]: r["SSM layers served by"] for r in other}
    assert served["fp32"] == "`triton-decode:triton:gdn_conventional_step` × 24 layers"
    assert served["split:fp16-sr/nvfp4"] == "`triton-decode:triton:gdn_replay_step` × 24 layers"
    assert served["plain transformers"] == "transformers (unadapted model)"
    chk = table(md, "Correctness check on the GPU")
    assert len(chk) == 12 and {r["fast path = decode engine"] for r in chk} == {"pass"}
    targets = table(md, "Targets:")
    assert len(targets) == 2 * 5 + 1 and {r["verdict"] for r in targets} == {"met"}
    t8 = next(r for r in targets if r["ratio of ms/step"] == "`fp32` ÷ plain transformers")
    assert t8["batch"] == "8" and num(t8["measured"]) == pytest.approx(0.03373, rel=1e-3)
    # provenance: commit, versions, device
    assert "git c62c68737dc6e1e31fdd3c73189029a04d105983" in md and "torch 2.11.0" in md and \
        "device NVIDIA H200, CUDA 13.0" in md


def test_bench_generate_partial_file(tmp_path):
    # batch 8 only, no plain transformers row: the fp32 target is "not measured", the rest renders
    md = _generate_md(tmp_path, make_generate(lambda r: r["batch"] == 8 and r["row"] != "plain transformers"))
    steps = table(md, "qwen3.5-4b-shape: ms per decode step")
    assert [r["row"] for r in steps] == ["fp32", "conventional:bf16", "shared:nvfp4-sr", "split:fp32/nvfp4",
                                         "split:fp16-sr/nvfp4", "split:fp8e4m3-sr/nvfp4"]
    assert "B=1 ms/step" not in steps[0] and all(r["B=8 ÷ plain"] == "—" for r in steps)
    targets = table(md, "Targets:")
    fp32 = [r for r in targets if r["ratio of ms/step"] == "`fp32` ÷ plain transformers"]
    assert fp32[0]["measured"] == "—" and fp32[0]["verdict"].startswith("not measured")
    assert "`qwen3.5-4b-shape` at batch 1" in md  # named as not timed
    # batch 1 only: the batch-8 target is named as not measured, the figure is still drawn
    md = _generate_md(tmp_path, make_generate(lambda r: r["batch"] == 1), "b1.json")
    t = table(md, "Targets:")[-1]
    assert t["batch"] == "8" and t["verdict"] == "not measured: batch 8 not timed"
    assert (tmp_path / "b1" / "figures" / "bench-generate-qwen3.5-4b-shape.png").exists()
    # a row that failed to run: no times, no ratio, named with its error
    d = make_generate()
    bad = next(r for r in d["rows"] if r["row"] == "shared:nvfp4-sr" and r["batch"] == 8)
    bad.update(step_ms_median=None, step_ms_p90=None, prefill_s=None, tokens_per_s=None, steps=0,
               error="OutOfMemoryError: CUDA out of memory", served={})
    d["ratios"] = [x for x in d["ratios"] if not (x["row"] == "shared:nvfp4-sr" and x["batch"] == 8)]
    md = _generate_md(tmp_path, d, "oom.json")
    r = next(r for r in table(md, "qwen3.5-4b-shape: ms per decode step") if r["row"] == "shared:nvfp4-sr")
    assert r["B=8 ms/step"] == "failed" and r["B=8 ÷ fp32"] == "—" and num(r["B=1 ms/step"]) > 0
    assert table(md, "Rows that failed to run")[0]["error"] == "OutOfMemoryError: CUDA out of memory"
    t = next(r for r in table(md, "Targets:") if r["batch"] == "8" and "shared:nvfp4-sr" in r["ratio of ms/step"])
    assert t["verdict"].startswith("not measured")


def test_bench_generate_skipped_or_failed_check_is_labelled(tmp_path):
    d = make_generate(check="skipped")
    assert all(x["check"] == "SKIPPED (ratio unverified)" and not x["met"] for x in d["ratios"])
    out = tmp_path / "skip"
    build_report([write(tmp_path / "skip.json", d)], out)
    md = (out / "index.md").read_text()
    label = "correctness check SKIPPED: timings and ratios unverified"
    section = md.split("## Generation benchmark")[1].split("\n## Provenance")[0]
    assert "**Correctness check SKIPPED**" in section
    # every table, figure and heading of the run carries the label
    captions = [cap for cap, _ in md_tables(section)]
    assert len(captions) == 3 and all(label in cap for cap in captions)
    assert all(label in h for h in re.findall(r"^#{3,4} .*$", section, re.M))
    assert all(label in c for c in re.findall(r"!\[([^\]]*)\]", section))
    targets = table(md, "Targets:")
    assert {r["verdict"] for r in targets} == {"met (unverified: correctness check SKIPPED)"}
    assert "Correctness check on the GPU" not in md  # no verdicts to show
    cav = md.split("## What these results show")[1].split("\n## ")[0]
    assert "`skip.json`: the generation benchmark's correctness check was SKIPPED" in cav
    # a failed check: timings shown, ratios not reported, no target judged
    md = _generate_md(tmp_path, make_generate(check="failed"), "failed.json")
    assert "**Correctness check FAILED**: 1 of 12 verdicts failed (`shared:nvfp4-sr` on tiny-qwen3.5)" in md
    steps = table(md, "qwen3.5-4b-shape: ms per decode step")
    fp32 = next(r for r in steps if r["row"] == "fp32")
    assert num(fp32["B=8 ms/step"]) == pytest.approx(8.441, rel=1e-3)
    assert fp32["B=8 ÷ plain"] == "not reported (check failed)"
    assert {r["verdict"] for r in table(md, "Targets:")} == {"not judged: correctness check FAILED"}
    assert "0.03373" not in md
    check_rows = table(md, "Correctness check on the GPU")
    assert [r["policy"] for r in check_rows if r["fast path = decode engine"] == "FAIL"] == ["shared:nvfp4-sr"]


def _generate_bad_cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = make_generate()
    raw = json.dumps(good)
    (tmp / "trunc.json").write_text(raw[: len(raw) // 2])
    (tmp / "nan.json").write_text(raw.replace(str(good["rows"][1]["step_ms_median"]), "NaN", 1))
    (tmp / "policy.json").write_text(raw.replace('"split:fp16-sr/nvfp4"', '"split:fp16-sr/nvfp4@L16"'))

    def edit(name, fn):
        d = copy.deepcopy(good)
        fn(d)
        return write(tmp / f"{name}.json", d)

    def ratio(d):
        d["ratios"][1]["ratio"] = 0.5

    def met(d):
        d["ratios"][1]["met"] = False

    def ms(d):   # a timing edited without its ratios
        d["rows"][2]["step_ms_median"] *= 1.01

    return {
        "truncated": (tmp / "trunc.json", "not valid JSON"),
        "nan": (tmp / "nan.json", "non-finite"),
        "schema": (edit("schema", lambda d: d.update(schema="precision-lab.bench_generate/2")),
                   "schema 'precision-lab.bench_generate/2'; this version reads"),
        "missing": (edit("missing", lambda d: d.pop("check")), "missing field 'check'"),
        "extra": (edit("extra", lambda d: d.update(speedup=30.0)), "field(s) 'speedup'"),
        "row field": (edit("rowfield", lambda d: d["rows"][0].pop("prefill_s")), "rows[0]: missing field 'prefill_s'"),
        "type": (edit("type", lambda d: d["rows"][0].update(batch="8")), "rows[0].batch: expected int"),
        "batch": (edit("batch", lambda d: d["rows"][0].update(batch=4)), "rows[0].batch: 4 is not in settings.batches"),
        "twice": (edit("twice", lambda d: d["rows"].append(dict(d["rows"][0]))), "a second row for qwen3.5-4b-shape"),
        "ratio": (edit("ratio", ratio), "ratios[1].ratio: 0.5, but the rows give"),
        "met": (edit("met", met), "ratios[1].met: False, but the rows and the check give True"),
        "timing": (edit("timing", ms), "ratios[1].ratio: 0.99906772056371"),
        "ratios dropped": (edit("dropped", lambda d: d["ratios"].pop()), "ratios: none for"),
        "check": (edit("check", lambda d: d["check"].update(ok=False)), "check.ok: False but the verdicts say True"),
        "no git": (edit("nogit", lambda d: d["provenance"].update(git=None)), "provenance.git: null in a GPU result"),
        "policy": (tmp / "policy.json", "policy 'split:fp16-sr/nvfp4@L16' is not in its short_str() form"),
        "kind": (write(tmp / "kind.json", {"kind": "bench-generate", **{k: v for k, v in good.items() if k != "schema"}}),
                 "without the generation benchmark's schema string"),
    }


@pytest.mark.parametrize("case", ["truncated", "nan", "schema", "missing", "extra", "row field", "type", "batch",
                                  "twice", "ratio", "met", "timing", "ratios dropped", "check", "no git", "policy",
                                  "kind"])
def test_bench_generate_corrupted_file_refused(tmp_path, case):
    path, msg = _generate_bad_cases(tmp_path)[case]
    out = tmp_path / "out"
    with pytest.raises(ResultError, match=re.escape(msg)) as ei:
        build_report([path], out)
    assert str(path) in str(ei.value)
    assert not out.exists()


def test_bench_generate_mixed_and_smoke(tmp_path):
    b1 = write(tmp_path / "b1.json", make_generate(lambda r: r["batch"] == 1))
    b8 = write(tmp_path / "b8.json", make_generate(lambda r: r["batch"] == 8))
    # two runs of the same setup holding other rows: both render
    build_report([b1, b8], tmp_path / "r")
    assert (tmp_path / "r/index.md").read_text().count("### Generation: qwen3.5-4b-shape") == 2
    # both holding the same preset, batch and row: the report would have to pick one
    with pytest.raises(ResultError, match=r"two 'bench-generate' results for row 'plain transformers' \(qwen3.5-4b-shape, batch 1\)"):
        build_report([b1, write(tmp_path / "all.json", make_generate())], tmp_path / "o")
    # a run without a GPU (the interpreter): its timings are not measurements
    smoke = make_generate()
    smoke["provenance"]["device"].update(gpu=None, gpu_count=0, cuda=None, triton_interpret=True)
    with pytest.raises(ResultError, match="smoke run"):
        build_report([write(tmp_path / "smoke.json", smoke)], tmp_path / "o")
