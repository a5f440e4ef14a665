"""lm-eval integration (docs/design.md §9): the ``replayssm`` model, task presets, the study runner and the
plug-in registration, on the tiny Qwen3.5 preset with its local byte tokenizer and the shipped
SYNTHETIC rows (offline, CPU)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from precision_lab.evals import tasks as task_presets
from precision_lab.evals.lmeval_model import ReplaySSMLM, prompt_seq_id
from precision_lab.evals.lmeval_runner import LMEvalConfig, Study, run_study
from precision_lab.evals.tasks.make_synthetic import synthetic_rows, to_jsonl

from precision_lab.models import load_model

MODEL = "tiny-qwen3.5"
PROMPTS = ["Question: what is 2+2?\nAnswer:", "Hi", "The quick brown fox jumps over"]
PAIRS = [("Hello", " world"), ("Hello", " there, friend"), ("The answer is", " (A)"), ("x", "yz" * 10)]




def _gen(prompts, max_gen_toks=20):
    return [Instance("generate_until", {}, (p, {"until": ["\n\n"], "max_gen_toks": max_gen_toks}), i)
            for i, p in enumerate(prompts)]


def _ll(pairs):
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]


@pytest.fixture(scope="module")
def stock():
    model, tok = load_model(MODEL)
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=3, device="cpu")
    with torch.no_grad():
        return {"gen": lm.generate_until(_gen(PROMPTS)), "ll": lm.loglikelihood(_ll(PAIRS))}


def _replay(policy, scoring="stock", batch_size=3, **kw):
    return ReplaySSMLM(pretrained=MODEL, policy=policy, scoring=scoring, batch_size=batch_size, device="cpu", **kw)


@pytest.mark.parametrize("scoring", ["stock", "decode"])
def test_fp32_equals_stock_hflm(stock, scoring):
    lm = _replay("fp32", scoring=scoring)
    assert lm.generate_until(_gen(PROMPTS)) == stock["gen"]  # token for token (same decoded text)
    ll = lm.loglikelihood(_ll(PAIRS))
    for (a, ga), (b, gb) in zip(ll, stock["ll"]):
        assert a == pytest.approx(b, abs=2e-4) and ga == gb
    # Generation really went through the policy mixers: prefill once per stream, then decode steps.
    calls = {k: v for layer in lm.get_model_info()["replayssm_served"] for k, v in layer["calls"].items()}
    assert any(k.startswith("decode:") for k in calls), calls
    assert lm.streams >= 1


def test_lossy_policy_changes_generations_and_decode_scores(stock):
    lm = _replay("shared:nvfp4", scoring="decode")
    gen = lm.generate_until(_gen(PROMPTS))
    assert sum(a != b for a, b in zip(gen, stock["gen"])) >= 2
    ll = lm.loglikelihood(_ll(PAIRS))
    assert max(abs(a - b) for (a, _), (b, _) in zip(ll, stock["ll"])) > 1e-2
    # Stock scoring is one prefill: the quantized decode state never enters it (docs/pitfalls.md §8).
    lm.scoring = "stock"
    ll_stock = lm.loglikelihood(_ll(PAIRS))
    for (a, _), (b, _) in zip(ll_stock, stock["ll"]):
        assert a == pytest.approx(b, abs=2e-4)


def test_decode_scoring_matches_manual_stream():
    """Decode scoring = prefill of the context, then one cached decode step per continuation token."""
    from precision_lab.models import apply_policy, new_stream

    lm = _replay("split:fp32/nvfp4", scoring="decode", batch_size=2)
    # the last pair's continuation holds the EOS token: scoring must feed on past it, not stop
    pairs = PAIRS + [("Hi", " a<|endoftext|>b c d e f g h i j k l m n o p")]
    assert lm.eot_token_id in lm.tokenizer(pairs[-1][1])["input_ids"]
    got = lm.loglikelihood(_ll(pairs))
    model, tok = load_model(MODEL)
    apply_policy(model, "split:fp32/nvfp4", engine="auto", seed=0)
    for (ctx, cont), (lp, greedy) in zip(pairs, got):
        c, k = tok(ctx)["input_ids"], tok(cont)["input_ids"]
        cache = new_stream(model, seq_ids=torch.tensor([prompt_seq_id(c)]))
        with torch.no_grad():
            logits = [model(input_ids=torch.tensor([c]), cache=cache, use_cache=True).logits[0, -1]]
            for t in k[:-1]:
                logits.append(model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1])
        logp = torch.log_softmax(torch.stack(logits).float(), -1)
        want = float(logp[torch.arange(len(k)), torch.tensor(k)].sum())
        assert lp == pytest.approx(want, abs=1e-4)
        assert greedy == bool((torch.stack(logits).argmax(-1) == torch.tensor(k)).all())


def test_results_do_not_depend_on_batching():
    """SR sequence ids come from the prompt tokens, so a request's stream draws the same random bits
    in any batch (with arange(B) ids, rows 1.. of a batch would get other bits than alone)."""
    pol = "shared:nvfp4-sr"
    one = _replay(pol, scoring="decode", batch_size=1)
    four = _replay(pol, scoring="decode", batch_size=4)
    ll1, ll4 = one.loglikelihood(_ll(PAIRS)), four.loglikelihood(_ll(PAIRS))
    for (a, ga), (b, gb) in zip(ll1, ll4):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb  # left padding moves fp32 sums by ~1e-5
    assert one.generate_until(_gen(PROMPTS, 12)) == four.generate_until(_gen(PROMPTS, 12))
    assert prompt_seq_id([1, 2, 3]) == prompt_seq_id([1, 2, 3]) != prompt_seq_id([1, 2, 4])
    assert 0 <= prompt_seq_id(list(range(1000))) < 2**16


def test_sr_seed_is_used_and_reproducible():
    pol = "split:fp16-sr/nvfp4-sr"
    a = _replay(pol, scoring="decode", seed=0).loglikelihood(_ll(PAIRS))
    b = _replay(pol, scoring="decode", seed=0).loglikelihood(_ll(PAIRS))
    c = _replay(pol, scoring="decode", seed=1).loglikelihood(_ll(PAIRS))
    assert a == b
    assert max(abs(x[0] - y[0]) for x, y in zip(a, c)) > 1e-4


def test_generation_lengths_are_token_counts():
    lm = _replay("fp32", batch_size=2)
    reqs = [Instance("generate_until", {}, (p, {"until": ["qq"], "max_gen_toks": 9}), i) for i, p in enumerate(PROMPTS)]
    out = lm.generate_until(reqs)
    for p, text in zip(PROMPTS, out):
        n = lm.generation_lengths[p]
        assert 1 <= n <= 9
        # the byte tokenizer has one token per byte: a response that did not stop early has 9 tokens
        if "qq" not in text:
            assert n == 9 or n == len(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("scoring", ["stock", "decode"])
def test_the_policy_string_is_parsed_once_per_model(policy_parses, scoring):
    """The replayssm model parses its policy string when it is built; requests (generation and
    scoring) run the parsed policy and parse nothing per step or per layer."""
    lm = _replay("split:fp16-sr/nvfp4", scoring=scoring, batch_size=2)
    assert policy_parses.strings == ["split:fp16-sr/nvfp4"]
    policy_parses.clear()
    lm.generate_until(_gen(PROMPTS[:2], 8))
    lm.loglikelihood(_ll(PAIRS[:2]))
    assert lm.streams > 0 and policy_parses.strings == [] and policy_parses.built == []


def test_bad_model_args():
    with pytest.raises(ValueError, match="scoring"):
        _replay("fp32", scoring="prefill")
    with pytest.raises(ValueError, match="policy"):
        _replay("half:nvfp4")


# -- task presets ---------------------------------------------------------------------------------
def test_shipped_synthetic_rows_match_generator():
    for rel, rows in synthetic_rows().items():
        path = task_presets.SYNTHETIC_DIR / rel
        assert path.read_text() == to_jsonl(rows), f"{rel} differs from make_synthetic; regenerate it"


def test_presets_use_upstream_prompts_and_filters(tmp_path):
    """A local task is the upstream YAML plus data-source keys only; its prompts render from local rows."""
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    task_presets.write_task_configs(tmp_path, task_presets.SYNTHETIC_DIR)
    data_keys = {"task", "dataset_path", "dataset_name", "dataset_kwargs", "custom_dataset", "tag"}
    up_dir = task_presets.lm_eval_tasks_dir()
    for preset in task_presets.PRESETS.values():
        for t in preset.tasks:
            ours = load_yaml(tmp_path / f"{t.name}.yaml", resolve_func=False)
            upstream = load_yaml(up_dir / t.upstream_yaml, resolve_func=False)
            assert set(ours) - set(upstream) <= data_keys, t.name
            for key in set(upstream) - data_keys:  # prompts, filters, metrics, generation, few-shot
                assert ours[key] == upstream[key], (t.name, key)
            assert ours["dataset_path"] == "json" and ours["task"] == t.name
    tm = TaskManager(include_path=str(tmp_path), include_defaults=False)
    loaded = tm.load(["gpqa_diamond_cot_zeroshot_local", "leaderboard_math_geometry_hard_local", "mmlu_pro_law_local"])
    loaded = loaded.get("tasks", loaded)
    gpqa = loaded["gpqa_diamond_cot_zeroshot_local"]
    docs = list(gpqa.validation_docs())
    assert len(docs) == 4 and gpqa.doc_to_text(docs[0]).startswith("What is the correct answer to this question:")
    math = loaded["leaderboard_math_geometry_hard_local"]
    assert len(list(math.test_docs())) == 2  # the Level 3 row is filtered out by the upstream process_docs
    assert gpqa.config.filter_list[1]["name"] == "flexible-extract"
    assert len(list(loaded["mmlu_pro_law_local"].test_docs())) == 2


def test_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="gpqa_diamond.jsonl"):
        task_presets.write_task_configs(tmp_path / "t", tmp_path / "empty", ["gpqa"])
    with pytest.raises(ValueError, match="unknown task preset"):
        task_presets.write_task_configs(tmp_path / "t", task_presets.SYNTHETIC_DIR, ["gpqa-diamond"])


@pytest.mark.parametrize("preset", ["mmlu_pro", "math_hard", "ruler_niah"])
def test_each_preset_runs_offline(tmp_path, preset):
    """Each preset's upstream prompts, filters and metrics run on local rows (stock HF model: the
    replayssm path is exercised by the study test below). For RULER, one task's rows come from
    lm-eval's own generator through prepare_ruler, sized with the local byte tokenizer."""
    import shutil

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    data = tmp_path / "data"
    shutil.copytree(task_presets.SYNTHETIC_DIR, data)
    model, tok = load_model(MODEL)
    if preset == "ruler_niah":
        from precision_lab.evals.tasks.prepare_ruler import prepare_ruler

        tok.save_pretrained(tmp_path / "tok")
        path = prepare_ruler(str(tmp_path / "tok"), [4096], data, ["niah_single_1"])["niah_single_1"]
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(rows) == 500 and all(r["max_length"] == 4096 and r["length"] <= 4096 for r in rows)
        assert all(r["outputs"][0] in r["input"] for r in rows)
    task_presets.write_task_configs(tmp_path / "tasks", data, [preset])
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=8, device="cpu")
    p = task_presets.PRESETS[preset]
    res = simple_evaluate(lm, tasks=p.task_names, task_manager=TaskManager(include_path=str(tmp_path / "tasks"),
                                                                         include_defaults=False),
                          limit=1, gen_kwargs="max_gen_toks=4", log_samples=True, bootstrap_iters=0)
    assert set(res["samples"]) == {t.name for t in p.tasks}
    for rows in res["samples"].values():
        scored = [task_presets.sample_score(p, s) for s in rows if s["filter"] == p.filter]
        assert scored and all(0.0 <= x <= 1.0 for x in scored)


