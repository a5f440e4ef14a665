"""The generation benchmark's CPU side: ratios only from rows of one run, none counted as met when
the GPU check failed, and the committed result file in its schema."""
import json
from pathlib import Path

from precision_lab.bench.generate import PLAIN, SCHEMA, Row, ratios, table

ROOT = Path(__file__).resolve().parent.parent


def _row(row, ms, batch=8):
    return Row("qwen3.5-4b-shape", batch, row, ms, ms, 10, 0.5, batch / ms)


def test_ratios_against_fp32_and_plain_transformers():
    rows = [_row(PLAIN, 100.0), _row("fp32", 10.0), _row("shared:nvfp4-sr", 11.0), _row("split:fp16-sr/nvfp4", 12.0)]
    r = {(x["row"], x["over"]): x for x in ratios(rows, check_ok=True)}
    assert r[("shared:nvfp4-sr", "fp32")]["ratio"] == 1.1 and r[("shared:nvfp4-sr", "fp32")]["met"]
    assert not r[("split:fp16-sr/nvfp4", "fp32")]["met"]  # 1.2 > 1.15
    assert r[("fp32", PLAIN)]["ratio"] == 0.1 and r[("fp32", PLAIN)]["met"]
    failed = ratios(rows, check_ok=False)
    assert not any(x["met"] for x in failed) and all(x["check"].startswith("FAILED") for x in failed)


def test_committed_result_file():
    d = json.loads((ROOT / "reports" / "bench" / "bench_generate.json").read_text())
    assert d["schema"] == SCHEMA and d["check"]["ok"] is True and d["provenance"]["git"]
    assert d["provenance"]["device"]["gpu"] == "NVIDIA H200"
    for preset in d["check"]["presets"].values():
        assert all(v["ok"] and v["graphs"]["disabled_reason"] is None for v in preset.values())
    assert all(r["graphs"]["captured"] >= 1 for r in d["rows"] if r["row"] != PLAIN)
    assert "| qwen3.5-4b-shape | 8 | fp32 |" in table(d)
