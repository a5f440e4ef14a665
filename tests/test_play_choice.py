"""The multiple-choice play task (``evals/tasks/play_choice.py``): items from small hand-written plays
in both tag layouts, the whitespace-prefix argument on lm-eval's own request path, the per-bucket
statistics on known inputs, ``prompt=decode`` against a hand-run decode stream, and a tiny end-to-end
run through ``replayssm`` into the lm-eval schema and the report (offline, CPU)."""
from __future__ import annotations

import json

import pytest
import torch
from precision_lab.evals import lmeval_schema
from precision_lab.evals import stats as st
from precision_lab.evals.tasks import play_choice as pc

from tests.test_study import FOLIO, MODERN

PLAYS = [("modern", MODERN * 3), ("folio", FOLIO * 6)]
MODEL = "tiny-qwen3.5"




def _check_common(items, plays):
    texts = dict(plays)
    for it in items:
        text = texts[it["play"]]
        ctx, choices = it["context"], it["choices"]
        assert text.startswith(ctx) and text[len(ctx):].startswith(choices[it["gold"]])
        assert it["context_bytes"] == len(ctx.encode()) and it["id"] == f"{it['play']}@{len(ctx)}"
        lo = int(it["bucket"].split("-")[0].rstrip("+"))
        hi = int(it["bucket"].split("-")[1]) if "-" in it["bucket"] else 1 << 62
        assert lo <= it["context_bytes"] <= hi
        assert len(set(choices)) == len(choices)
        # the appended character keeps every choice from being a prefix of another
        assert not any(a != b and b.startswith(a) for a in choices for b in choices)
        assert ctx[-1].isspace()


def test_word_items():
    items = pc.make_items(PLAYS, kind="word", k=4, buckets=(64, 512), per_bucket=3, seed=1)
    assert {it["play"] for it in items} == {"modern", "folio"} and {it["bucket"] for it in items} == {"64-511", "512+"}
    _check_common(items, PLAYS)
    for it in items:
        words = [c[:-1] for c in it["choices"]]
        assert len({len(w) for w in words}) == 1 and len({c[-1] for c in it["choices"]}) == 1   # same length, suffix
        assert words[it["gold"]] == it["answer"] and it["answer"].islower() and it["context"].endswith(" ")
        text = dict(PLAYS)[it["play"]]
        assert all(f" {w}" in text for w in words)                        # distractors are words of the play
        if it["gap_bytes"] is not None:                                  # bytes since the word's last occurrence
            back = it["context"].encode()[: it["context_bytes"] - it["gap_bytes"] + len(it["answer"])]
            assert back.endswith((" " + it["answer"]).encode())
    assert items == pc.make_items(PLAYS, kind="word", k=4, buckets=(64, 512), per_bucket=3, seed=1)  # fixed seed
    assert items != pc.make_items(PLAYS, kind="word", k=4, buckets=(64, 512), per_bucket=3, seed=2)
    per = {}
    for it in items:
        per[(it["play"], it["bucket"])] = per.get((it["play"], it["bucket"]), 0) + 1
    assert max(per.values()) <= 3
    assert max(it["context_bytes"] for it in pc.make_items(PLAYS, kind="word", max_context=300)) <= 300


@pytest.mark.parametrize("design", pc.DISTRACTORS)
def test_speaker_items(design):
    items = pc.make_items(PLAYS, kind="speaker", k=3, distractors=design, buckets=(64, 512), per_bucket=4, seed=0)
    _check_common(items, PLAYS)
    texts = dict(PLAYS)
    from precision_lab.evals.tasks.next_speaker import speaker_turns

    for it in items:
        text, name = texts[it["play"]], it["answer"]
        names = [c[:-1] for c in it["choices"]]
        assert all(c.endswith(".") for c in it["choices"]) and names[it["gold"]] == name
        others = [n for j, n in enumerate(names) if j != it["gold"]]
        assert not any(pc.same_character(n, name) for n in others)
        cast = {t.name for t in speaker_turns(text)}
        if design == "other-plays":
            assert it["gap_bytes"] is not None                              # the true name occurs before
            assert f"{name}." in it["context"]
            assert all(n.lower() not in text.lower() for n in others)      # never a name of this play
        elif design == "cast":
            assert set(others) <= cast
        else:
            recent = {t.name for t in speaker_turns(text) if t.offset < len(it["context"])}
            assert set(others) <= recent
    assert pc.same_character("Oth", "Othe") and pc.same_character("KING", "King") and not pc.same_character("Ham", "Hor")


