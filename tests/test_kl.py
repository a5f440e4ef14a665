"""The KL-vs-length driver: KL arithmetic, buckets, resume, corrupted/foreign files, data parallel
merge, and clear errors."""
import json
import math

import numpy as np
import pytest
import torch
from precision_lab.evals.kl import (
    KLConfig,
    ResultFileError,
    format_table,
    kl_from_logits,
    linear_buckets,
    log2_buckets,
    run_kl,
)


def test_kl_from_logits_matches_definition():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 5, 7, generator=g)
    logits[1] = logits[0]                                   # identical run -> KL exactly 0, full agreement
    r = kl_from_logits(logits, torch.randint(0, 7, (2, 4), generator=g))
    assert r["kl"].dtype == torch.float64 and r["kl"].shape == (2, 2, 5)
    assert torch.all(r["kl"][0] == 0) and bool(r["agree"][0].all())
    # an independent computation, in plain Python floats, for one position
    p = [math.exp(x) for x in logits[0, 1, 3].tolist()]
    q = [math.exp(x) for x in logits[2, 1, 3].tolist()]
    sp, sq = sum(p), sum(q)
    expect = sum((a / sp) * math.log((a / sp) / (b / sq)) for a, b in zip(p, q))
    assert abs(r["kl"][1, 1, 3].item() - expect) < 1e-12
    assert r["nll"].shape == (3, 2, 4)                       # the last position has no next token


def test_buckets():
    assert log2_buckets(10) == [(1, 2), (2, 4), (4, 8), (8, 11)]
    assert linear_buckets(10, 4) == [(1, 3), (3, 6), (6, 8), (8, 11)]
    assert sum(b - a for a, b in linear_buckets(1000, 8)) == 1000


def _cfg(tmp_path, name, **kw):
    base = dict(model="tiny-qwen3.5", data="default", docs=3, tokens=40, prefill=8, batch_size=1, segment=16,
                policies=("shared:nvfp4", "split:fp32/nvfp4"), out=str(tmp_path / name), progress=False,
                plot=False, device="cpu", engine="scan")
    base.update(kw)
    return KLConfig(**base)


def _results(summary):
    return json.dumps({k: summary[k] for k in ("results", "references", "data", "policies", "engine", "rows")},
                      sort_keys=True)


def test_resume_and_merge_give_the_same_summary(tmp_path):
    full = run_kl(_cfg(tmp_path, "full"))
    assert full["kind"] == "kl" and full["schema_version"] == 2 and full["reference"] == "matched"
    assert full["provenance"]["policies"] == ["shared:nvfp4", "split:fp32/nvfp4"] and "versions" in full["provenance"]
    res = full["results"]["shared:nvfp4"]
    assert set(res["overall"]) >= {"mean", "median", "q90", "q95", "q99", "max", "top1_agreement", "doc_ci95",
                                   "nll", "nll_ref", "floor_mean", "excess", "verdict"}
    assert res["reference"] == "shared:fp32" and full["results"]["split:fp32/nvfp4"]["reference"] == "split:fp32/fp32"
    assert set(full["references"]) == {"shared:fp32", "split:fp32/fp32"}
    assert res["buckets"]["log2"][-1]["hi"] == 32 and res["overall"]["doc_n_docs"] == 3
    assert "implementations" in full["engine"] and full["engine"]["used"] == "scan"
    # interrupted after one batch, then rerun: the same result
    assert run_kl(_cfg(tmp_path, "resumed"), stop_after_batches=1) is None
    assert len(list((tmp_path / "resumed" / "batches").glob("*.npz"))) == 1
    resumed = run_kl(_cfg(tmp_path, "resumed"))
    assert _results(resumed) == _results(full)
    # two data-parallel ranks writing into one directory, merged by rank 0
    assert run_kl(_cfg(tmp_path, "dp"), rank=1, world=2) is None
    merged = run_kl(_cfg(tmp_path, "dp"), rank=0, world=2)
    assert _results(merged) == _results(full)
    assert "mean KL" in format_table(full) and "shared:nvfp4" in format_table(full)