# -- the study ------------------------------------------------------------------------------------
def test_study_pipeline_and_resume(tmp_path, monkeypatch):
    cfg = LMEvalConfig(model=MODEL, tasks=["gpqa"], out=str(tmp_path / "study"),
                       policies=["shared:nvfp4", "fp32"], synthetic=True, limit=4,
                       gen_kwargs="max_gen_toks=12", batch_size="4", n_boot=500)
    assert cfg.policies == ["fp32", "shared:nvfp4"]  # the baseline always runs first
    summary = run_study(cfg)
    on_disk = json.loads((tmp_path / "study" / "lmeval.json").read_text())
    assert on_disk["kind"] == "lmeval" and on_disk["schema_version"] == 1 and "git" in on_disk["provenance"]
    e = summary["tasks"]["gpqa"]
    assert e["n"] == 4 and set(e["policies"]) == {"shared:nvfp4"}
    r = e["policies"]["shared:nvfp4"]
    # per-sample outputs are kept, and the statistics are those of the kept samples
    runs = {p: json.loads((tmp_path / "study" / on_disk["runs"]["gpqa"][p]).read_text()) for p in cfg.policies}
    base = {s["doc_id"]: s for s in runs["fp32"]["samples"]}
    var = {s["doc_id"]: s for s in runs["shared:nvfp4"]["samples"]}
    assert len(base) == 4 and all(isinstance(s["response"], str) and s["gen_tokens"] >= 1 for s in base.values())
    assert r["changed_responses"] == sum(base[d]["response"] != var[d]["response"] for d in base) >= 1
    b = sum(base[d]["score"] >= 1 and var[d]["score"] < 1 for d in base)
    c = sum(base[d]["score"] < 1 and var[d]["score"] >= 1 for d in base)
    assert (r["mcnemar"]["b"], r["mcnemar"]["c"]) == (b, c)
    assert r["delta"]["delta"] == pytest.approx(sum(var[d]["score"] - base[d]["score"] for d in base) / 4)
    assert len(r["by_fp32_length_quartile"]) == 4 and r["generation_length"]["max"] <= 12
    # this run's own calls: decode steps (and prefills) of the replay path, none of conventional decode
    served = e["policies"]["shared:nvfp4"]["served"]
    assert any(k.startswith("decode:") and "replay" in k for k in served), served
    assert not any("conventional" in k for k in served), served
    assert all("replay" not in k for k in e["fp32"]["served"]) and e["fp32"]["served"]

    # Resume: a second run reuses every (policy, task) file and evaluates nothing.
    import lm_eval

    def boom(*a, **k):
        raise AssertionError("simple_evaluate called although results exist")

    monkeypatch.setattr(lm_eval, "simple_evaluate", boom)
    again = run_study(cfg)
    assert again["tasks"]["gpqa"]["policies"]["shared:nvfp4"]["delta"] == r["delta"]
    # Changed settings invalidate the saved run.
    cfg2 = LMEvalConfig(**{**cfg.__dict__, "gen_kwargs": "max_gen_toks=13"})
    with pytest.raises(AssertionError, match="simple_evaluate called"):
        run_study(cfg2)


