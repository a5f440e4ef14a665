"""The study pipeline: the next-speaker task generator on a small hand-written play, per-bucket paired
statistics against hand-computed values, the lm-eval runner's bucket and matched-reference
comparisons, and the whole study end to end on a tiny preset (CPU, quick sizes) into a report."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from precision_lab.evals import stats as st
from precision_lab.evals.study import (
    STUDY_POLICIES,
    StudyConfig,
    kl_policies,
    model_stem,
    run_study,
    task_policies,
)
from precision_lab.evals.tasks import next_speaker as ns

# A play in the modern layout (tag on its own line after a blank line) with stage directions and a
# cast list that must not count as speeches, and one in the Folio layout (indented inline tags).
MODERN = """THE TRAGEDY OF A TEST

PERSONS REPRESENTED.

Claudius, King.
A Priest.

ACT I.

SCENE I. A platform.

[Enter Horatio and Marcellus.]

Hor.
Who is there?

Mar.
A friend to this ground.

Hor.
Stand and unfold yourself.

Exit.

Mar.
Long live the king!

First Clown.
Is she to be buried?

Hor.
Peace, break thee off.

First Clown.
I will.

First Clown.
Good night.
"""

FOLIO = """Actus Primus. Scoena Prima.

Enter Barnardo and Francisco.

  Barnardo. Who's there?
  Fran. Nay answer me: Stand & vnfold
your selfe

   Bar. Long liue the King

   Fran. Barnardo?
  Bar. He

   Fran. You come most carefully vpon your houre

   Bar. 'Tis now strook twelue
  Fran. For this releefe much thankes