def test_bad_settings_and_no_items():
    with pytest.raises(ValueError, match="unknown item kind"):
        pc.make_items(PLAYS, kind="verse")
    with pytest.raises(ValueError, match="unknown distractors"):
        pc.make_items(PLAYS, kind="speaker", distractors="nobody")
    with pytest.raises(ValueError, match="at least 2"):
        pc.make_items(PLAYS, k=1)
    with pytest.raises(ValueError, match="no speaker items"):
        pc.make_items([("prose", "Once upon a time there was no play at all.\n")], kind="speaker")
    with pytest.raises(ValueError, match="no speaker items"):          # other plays needed for distractors
        pc.make_items(PLAYS[:1], kind="speaker", distractors="other-plays")


def _task_instances(tmp_path, items):
    from lm_eval.tasks import TaskManager

    yaml = pc.write_task(tmp_path / "task", items)
    name = pc.TASK_NAMES[items[0]["kind"]]
    assert yaml.name == f"{name}.yaml"
    task = TaskManager(include_path=[str(tmp_path / "task")], include_defaults=False).load([name])["tasks"][name]
    task.build_all_requests(rank=0, world_size=1)
    return task.instances


@pytest.fixture(scope="module")
def fp32_lm():
    from precision_lab.evals.lmeval_model import ReplaySSMLM

    return ReplaySSMLM(pretrained=MODEL, policy="fp32", scoring="stock", batch_size=4, device="cpu")


def test_lm_eval_requests_and_the_moved_whitespace(tmp_path, fp32_lm):
    """lm-eval asks for (context, choice) exactly as written, then moves the context's trailing
    whitespace into every continuation; with byte tokens that is one shared prefix of every choice."""
    items = pc.make_items(PLAYS, kind="speaker", k=3, distractors="cast", buckets=(64,), per_bucket=2) + \
        pc.make_items(PLAYS, kind="word", k=3, buckets=(64,), per_bucket=2)
    by_kind = {k: [it for it in items if it["kind"] == k] for k in pc.KINDS}
    for kind, its in by_kind.items():
        inst = _task_instances(tmp_path / kind, its)
        assert len(inst) == 3 * len(its)
        for x in inst:
            it = its[x.doc_id]
            ctx, cont = x.arguments
            assert ctx == it["context"] and cont == it["choices"][x.idx]             # no template, no delimiter
            ws = ctx[len(ctx.rstrip()):]
            c_enc, k_enc = fp32_lm._encode_pair(ctx, cont)
            assert ws and c_enc == list(ctx.rstrip().encode()) and k_enc == list((ws + cont).encode())


def test_shared_prefix_leaves_the_choice_unchanged(fp32_lm):
    """log p(ws + choice | context') = log p(ws | context') + log p(choice | context): the moved
    whitespace adds the same number to every choice, so differences and the argmax are those of the
    choices alone (checked against a direct forward of context + choice, nothing moved)."""
    from lm_eval.api.instance import Instance

    model = fp32_lm.model
    items = pc.make_items(PLAYS, kind="word", k=4, buckets=(64, 256), per_bucket=1, max_context=400)
    for it in items:
        reqs = [Instance("loglikelihood", {}, (it["context"], c), j) for j, c in enumerate(it["choices"])]
        moved = [ll for ll, _ in fp32_lm.loglikelihood(reqs, disable_tqdm=True)]
        plain = []
        ctx = list(it["context"].encode())
        for c in it["choices"]:
            ids = torch.tensor([ctx + list(c.encode())])
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            pos = torch.arange(len(ctx) - 1, ids.shape[1] - 1)
            plain.append(float(lp[pos, ids[0, len(ctx):]].sum()))
        shift = [m - p for m, p in zip(moved, plain)]
        assert max(shift) - min(shift) < 1e-3 and max(shift) < 0        # one shared log p(ws | context') < 0
        assert max(range(4), key=moved.__getitem__) == max(range(4), key=plain.__getitem__)