def test_study_refuses_unpaired_runs(tmp_path):
    cfg = LMEvalConfig(model=MODEL, tasks=["gpqa"], out=str(tmp_path), synthetic=True, policies=["fp32", "shared:nvfp4"])
    study = Study(cfg)
    rec = lambda ids, h: {"samples": [{"task": "t", "doc_id": i, "prompt_hash": h, "score": 1.0, "response": "x",
                                        "gen_tokens": 3} for i in ids]}
    with pytest.raises(RuntimeError, match="other items"):
        study.summarize({"gpqa": {"fp32": rec([0, 1], "a"), "shared:nvfp4": rec([0], "a")}})
    with pytest.raises(RuntimeError, match="prompts differ"):
        study.summarize({"gpqa": {"fp32": rec([0, 1], "a"), "shared:nvfp4": rec([0, 1], "b")}})


def test_presets_need_data(tmp_path):
    with pytest.raises(ValueError, match="--data-dir"):
        Study(LMEvalConfig(model=MODEL, tasks=["gpqa"], out=str(tmp_path))).prepare_tasks()


# -- plug-in registration --------------------------------------------------------------------------
def test_lm_eval_cli_finds_replayssm_through_the_startup_hook(tmp_path):
    """`lm_eval --model replayssm ...` in a fresh interpreter whose site dir holds our .pth file."""
    from precision_lab.evals.lmeval_plugin import write_pth

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    write_pth(site_dir)
    task_dir = tmp_path / "tasks"
    task_presets.write_task_configs(task_dir, task_presets.SYNTHETIC_DIR, ["gpqa"])
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import site, sys, torch
        torch.set_num_threads(1)
        site.addsitedir({str(site_dir)!r})          # processes precision_lab_lmeval.pth like site-packages
        assert "precision_lab.evals.lmeval_model" not in sys.modules
        sys.argv = ["lm_eval", "--model", "replayssm",
                    "--model_args", "pretrained={MODEL},policy=shared:nvfp4,seed=3", "--device", "cpu",
                    "--tasks", "gpqa_diamond_cot_zeroshot_local", "--include_path", {str(task_dir)!r},
                    "--limit", "1", "--gen_kwargs", "max_gen_toks=4", "--output_path", {str(out)!r}]
        from lm_eval.__main__ import cli_evaluate
        cli_evaluate()
    """)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = list(out.rglob("results_*.json"))
    assert results, proc.stdout[-2000:]
    data = json.loads(results[0].read_text())
    assert data["config"]["model"] == "replayssm"
    assert "gpqa_diamond_cot_zeroshot_local" in data["results"]


@pytest.mark.parametrize("model_name", ["tiny-nemotron-h", "tiny-kimi-linear"])
def test_other_architectures_fp32_equals_stock_and_lossy_differs(model_name):
    """Mamba-2 (Nemotron-H) and KDA (Kimi-Linear) adapters through the same lm-eval model."""
    model, tok = load_model(model_name)
    want = HFLM(pretrained=model, tokenizer=tok, batch_size=3, device="cpu").generate_until(_gen(PROMPTS, 16))
    mk = lambda pol: ReplaySSMLM(pretrained=model_name, policy=pol, batch_size=3, device="cpu")
    assert mk("fp32").generate_until(_gen(PROMPTS, 16)) == want
    assert mk("shared:nvfp4").generate_until(_gen(PROMPTS, 16)) != want


def test_fast_decode_path_equals_the_generate_path():
    """fast_decode (static cache, decode steps through precision_lab.generation; graphs on CUDA) gives
    model.generate's generations and, for decode scoring, one prefill per distinct context with the
    same scores as scoring every pair as its own stream."""
    slow = _replay("split:fp16-sr/nvfp4@L4", scoring="decode", fast_decode="false")
    fast = _replay("split:fp16-sr/nvfp4@L4", scoring="decode", fast_decode="true")
    assert not slow.fast_decode and fast.fast_decode
    assert fast.generate_until(_gen(PROMPTS)) == slow.generate_until(_gen(PROMPTS))
    ll_slow, ll_fast = slow.loglikelihood(_ll(PAIRS)), fast.loglikelihood(_ll(PAIRS))
    for (a, ga), (b, gb) in zip(ll_fast, ll_slow):
        assert a == pytest.approx(b, abs=2e-4) and ga == gb
    assert fast.prefills_saved >= 1  # "Hello" + two continuations: one prefill
    assert fast.get_model_info()["replayssm_fast_decode"] is True
    with pytest.raises(ValueError, match="fast_decode must be true, false or auto"):
        _replay("fp32", fast_decode="maybe")
