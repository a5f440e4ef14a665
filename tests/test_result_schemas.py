"""The simulator and lm-eval result classes (precision_lab.sim_schema, evals/lmeval_schema.py): every
committed file of those kinds loads through them with every number as written, the writers write
through them, and a file in another layout is refused with the field named."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest
from precision_lab.evals import lmeval_schema

from precision_lab import sim_schema
from precision_lab.bench.schema import SchemaError
from precision_lab.report import ResultError, load_result
from tests.test_bench_schema import same

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted(p for p in (ROOT / "reports").rglob("*.json")
                   if (lambda d: isinstance(d, dict) and d.get("kind") in ("sim", "lmeval"))(json.loads(p.read_text())))


def _without_version(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if k not in ("kind", "schema_version")}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT / "reports")))
def test_committed_results_load_with_their_numbers(path):
    raw = json.loads(path.read_text())
    schema = {"sim": sim_schema, "lmeval": lmeval_schema}[raw["kind"]]
    res = schema.load(raw)
    # every value of the file, at the same place of the object, with the same type
    same(_without_version(raw), res)
    # and the JSON the writers produce from it reads back to the same object
    again = schema.load(json.loads(json.dumps(schema.to_json(res), allow_nan=False)))
    assert again == res
    # the report reads the same object
    assert load_result(path).typed == res


def test_every_kind_and_shape_is_committed():
    shapes = {type({"sim": sim_schema, "lmeval": lmeval_schema}[d["kind"]].load(d)).__name__
              for d in (json.loads(p.read_text()) for p in COMMITTED)}
    assert shapes == {"SimResult", "SimEquivalenceResult", "LMEvalResult"}


def _first(kind: str, equivalence: bool = False) -> dict:
    for p in COMMITTED:
        raw = json.loads(p.read_text())
        if raw["kind"] == kind and ("mode" in raw) == equivalence:
            return raw
    raise AssertionError(f"no committed {kind} file")


def _bad_sim_files() -> dict[str, tuple[dict, str]]:
    sim, eq, lm = _first("sim"), _first("sim", equivalence=True), _first("lmeval")
    pol = next(iter(sim["results"]))
    task = next(iter(lm["tasks"]))
    lm_pol = next(iter(lm["tasks"][task]["policies"]))
    cases = {}

    extra = copy.deepcopy(sim)
    extra["results"][pol]["mean_rel_error"] = [0.1]  # an alias of mean_rel_error_last
    cases["sim alias"] = (extra, f"results['{pol}']: field(s) 'mean_rel_error' that PolicyErrors does not have")
    missing = copy.deepcopy(sim)
    del missing["settings"]["avg"]
    cases["sim missing"] = (missing, "settings: missing field 'avg' (SimSettings)")
    wrong = copy.deepcopy(sim)
    wrong["results"][pol]["state_writes"] = "12"
    cases["sim type"] = (wrong, f"results['{pol}'].state_writes: expected int, got str")
    short = copy.deepcopy(sim)
    short["results"][pol]["mean_rel_error_last"].pop()
    cases["sim windows"] = (short, f"results['{pol}'].mean_rel_error_last:")
    first_layout = {"kind": "sim", "schema_version": 1, "provenance": eq["provenance"], "mode": "equivalence",
                    "arch": "mamba2", **eq["results"]["mamba2"]}
    cases["equivalence, one architecture"] = (first_layout, "field(s) 'arch', 'decode', 'speculative'")
    mode = copy.deepcopy(eq)
    mode["mode"] = "error"
    cases["equivalence mode"] = (mode, "mode: 'error'")
    version = dict(sim, schema_version=2)
    cases["sim version"] = (version, "schema_version 2 of 'sim'")

    lm_extra = copy.deepcopy(lm)
    lm_extra["tasks"][task]["policies"][lm_pol]["delta"]["ci95"] = [0.0, 0.1]
    cases["lmeval alias"] = (lm_extra, f"tasks['{task}'].policies['{lm_pol}'].delta: field(s) 'ci95'")
    lm_missing = copy.deepcopy(lm)
    del lm_missing["tasks"][task]["fp32"]["accuracy"]
    cases["lmeval missing"] = (lm_missing, f"tasks['{task}'].fp32: missing field 'accuracy' (Baseline)")
    lm_config = copy.deepcopy(lm)
    lm_config["provenance"]["config"]["n_bootstrap"] = lm_config["provenance"]["config"].pop("n_boot")
    cases["lmeval config"] = (lm_config, "provenance.config: field(s) 'n_bootstrap'")
    return cases


@pytest.mark.parametrize("case", list(_bad_sim_files()))
def test_other_layouts_are_refused_with_the_field_named(tmp_path, case):
    data, msg = _bad_sim_files()[case]
    schema = {"sim": sim_schema, "lmeval": lmeval_schema}[data["kind"]]
    with pytest.raises(SchemaError, match=re.escape(msg)):
        schema.load(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError, match=re.escape(msg)) as ei:
        load_result(path)
    assert str(path) in str(ei.value) and "without the layout this version reads" in str(ei.value)


def test_simulator_writes_through_its_class(tmp_path):
    from precision_lab.sim import SimConfig, equivalence_result, run_sim

    out = run_sim(SimConfig(steps=40, heads=2, rows=4, cols=16, avg=8, bins=6, policies=("fp32", "shared:nvfp4-sr")),
                  log=lambda *a: None)
    res = sim_schema.load(out)
    assert isinstance(res, sim_schema.SimResult) and list(res.results) == ["fp32", "shared:nvfp4-sr"]
    assert res.settings.policies == res.provenance.policies == ["fp32", "shared:nvfp4-sr"]
    assert res.results["shared:nvfp4-sr"].state_writes < res.results["fp32"].state_writes
    eq = sim_schema.load(equivalence_result(("gdn",), log=lambda *a: None, steps=32, rows=4, cols=8, rounds=4))
    assert isinstance(eq, sim_schema.SimEquivalenceResult) and eq.provenance.settings["steps"] == 32
    assert eq.results["gdn"].decode.conventional_state_writes == 32
    # an object that does not fit its class is not written
    bad = dataclasses.replace(res, window_ends=res.window_ends[:-1])
    with pytest.raises(SchemaError, match="window_ends"):
        sim_schema.dump(bad, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_lmeval_settings_are_the_study_config():
    from precision_lab.evals.lmeval_runner import LMEvalConfig

    assert [f.name for f in dataclasses.fields(lmeval_schema.LMEvalSettings)] == \
        [f.name for f in dataclasses.fields(LMEvalConfig)]


def test_lmeval_study_writes_through_its_class(tmp_path):
    from tests.test_report import make_lmeval

    out = make_lmeval(tmp_path)
    res = lmeval_schema.load(out)
    assert list(res.tasks) == ["gpqa", "math_hard"] and res.policies == ["fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"]
    gpqa = res.tasks["gpqa"]
    assert gpqa.n == 12 and len(gpqa.policies["shared:nvfp4-sr"].by_fp32_length_quartile) == 4
    assert gpqa.policies["shared:nvfp4-sr"].baseline_accuracy == gpqa.fp32.accuracy