def test_accuracy_intervals_and_bucket_statistics():
    assert st.wilson_interval(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert st.wilson_interval(0, 10)[0] == 0.0 and st.wilson_interval(10, 10)[1] == 1.0
    assert st.wilson_interval(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    ci = st.accuracy_interval([1, 1, 0, 1])
    assert ci["method"] == "wilson" and (ci["low"], ci["high"]) == pytest.approx(st.wilson_interval(3, 4))
    frac = st.accuracy_interval([0.5, 1.0, 0.25, 0.75], n_boot=2000)
    assert frac["method"] == "bootstrap" and 0.25 <= frac["low"] < 0.625 < frac["high"] <= 1.0
    with pytest.raises(ValueError):
        st.wilson_interval(3, 2)
    # McNemar on a known table: 5 items only the baseline got right, none the other way
    m = st.mcnemar_exact([1] * 5 + [0] * 5 + [1] * 3, [0] * 5 + [0] * 5 + [1] * 3)
    assert (m["b"], m["c"], m["p_value"]) == (5, 0, pytest.approx(2 / 2**5))
    out = st.compare_by_bucket(["a"] * 6 + ["b"] * 4, [1, 1, 1, 1, 0, 0, 1, 0, 1, 0], [1, 0, 0, 1, 0, 1, 1, 0, 1, 0],
                               n_boot=500)
    a, b = out
    assert (a["accuracy"], a["baseline_accuracy"], a["mcnemar"]["b"], a["mcnemar"]["c"]) == (0.5, 4 / 6, 2, 1)
    assert a["accuracy_ci"]["low"] == pytest.approx(st.wilson_interval(3, 6)[0])
    assert b["delta"]["delta"] == 0 and b["mcnemar"]["p_value"] == 1.0


def test_prompt_decode_is_a_decode_stream():
    """``prompt=decode`` scores a continuation after the context ran as decode steps: the same numbers
    as a stream fed one token per step from its first token, and other numbers than a prefill under
    a lossy policy (with fp32 both ways agree)."""
    from lm_eval.api.instance import Instance
    from precision_lab.evals.lmeval_model import ReplaySSMLM, prompt_seq_id

    from precision_lab.models import apply_policy, load_model, new_stream

    pairs = [(MODERN[:150], "Mar."), (MODERN[:150], "Hor."), (FOLIO[:120], " Fran.")]
    reqs = [Instance("loglikelihood", {}, p, j) for j, p in enumerate(pairs)]
    pol = "split:fp32/nvfp4"
    got = {}
    for prompt in ("prefill", "decode"):
        for fast in ("false", "true"):
            lm = ReplaySSMLM(pretrained=MODEL, policy=pol, scoring="decode", prompt=prompt, fast_decode=fast,
                             batch_size=4, device="cpu")
            got[prompt, fast] = [ll for ll, _ in lm.loglikelihood(reqs, disable_tqdm=True)]
    model, tok = load_model(MODEL)
    apply_policy(model, pol, engine="auto", seed=0)
    want = []
    for ctx, cont in pairs:
        c, k = tok(ctx.rstrip())["input_ids"], tok(ctx[len(ctx.rstrip()):] + cont)["input_ids"]
        cache = new_stream(model, seq_ids=torch.tensor([prompt_seq_id(c)]), first_is_prefill=False)
        with torch.no_grad():
            for t in c:
                last = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1]
            logits = [last]
            for t in k[:-1]:
                logits.append(model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1])
        logp = torch.log_softmax(torch.stack(logits).float(), -1)
        want.append(float(logp[torch.arange(len(k)), torch.tensor(k)].sum()))
    for fast in ("false", "true"):
        assert got["decode", fast] == pytest.approx(want, abs=2e-3)
        assert got["decode", fast] == pytest.approx(got["decode", "false"], abs=1e-4)
    assert max(abs(a - b) for a, b in zip(got["prefill", "false"], want)) > 1e-2
    fp = {p: [ll for ll, _ in ReplaySSMLM(pretrained=MODEL, policy="fp32", scoring="decode", prompt=p, batch_size=4,
                                          device="cpu").loglikelihood(reqs, disable_tqdm=True)]
          for p in ("prefill", "decode")}
    assert fp["decode"] == pytest.approx(fp["prefill"], abs=1e-3)


def test_prompt_decode_settings_are_checked():
    from lm_eval.api.instance import Instance
    from precision_lab.evals.lmeval_model import ReplaySSMLM

    with pytest.raises(ValueError, match="prompt must be"):
        ReplaySSMLM(pretrained=MODEL, prompt="stream", device="cpu")
    lm = ReplaySSMLM(pretrained=MODEL, policy="fp32", scoring="stock", prompt="decode", device="cpu")
    with pytest.raises(ValueError, match="needs scoring=decode"):
        lm.loglikelihood([Instance("loglikelihood", {}, ("Hello", " world"), 0)], disable_tqdm=True)
    lm = ReplaySSMLM(pretrained=MODEL, policy="fp32", scoring="decode", prompt="decode", batch_size=4, device="cpu")
    reqs = [("ab", "c"), ("abcdef", "g"), ("ab", "d")]
    batches = lm._score_batches([((a, b), list(a.encode()), list(b.encode())) for a, b in reqs], [1, 0, 2], 4)
    assert batches == [[1], [0, 2]]                                   # one context per batch: never padded