"""


def test_speaker_turns_in_both_layouts():
    turns = ns.speaker_turns(MODERN)
    assert [t.name for t in turns] == ["Hor", "Hor", "First Clown", "Hor", "First Clown", "First Clown"]
    # "Mar" opens only two speeches (< min_turns = 3); "Exit", "ACT I", cast lines are not speakers
    for t in turns:
        assert MODERN[t.offset:t.offset + len(t.name) + 2] == t.name + ".\n" and MODERN[t.offset - 2:t.offset] == "\n\n"
    assert [t.name for t in ns.speaker_turns(MODERN, min_turns=2)].count("Mar") == 2
    folio = ns.speaker_turns(FOLIO)
    assert [t.name for t in folio] == ["Fran", "Bar", "Fran", "Bar", "Fran", "Bar", "Fran"]
    assert all(t.layout == "inline" and FOLIO[t.offset - 1] == " " for t in folio)


def test_items_buckets_and_task_files(tmp_path):
    plays = [("modern", MODERN), ("folio", FOLIO)]
    items = ns.make_items(plays, buckets=(64, 256), per_bucket=2, seed=3)
    for it in items:
        text = dict(plays)[it["play"]]
        assert text.startswith(it["context"]) and text[len(it["context"]):].startswith(it["name"] + ".")
        assert it["context_bytes"] == len(it["context"].encode())
        lo = int(it["bucket"].split("-")[0].rstrip("+"))
        hi = int(it["bucket"].split("-")[1]) if "-" in it["bucket"] else 1 << 62
        assert lo <= it["context_bytes"] <= hi
    per = {}
    for it in items:
        per.setdefault((it["play"], it["bucket"]), []).append(it)
    assert all(len(v) <= 2 for v in per.values()) and {b for _, b in per} == {"64-255", "256+"}
    assert items == ns.make_items(plays, buckets=(64, 256), per_bucket=2, seed=3)  # deterministic
    yaml = ns.write_task(tmp_path / "task", items)
    rows = [json.loads(x) for x in (tmp_path / "task" / f"{ns.TASK_NAME}.jsonl").read_text().splitlines()]
    assert rows == items
    text = yaml.read_text()
    assert f"task: {ns.TASK_NAME}" in text and "output_type: generate_until" in text and "exact_match" in text
    import yaml as pyyaml

    cfg = pyyaml.safe_load(text)
    assert cfg["generation_kwargs"]["until"] == [".", "\n"] and cfg["doc_to_target"] == "{{name}}"
    assert re.fullmatch(cfg["filter_list"][0]["filter"][0]["regex_pattern"], "  Hor  ").group(1) == "Hor"
    with pytest.raises(ValueError, match="no speaker tags"):
        ns.make_items([("prose", "Once upon a time there was no play at all.\n")])


def test_compare_by_bucket_hand_computed():
    buckets = ["256-1023"] * 4 + ["64-255"] * 3 + ["1024+"] * 3
    base = [1, 1, 1, 0, 1, 0, 1, 1, 1, 1]
    var = [0, 0, 1, 1, 1, 0, 1, 1, 1, 0]
    out = st.compare_by_bucket(buckets, base, var, n_boot=500)
    assert [b["bucket"] for b in out] == ["64-255", "256-1023", "1024+"]          # numeric order
    first, second, third = out
    assert (second["n"], second["accuracy"], second["baseline_accuracy"]) == (4, 0.5, 0.75)
    assert (second["mcnemar"]["b"], second["mcnemar"]["c"]) == (2, 1)
    assert second["mcnemar"]["p_value"] == pytest.approx(1.0)                      # 2·P[Bin(3,½) ≤ 1] = 1
    assert first["delta"]["delta"] == 0 and first["mcnemar"]["n_discordant"] == 0
    assert third["delta"]["delta"] == pytest.approx(-1 / 3) and third["mcnemar"]["b"] == 1
    with pytest.raises(ValueError, match="bucket labels"):
        st.compare_by_bucket(buckets[:-1], base, var)


def test_runner_summary_per_bucket_and_against_the_reference(tmp_path):
    from precision_lab.evals.lmeval_runner import LMEvalConfig, Study

    cfg = LMEvalConfig(model="tiny-qwen3.5", tasks=[ns.TASK_NAME], out=str(tmp_path), n_boot=300,
                       policies=["fp32", "shared:fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"])
    n = 12
    buckets = ["64-255"] * 6 + ["256+"] * 6
    scores = {"fp32": [1] * 12, "shared:fp32": [1] * 11 + [0], "shared:nvfp4-sr": [1] * 6 + [0] * 6,
              "split:fp16-sr/nvfp4": [1] * 12}

    def rec(sc):
        return {"samples": [{"task": ns.TASK_NAME, "doc_id": j, "prompt_hash": f"h{j}", "score": float(sc[j]),
                             "response": str(sc[j]), "filtered": None, "target": "Ham", "gen_tokens": 3,
                             "bucket": buckets[j]} for j in range(n)], "served": {}}

    s = Study(cfg).summarize({ns.TASK_NAME: {p: rec(v) for p, v in scores.items()}})
    e = s["tasks"][ns.TASK_NAME]
    assert [b["accuracy"] for b in e["fp32"]["by_bucket"]] == [1.0, 1.0]
    pe = e["policies"]["shared:nvfp4-sr"]
    assert [(b["bucket"], b["accuracy"], b["mcnemar"]["b"]) for b in pe["by_bucket"]] == [("64-255", 1.0, 0),
                                                                                        ("256+", 0.0, 6)]
    assert pe["by_bucket"][1]["mcnemar"]["p_value"] == pytest.approx(2 / 2**6)
    vs = pe["vs_reference"]
    assert vs["reference"] == "shared:fp32" and vs["mcnemar"]["b"] == 5     # the reference missed item 11
    assert [b["mcnemar"]["b"] for b in vs["by_bucket"]] == [0, 5]
    assert e["policies"]["split:fp16-sr/nvfp4"]["vs_reference"] is None  # its reference was not run
    assert e["policies"]["shared:fp32"]["vs_reference"] is None              # a reference is its own


def test_study_policies():
    cfg = StudyConfig(models=("m",))
    gdn = kl_policies(cfg, {"gdn"})
    mamba = kl_policies(cfg, {"mamba2"})
    assert "split:fp16-sr/nvfp4@fold=buffered" in gdn and "split:fp16-sr/nvfp4@fold=buffered" not in mamba
    assert {"shared:nvfp4-sr@L8", "shared:nvfp4-sr@L32", "split:fp16-sr/nvfp4@L8", "split:fp16-sr/nvfp4@L32"} <= set(gdn)
    assert len(gdn) == len(set(gdn)) == 12
    tp = task_policies(cfg)     # fp32, the study policies, then their matched references
    assert tp == ["fp32", *STUDY_POLICIES, "conventional:fp32", "shared:fp32", "split:fp32/fp32"]
    assert task_policies(StudyConfig(models=("m",), task_references=False)) == ["fp32", *STUDY_POLICIES]
    tp = task_policies(StudyConfig(models=("m",), task_policies=("conventional:bf16", "shared:nvfp4@L8")))
    assert tp == ["fp32", "conventional:bf16", "shared:nvfp4@L8", "conventional:fp32", "shared:fp32@L8"]
    assert model_stem("/ckpts/shakespeare-qwen/") == "shakespeare-qwen" and model_stem("org/Model-1B") == "Model-1B"
    with pytest.raises(ValueError, match="unknown stage"):
        StudyConfig(models=("m",), skip=("kl", "nope"))
    with pytest.raises(ValueError, match="unknown mode"):
        StudyConfig(models=("m",), policies=("sharded:nvfp4",))
    with pytest.raises(ValueError, match="unknown task"):
        StudyConfig(models=("m",), task="poetry")
    with pytest.raises(ValueError, match="prefill or decode"):
        StudyConfig(models=("m",), task_prompt="stream")


def test_quick_study_end_to_end(tmp_path):
    """The whole pipeline on a tiny preset: three result files and study.txt in OUT, nothing else,
    and a report built from them with every section."""
    from precision_lab.report import build_report

    plays = tmp_path / "plays"
    plays.mkdir()
    (plays / "a.txt").write_text(MODERN * 3)
    (plays / "b.txt").write_text(FOLIO * 6)
    out = tmp_path / "out"
    res = run_study(StudyConfig.quick(["tiny-nemotron-h"], data=str(plays), tokens=300, out=str(out),
                                      buckets=(64, 256), tf_buckets=(64, 256), per_bucket=1), log=lambda *a: None)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["kl-layers-tiny-nemotron-h.json", "kl-tiny-nemotron-h.json", "lmeval-tiny-nemotron-h.json",
                     "study.txt"]
    assert len(res["files"]) == 3
    kl = json.loads((out / "kl-tiny-nemotron-h.json").read_text())
    assert kl["kind"] == "kl" and "split:fp16-sr/nvfp4@fold=buffered" not in kl["results"]   # Mamba-2: no fold
    assert kl["data"]["docs"] == 2 and all(r["overall"]["verdict"] for r in kl["results"].values())
    sp = kl["speaker"]
    assert sp["n_items"] > 5 and set(sp["policies"]) == set(kl["policies"])
    assert {b["bucket"] for b in sp["fp32"]["by_bucket"]} >= {"64-255", "256+"}
    lay = json.loads((out / "kl-layers-tiny-nemotron-h.json").read_text())
    assert lay["kind"] == "kl-layers" and len(lay["ssm_layers"]) == 3
    lm = json.loads((out / "lmeval-tiny-nemotron-h.json").read_text())
    e = lm["tasks"]["shakespeare_speaker_choice"]   # the default task: next speaker among K, contexts decoded
    assert set(lm["policies"]) == {"fp32", "shared:fp32", "shared:nvfp4-sr"} and e["policies"]["shared:nvfp4-sr"]["by_bucket"]
    assert lm["provenance"]["config"]["scoring"] == "decode" and "prompt=decode" in lm["provenance"]["config"]["model_args"]
    assert all(b["accuracy_ci"] for b in e["fp32"]["by_bucket"])
    assert "timing (s):" in (out / "study.txt").read_text()
    index = build_report(res["files"], tmp_path / "report")
    md = index.with_name("index.md").read_text()
    for heading in ("## KL divergence vs generated length", "## Per-layer sensitivity", "## Task accuracy (lm-eval)"):
        assert heading in md
    assert "by item bucket" in md and "Buffer-length sweep" in md and "Next-speaker exact match" in md
    assert np.isfinite(kl["results"]["shared:nvfp4-sr"]["overall"]["mean"])


def test_teacher_forced_speaker_items_and_scores():
    """Exact match from the per-position hits: an item is right iff the run's argmax hits every token of
    the name and its period, read at the positions that predict them (t = pos-1 .. pos+n-2)."""
    from precision_lab.evals.kl import build_plan, speaker_items, speaker_summary

    from precision_lab.data import Document
    from precision_lab.models.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    text = MODERN
    ids = tok(text, add_special_tokens=False)["input_ids"]
    doc = Document("modern", text, {}, __import__("torch").tensor(ids))
    items = speaker_items([doc], tok, prefill=2, tokens=len(ids), buckets=(64, 256))
    turns = ns.speaker_turns(text)
    assert [it["name"] for it in items] == [t.name for t in turns]
    for it, t in zip(items, turns):
        assert it["pos"] == len(text[:t.offset].encode()) and it["n"] == len(t.name) + 1
        assert it["bucket"] == ("64-255" if it["pos"] < 256 else "256+")
    plan = build_plan(["shared:nvfp4-sr"])                  # rows: fp32, shared:fp32, shared:nvfp4-sr
    T = len(ids) - 2
    hit = np.ones((3, 1, T), bool)
    first, last = items[0], items[-1]
    hit[2, 0, first["pos"] - 1 - 2] = False                 # the policy misses the first byte of item 0
    hit[1, 0, last["pos"] - 1 - 2 + last["n"] - 1] = False  # the reference misses the period of the last
    hit[2, 0, last["pos"] - 1 - 2 + last["n"]] = False      # one past the span: must not matter
    hit[2, 0, first["pos"] - 2 - 2] = False                 # one before the span: must not matter
    sp = speaker_summary(plan, hit, [doc], tok, prefill=2, buckets=(64, 256))
    e = sp["policies"]["shared:nvfp4-sr"]
    n = len(items)
    assert sp["n_items"] == n and sp["fp32"]["accuracy"] == 1.0
    assert e["accuracy"] == pytest.approx((n - 1) / n) and sp["references"]["shared:fp32"]["accuracy"] == \
        pytest.approx((n - 1) / n)
    assert (e["vs_reference"]["mcnemar"]["b"], e["vs_reference"]["mcnemar"]["c"]) == (1, 1)
    assert (e["vs_fp32"]["mcnemar"]["b"], e["vs_fp32"]["mcnemar"]["c"]) == (1, 0)


def test_model_args_are_typed_as_lm_eval_reads_them():
    from precision_lab.evals.lmeval_runner import _parse_kv

    assert _parse_kv("max_length=4096,dtype=bfloat16,add_bos_token=true,temperature=0.5") == {
        "max_length": 4096, "dtype": "bfloat16", "add_bos_token": True, "temperature": 0.5}


@pytest.mark.parametrize("task", ["speaker-choice", "word-choice", "next-speaker"])
def test_task_stage_writes_each_task(tmp_path, task):
    """The lm-eval stage's task files for every --task: the YAML lm-eval loads and the longest prompt
    plus what follows it (lm-eval's max_length)."""
    from precision_lab.evals.study import TASKS, _write_task

    plays = tmp_path / "plays"
    plays.mkdir()
    (plays / "a.txt").write_text(MODERN * 3)
    (plays / "b.txt").write_text(FOLIO * 6)
    cfg = StudyConfig(models=("m",), data=str(plays), task=task, buckets=(64, 256), per_bucket=2, choices=3,
                      distractors="cast")
    folder = _write_task(cfg, tmp_path / "task", log=lambda *a: None)
    name = TASKS[task][1]
    rows = [json.loads(x) for x in (folder / f"{name}.jsonl").read_text().splitlines()]
    assert rows and f"task: {name}" in (folder / f"{name}.yaml").read_text()
    tail = cfg.max_gen_toks if task == "next-speaker" else max(len(c) for r in rows for c in r["choices"])
    assert int((folder / "max_context_tokens.txt").read_text()) == max(r["context_bytes"] for r in rows) + tail
    if task != "next-speaker":
        assert all(len(r["choices"]) == 3 and r["kind"] == task.removesuffix("-choice") for r in rows)