def test_corrupted_and_foreign_files_are_reported_not_overwritten(tmp_path):
    cfg = _cfg(tmp_path, "run", docs=2)
    run_kl(cfg)
    batch = tmp_path / "run" / "batches" / "batch_00000.npz"
    raw = batch.read_bytes()
    batch.write_bytes(raw[: len(raw) // 2])                  # truncated by a crash
    with pytest.raises(ResultFileError, match="corrupted"):
        run_kl(cfg)
    assert len(batch.read_bytes()) == len(raw) // 2          # untouched
    batch.write_bytes(raw)
    # same directory, other settings: refused, nothing overwritten
    run_json = (tmp_path / "run" / "run.json").read_text()
    with pytest.raises(ResultFileError, match="different run"):
        run_kl(_cfg(tmp_path, "run", docs=2, seed=9))
    assert (tmp_path / "run" / "run.json").read_text() == run_json
    # a batch file from another run copied in
    other = _cfg(tmp_path, "other", docs=2, seed=9)
    run_kl(other)
    (tmp_path / "run" / "batches" / "batch_00001.npz").write_bytes(
        (tmp_path / "other" / "batches" / "batch_00001.npz").read_bytes())
    with pytest.raises(ResultFileError, match="another run"):
        run_kl(cfg)


def test_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="0 of 4 documents with >= 100000 tokens"):
        run_kl(_cfg(tmp_path, "short", tokens=100000))
    with pytest.raises(ValueError, match="unknown model"):
        run_kl(_cfg(tmp_path, "m", model="tiny-nonesuch"))
    with pytest.raises(ValueError, match="unknown mode"):
        run_kl(_cfg(tmp_path, "p", policies=("sharded:nvfp4",)))
    with pytest.raises(ValueError, match="no policy"):
        run_kl(_cfg(tmp_path, "p2", policies=("fp32",)))

    # out of memory: the message says what to change
    import precision_lab.teacher_forced as eng

    real = eng._body

    def oom_body(model):
        body = real(model)

        def boom(input_ids=None, cache=None, **k):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        body.forward = boom
        return body
    monkeypatch.setattr(eng, "_body", oom_body)
    with pytest.raises(RuntimeError, match="smaller --segment"):
        run_kl(_cfg(tmp_path, "oom"))


def test_cli_kl_small(tmp_path, capsys):
    from precision_lab.cli import main

    rc = main(["kl", "--model", "tiny-mamba2", "--docs", "2", "--tokens", "40", "--prefill", "4",
               "--policies", "shared:nvfp4", "--out", str(tmp_path / "cli"), "--no-progress", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "shared:nvfp4" in out and (tmp_path / "cli" / "kl_vs_length.png").stat().st_size > 1000
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    kl = np.array([b["mean"] for b in summary["results"]["shared:nvfp4"]["buckets"]["log2"]])
    assert np.all(np.isfinite(kl)) and kl.max() > 0
    assert main(["kl", "--model", "nope/none", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "cannot load model 'nope/none'" in capsys.readouterr().err


def test_default_batches_checkpoint_long_runs_document_by_document():
    from precision_lab.evals.kl import DEFAULT_BATCH_TOKENS

    assert KLConfig(docs=4, tokens=1024).normalized().batch_size == DEFAULT_BATCH_TOKENS // 1024
    assert KLConfig(docs=8, tokens=131072).normalized().batch_size == 1
    assert KLConfig(docs=3, tokens=40).normalized().batch_size == 3           # never more than the documents
    assert KLConfig(docs=5, tokens=40, batch_size=0).normalized().batch_size == 5   # 0: all in one batch
    with pytest.raises(ValueError, match="batch-size"):
        KLConfig(batch_size=-1).normalized()


def test_cli_default_folder_per_setting_and_resume_says_what_it_found(tmp_path, monkeypatch, capsys):
    import precision_lab.evals.kl as klmod

    from precision_lab.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(klmod, "DEFAULT_BATCH_TOKENS", 40)                    # one document per batch here
    args = ["kl", "--model", "tiny-mamba2", "--docs", "2", "--tokens", "40", "--prefill", "4", "--policies",
            "shared:nvfp4", "--no-progress", "--no-plot", "--device", "cpu"]
    assert main(args) == 0
    (out,) = (tmp_path / "runs" / "kl").iterdir()
    assert out.name.startswith("tiny-mamba2-") and str(out.relative_to(tmp_path)) in capsys.readouterr().out
    first = json.loads((out / "summary.json").read_text())
    # interrupted after its first batch: the same command resumes in the same folder and says so
    (out / "batches" / "batch_00001.npz").unlink()
    (out / "summary.json").unlink()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert (f"kl: resuming {out.relative_to(tmp_path)}: 1 of 2 batches already complete (batch 0: 1 document), "
            "1 to compute") in printed
    assert _results(json.loads((out / "summary.json").read_text())) == _results(first)
    # other settings: their own folder, not a refusal
    assert main([*args, "--seed", "1"]) == 0
    assert len(list((tmp_path / "runs" / "kl").iterdir())) == 2
    # the same policy spelled differently is the same run
    assert main([*args[:-5], "shared:nvfp4@L16", *args[-4:]]) == 0
    assert "resuming" in capsys.readouterr().out and len(list((tmp_path / "runs" / "kl").iterdir())) == 2
