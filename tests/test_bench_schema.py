"""The benchmark result classes (precision_lab.bench.schema): the committed result files load
through them with every number as written, the reader refuses what does not fit its class, and a
GPU run cannot record a result without a commit."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from precision_lab.bench import schema
from precision_lab.bench.schema import SchemaError, encode, load

ROOT = Path(__file__).resolve().parent.parent
# bench_generate*.json have their own schema (precision_lab/bench/generate_schema.py), tested in test_bench_generate.py
COMMITTED = sorted(p for p in (ROOT / "reports" / "bench").glob("*.json") if not p.name.startswith("bench_generate")) + \
    sorted((ROOT / "reports" / "first-study" / "data").glob("*-bench-*.json"))
COMMITTED_V1 = [p for p in COMMITTED if json.loads(p.read_text()).get("schema_version") == 1]
COMMITTED_V2 = [p for p in COMMITTED if json.loads(p.read_text()).get("schema_version") == 2]


def same(raw, obj, where="", rename=None):
    """Every value of the parsed JSON ``raw`` equals the one at the same place of ``obj`` (a result
    class, dict or list), with the same type: numbers as written, not merely close. ``rename``: JSON
    key -> field name where the class names a field differently."""
    rename = rename or {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            name = rename.get(k, k)
            if dataclasses.is_dataclass(obj):
                got = getattr(obj, name)
            else:
                got = obj[int(k)] if int in {type(x) for x in obj} else obj[name]
            same(v, got, f"{where}.{k}", rename)
    elif isinstance(raw, list):
        assert len(raw) == len(obj), where
        for i, (a, b) in enumerate(zip(raw, obj)):
            same(a, b, f"{where}[{i}]", rename)
    else:
        assert raw == obj and type(raw) is type(obj), f"{where}: {raw!r} != {obj!r}"


def _kernels(raw, res):
    same(raw["rows"], res.rows)
    same(raw["correctness"], res.correctness)
    same(raw["ceiling"], res.ceiling)
    same(raw["summary"], res.summary)
    assert res.provenance.device.gpu == raw["provenance"]["device"] and res.provenance.git == raw["provenance"]["git"]
    assert [p.command for p in res.provenance.merged_from] == [p["command"] for p in raw["provenance"]["merged_from"]]
    assert res.peers == {"flash-linear-attention": None}  # fla rows, version not recorded in version 1


def _quant(raw, res):
    same(raw["kernels"], res.kernels, rename={"gbps": "GBps"})
    same(raw["target"], res.target)
    same(raw["torch_reference_nvfp4"], res.torch_reference_nvfp4)
    for k in ("state_bytes", "n_elements", "n_matrices", "bytes_model"):
        same(raw[k], getattr(res, k))
    for k in ("shape", "dtype", "timing", "implementation", "sr_seed"):
        same(raw["provenance"][k], getattr(res, k))
    assert (res.ceiling.GBps, res.ceiling.bytes) == (raw["copy"]["gbps"], raw["copy"]["bytes"])
    assert res.ceiling.us == pytest.approx(raw["copy"]["median_ms"] * 1e3, rel=1e-12)
    assert res.provenance.device.gpu == raw["provenance"]["gpu_name"]


def _scan(raw, res):
    same(raw["timings"], res.rows)
    same(raw["checks"], res.checks)
    assert res.T == raw["shapes"]["T"]
    for arch, layer in res.layers.items():
        assert {"model": layer.model, **layer.dims} == raw["shapes"][arch]
    assert (res.ceiling.GBps, res.ceiling.bytes) == (raw["copy_ceiling"]["GBps"], raw["copy_ceiling"]["bytes"])
    assert res.provenance.seconds == raw["elapsed_s"]


def _kl(raw, res):
    same(raw["side_by_side"], res.side_by_side)
    same(raw["long_run"], res.long_run)
    for k in ("model", "policies", "engine", "build_seconds", "model_params"):
        same(raw[k], getattr(res, k))
    assert res.provenance.settings == raw["provenance"]["settings"] and res.ceiling is None


@pytest.mark.parametrize("path", COMMITTED_V1, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_version_1_results_load_with_their_numbers(path):
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1  # written before the classes: read by the explicit version-1 reader
    res = load(raw)
    {"bench-kernels": _kernels, "bench-quant": _quant, "bench-scan": _scan, "bench-kl": _kl}[raw["kind"]](raw, res)
    assert res.provenance.created == raw["provenance"]["created"]
    # the current-version form of it is plain JSON and reads back to the same object
    text = json.dumps(encode(res), allow_nan=False)
    body = {k: v for k, v in json.loads(text).items() if k not in ("kind", "schema_version")}
    assert schema._decode(type(res), body, "") == res


@pytest.mark.parametrize("path", COMMITTED_V2, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_version_2_results_load_and_name_their_commit(path):
    """Files written by the current classes read back to the same JSON and record the commit they ran."""
    raw = json.loads(path.read_text())
    res = load(raw)
    assert res.provenance.git and not res.provenance.smoke
    assert json.loads(json.dumps(encode(res), allow_nan=False)) == json.loads(json.dumps(raw, allow_nan=False))


def test_every_committed_benchmark_file_is_covered():
    assert set(COMMITTED) == set(COMMITTED_V1) | set(COMMITTED_V2)  # no file of another version
    kinds = {json.loads(p.read_text())["kind"] for p in COMMITTED}
    assert kinds == set(schema.RESULT_CLASSES)


def test_reader_refuses_what_does_not_fit():
    row = dict(op="gdn", kernel="flush", tag="batch", batch=256, us=1.0)
    assert schema._decode(schema.KernelRow, row, "rows[0]") == schema.KernelRow(**row)
    for bad, msg in ((dict(row, us=True), "rows[0].us: expected float, got bool"),
                     (dict(row, batch=2.0), "rows[0].batch: expected int, got float"),
                     (dict(row, speed=3), "field(s) 'speed' that KernelRow does not have"),
                     ({k: v for k, v in row.items() if k != "tag"}, "missing field 'tag'")):
        with pytest.raises(SchemaError, match=re.escape(msg)):
            schema._decode(schema.KernelRow, bad, "rows[0]")
    with pytest.raises(SchemaError, match="key 'x' is not an integer"):
        schema._decode(dict[int, float], {"x": 1.0}, "batch")
    assert schema._decode(dict[int, float], {"16": 1.5}, "batch") == {16: 1.5}
    with pytest.raises(SchemaError, match="non-finite"):
        encode(dataclasses.replace(_quant_result(), ceiling=None, state_bytes=math.nan))
    with pytest.raises(SchemaError, match="not a benchmark kind"):
        load({"kind": "kl", "schema_version": 2})


def _quant_result():
    prov = schema.Provenance(created="now", command=None, git=None, versions={}, device=schema.Device(), smoke=True)
    return schema.QuantKernelsResult(
        provenance=prov, ceiling=None, peers={}, shape=[1, 16], dtype="float32", timing="t", implementation="i",
        sr_seed=0, state_bytes=64, n_elements=16, n_matrices=1, kernels={}, torch_reference_nvfp4=None,
        target=schema.QuantTarget(kernel="nvfp4 quantize", fraction_of_copy=0.8, achieved_fraction=None, met=False),
        bytes_model={})


def test_a_gpu_run_records_its_commit(monkeypatch):
    import precision_lab.provenance as prov

    monkeypatch.setattr(prov, "git_hash", lambda: None)
    with pytest.raises(RuntimeError, match="PRECISION_LAB_GIT"):
        schema.run_provenance(smoke=False)
    assert schema.run_provenance(smoke=True).git is None  # a smoke run's timings are not results anyway
    gpu = dataclasses.replace(_quant_result(), provenance=dataclasses.replace(_quant_result().provenance, smoke=False))
    with pytest.raises(SchemaError, match="provenance.git: null in a GPU result"):
        schema.to_json(gpu)
    monkeypatch.setattr(prov, "git_hash", lambda: "0123abc")
    p = schema.run_provenance(smoke=False, settings={"T": 4})
    assert p.git == "0123abc" and p.settings == {"T": 4} and not p.smoke


def test_scan_benchmark_writes_what_the_report_reads(tmp_path):
    """The scan benchmark's smoke run (interpreter, tiny shapes) writes a bench-scan result of the
    current version: checks against the references, rows without timings, no ceiling."""
    from precision_lab.bench import scan_kernels

    rc = scan_kernels.run(smoke=True, batches=(1,), policies=("shared:nvfp4-sr", "conventional:bf16"),
                          out_dir=tmp_path)
    raw = json.loads((tmp_path / "bench_scan_smoke.json").read_text())
    res = load(raw)
    assert rc == 0 and raw["schema_version"] == 2 and res.provenance.smoke and res.ceiling is None
    assert [(c.arch, c.policy, c.ok) for c in res.checks] == [
        (a, p, True) for a in ("gdn", "mamba2") for p in ("shared:nvfp4-sr", "conventional:bf16")]
    assert [(x.arch, x.kernel, x.ms) for x in res.rows] == [
        (a, k, None) for a in ("gdn", "mamba2") for k in ("replay", "recurrent")]
    assert res.provenance.settings["policies"] == ["shared:nvfp4-sr", "conventional:bf16"]


def test_every_file_under_reports_bench_is_named_in_its_readme():
    """A committed result nobody points to is dead weight: reports/bench/README.md names each file."""
    readme = (ROOT / "reports" / "bench" / "README.md").read_text()
    unnamed = [p.name for p in (ROOT / "reports" / "bench").iterdir() if p.name != "README.md" and p.name not in readme]
    assert not unnamed, f"files under reports/bench/ that its README does not name: {unnamed}"