def test_end_to_end_through_replayssm(tmp_path):
    """Items -> lm-eval -> replayssm (decode scoring, prompt=decode) for fp32 and a lossy policy: the
    per-item log keeps every choice's log-likelihood, the summary goes through the schema with a
    per-bucket paired table, and the report shows it."""
    from precision_lab.evals.lmeval_runner import LMEvalConfig, run_study

    from precision_lab.report import build_report

    items = pc.make_items(PLAYS, kind="word", k=3, buckets=(64, 160), per_bucket=1, max_context=260)
    yaml = pc.write_task(tmp_path / "task", items)
    name = pc.TASK_NAMES["word"]
    cfg = LMEvalConfig(model=MODEL, tasks=[name], out=str(tmp_path / "out"), policies=["fp32", "shared:nvfp4-sr"],
                       include_path=[str(yaml.parent)], scoring="decode", batch_size="3", n_boot=200,
                       model_args="prompt=decode,fast_decode=true,max_length=400", device="cpu")
    s = run_study(cfg)
    typed = lmeval_schema.load(json.loads((tmp_path / "out" / "lmeval.json").read_text()))
    e = typed.tasks[name]
    assert e.n == len(items) and typed.policies == ["fp32", "shared:nvfp4-sr"]
    assert [b.bucket for b in e.fp32.by_bucket] == ["64-159", "160+"] and e.fp32.accuracy_ci.method == "wilson"
    pe = e.policies["shared:nvfp4-sr"]
    assert [b.bucket for b in pe.by_bucket] == ["64-159", "160+"]
    assert all(b.accuracy_ci is not None and b.mcnemar.p_value <= 1 for b in pe.by_bucket)
    assert s["tasks"][name]["fp32"]["accuracy"] == e.fp32.accuracy
    runs = {p: json.loads((tmp_path / "out" / path).read_text()) for p, path in s["runs"][name].items()}
    for rec in runs.values():
        assert rec["fingerprint"]["data"] and "prompt=decode" in rec["fingerprint"]["model_args"]
        by_id = {r["item_id"]: r for r in rec["samples"]}
        assert set(by_id) == {it["id"] for it in items}
        for it in items:
            r = by_id[it["id"]]
            assert len(r["loglikelihoods"]) == 3 and r["pred"] == max(range(3), key=r["loglikelihoods"].__getitem__)
            assert r["score"] == float(r["pred"] == it["gold"]) and r["bucket"] == it["bucket"]
    # the lossy run read another state: its log-likelihoods moved
    f, q = ({r["item_id"]: r["loglikelihoods"] for r in runs[p]["samples"]} for p in ("fp32", "shared:nvfp4-sr"))
    assert max(abs(a - b) for i in f for a, b in zip(f[i], q[i])) > 1e-3
    md = build_report([tmp_path / "out" / "lmeval.json"], tmp_path / "report").with_name("index.md").read_text()
    assert f"{name}: accuracy (%) by item bucket" in md and "accuracy CI (%)" in md and "prompt `decode`" in md


def test_committed_cpu_measurements_agree_with_and_without_the_moved_whitespace():
    """reports/play-choice-cpu/ (README: every item chose the same answer both ways) and the designs
    the README table lists."""
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parent.parent / "reports" / "play-choice-cpu").glob("*.json"))
    assert len(files) == 10
    for f in files:
        d = json.loads(f.read_text())
        n = d["summary"]["n"]
        assert d["summary"]["same_answer_moved_or_not"] == f"{n}/{n}" and len(d["items"]) == n
        assert d["provenance"]["command"].startswith("play_choice_fp32.py") and d["provenance"]["git"]


def test_items_clis_write_their_tasks(tmp_path, capsys):
    """Both play tasks' item CLIs (one shared parser) read a folder of plays and write a task."""
    from precision_lab.evals.tasks import next_speaker as ns

    plays = tmp_path / "plays"
    plays.mkdir()
    (plays / "a.txt").write_text(MODERN * 6)
    (plays / "b.txt").write_text(FOLIO * 6)
    for name, mod, extra in (("gen", ns, []), ("mc", pc, ["--kind", "speaker", "--k", "2"])):
        out = tmp_path / name
        assert mod.main(["--data", str(plays), "--out", str(out), "--buckets", "64", "256", "--per-bucket", "1",
                         *extra]) == 0
        said = capsys.readouterr().out
        assert said.startswith("wrote ") and "items (" in said
        assert list(out.glob("*.yaml")) and list(out.glob("*.jsonl"))
        items = [json.loads(line) for f in out.glob("*.jsonl") for line in f.read_text().splitlines()]
        assert items and int(said.split()[1]) == len(items)
