"""The generation benchmark's CPU side: ratios only from rows of one run, none counted as met unless
the GPU check passed, the committed result file in its schema, and what the writer refuses."""
import json
from pathlib import Path

import pytest

from precision_lab.bench.generate import PLAIN, SCHEMA, Row, ratios, table
from precision_lab.bench.generate_schema import load, to_json
from precision_lab.bench.schema import SchemaError

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "reports" / "bench" / "bench_generate.json"


def _row(row, ms, batch=8):
    return Row("qwen3.5-4b-shape", batch, row, ms, ms, 10, 0.5, batch / ms)


def test_ratios_against_fp32_and_plain_transformers():
    rows = [_row(PLAIN, 100.0), _row("fp32", 10.0), _row("shared:nvfp4-sr", 11.0), _row("split:fp16-sr/nvfp4", 12.0)]
    r = {(x["row"], x["over"]): x for x in ratios(rows, check_ok=True)}
    assert r[("shared:nvfp4-sr", "fp32")]["ratio"] == 1.1 and r[("shared:nvfp4-sr", "fp32")]["met"]
    assert not r[("split:fp16-sr/nvfp4", "fp32")]["met"]  # 1.2 > 1.15
    assert r[("fp32", PLAIN)]["ratio"] == 0.1 and r[("fp32", PLAIN)]["met"]
    assert {x["check"] for x in r.values()} == {"passed"}
    failed = ratios(rows, check_ok=False)
    assert not any(x["met"] for x in failed) and all(x["check"].startswith("FAILED") for x in failed)
    # a run that skipped its check says so (not "FAILED"), and counts nothing as met either
    skipped = ratios(rows, check_ok=False, skipped=True)
    assert not any(x["met"] for x in skipped) and {x["check"] for x in skipped} == {"SKIPPED (ratio unverified)"}


def test_a_failed_row_has_no_times_and_no_ratio():
    fail = Row("qwen3.5-4b-shape", 8, "shared:nvfp4-sr", None, None, 0, None, None, error="RuntimeError: boom")
    rows = [_row(PLAIN, 100.0), _row("fp32", 10.0), fail]
    assert [(x["row"], x["over"]) for x in ratios(rows, check_ok=True)] == [("fp32", PLAIN)]
    assert "| qwen3.5-4b-shape | 8 | shared:nvfp4-sr | — |" in table({"rows": [_asdict(fail)]})


def _asdict(row):
    from dataclasses import asdict

    return asdict(row)


def test_committed_result_file():
    d = json.loads(COMMITTED.read_text())
    assert d["schema"] == SCHEMA and d["check"]["ok"] is True and d["provenance"]["git"]
    assert d["provenance"]["device"]["gpu"] == "NVIDIA H200"
    for preset in d["check"]["presets"].values():
        assert all(v["ok"] and v["graphs"]["disabled_reason"] is None for v in preset.values())
    assert all(r["graphs"]["captured"] >= 1 for r in d["rows"] if r["row"] != PLAIN)
    assert "| qwen3.5-4b-shape | 8 | fp32 |" in table(d)
    # read through its classes, with every ratio following from its rows
    t = load(d)
    assert t.check.status == "passed" and len(t.rows) == 14 and len(t.ratios) == 12
    assert load(to_json(t)) == t


@pytest.mark.parametrize("name,rows", [("bench_generate_nemotron.json", 14), ("bench_generate_b64.json", 7)])
def test_later_committed_runs_load_with_their_check(name, rows):
    """The runs that added nemotron-3-nano-4b-shape (batches 1 and 8) and batch 64 of qwen3.5-4b-shape:
    each passed its GPU check first, captured graphs for every policy row, and no two files time the
    same (preset, batch, row)."""
    t = load(json.loads((COMMITTED.parent / name).read_text()))
    assert t.check.status == "passed" and t.provenance.git and len(t.rows) == rows
    assert all(r.graphs.captured >= 1 for r in t.rows if r.row != PLAIN)
    keys = [(r.preset, r.batch, r.row) for f in ("bench_generate.json", "bench_generate_nemotron.json",
                                                  "bench_generate_b64.json")
            for r in load(json.loads((COMMITTED.parent / f).read_text())).rows]
    assert len(keys) == len(set(keys))


def test_the_writer_writes_only_what_the_report_reads():
    d = json.loads(COMMITTED.read_text())
    d["rows"][1]["step_ms_median"] = float("nan")
    with pytest.raises(SchemaError, match="non-finite"):
        to_json(d)
    d = json.loads(COMMITTED.read_text())
    d["check"] = {"ok": True, "skipped": True}
    with pytest.raises(SchemaError, match="check: marked skipped but holds ok: true"):
        to_json(d)
