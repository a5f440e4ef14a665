"""The measurement floor of the KL driver: matched references, floors, verdicts, and the statistics
(bootstrap over documents, top-1 agreement, NLL) against hand-computed cases.

The central claim: a policy is compared with a reference that runs the same arithmetic with fp32
storage, so a lossless policy gives KL = 0 exactly, on every engine, while its reference and the
fp32 run differ by the arithmetic order alone (the floor)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from precision_lab.evals import kl as klmod
from precision_lab.evals.kl import (
    KLConfig,
    build_plan,
    doc_bootstrap,
    floor_check,
    kl_pairs,
    run_kl,
    summarize_comparison,
)
from precision_lab.evals.kl_schema import CLEARS_FLOOR, WITHIN_FLOOR, read_kl_summary

from precision_lab.policy import StatePolicy

LOSSLESS = ("split:fp32/fp32", "shared:fp32", "conventional:fp32", "split:fp32/fp32@fold=buffered")
LOSSY = ("shared:nvfp4-sr", "conventional:bf16")


# ------------------------------------------------------------------------------------------------
# matched references
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy, reference", [
    ("fp32", "fp32"),
    ("conventional:bf16", "conventional:fp32"),
    ("conventional:fp8e4m3-sr", "conventional:fp32"),
    ("conventional:fp32", "conventional:fp32"),
    ("shared:nvfp4-sr", "shared:fp32"),
    ("shared:fp8e4m3-sr@L8", "shared:fp32@L8"),
    ("shared:nvfp4@L32@fold=buffered", "shared:fp32@L32"),
    ("split:fp16-sr/nvfp4", "split:fp32/fp32"),
    ("split:fp32/nvfp4@L8", "split:fp32/fp32@L8"),
    ("split:fp16-sr/nvfp4@fold=buffered", "split:fp32/fp32@fold=buffered"),
    ("split:fp8e4m3-sr/nvfp4@L32@fold=buffered", "split:fp32/fp32@L32@fold=buffered"),
])
def test_matched_reference(policy, reference):
    ref = StatePolicy.parse(policy).matched_reference()
    assert ref.short_str() == reference and ref.is_lossless
    assert StatePolicy.parse(reference).matched_reference().short_str() == reference  # a fixed point


def test_plan_shares_references_and_pairs_each_row_with_its_own():
    plan = build_plan(["shared:nvfp4-sr", "shared:fp8e4m3-sr", "split:fp16-sr/nvfp4", "shared:nvfp4-sr@L8",
                       "conventional:bf16", "shared:fp32"], sr_seeds=3)
    names = [(r.role, r.policy.short_str(), r.policy.seed) for r in plan.rows]
    refs = [n for role, n, _ in names if role == "reference"]
    assert refs == ["shared:fp32", "split:fp32/fp32", "shared:fp32@L8", "conventional:fp32"]  # each once
    assert names[0] == ("base", "fp32", 0)
    # a lossless policy is its own reference but still gets its own row (the zero-KL check)
    i_pol = next(i for i, r in enumerate(plan.rows) if r.role == "policy" and r.policy.short_str() == "shared:fp32")
    assert plan.rows[plan.ref[i_pol]].role == "reference" and i_pol != plan.ref[i_pol]
    for i, ri in plan.ref.items():
        assert plan.rows[ri].policy.short_str() == plan.rows[i].policy.matched_reference().short_str()
        assert (ri, i) in plan.pairs
    for ri, r in enumerate(plan.rows):
        if r.role == "reference":
            assert (0, ri) in plan.pairs                      # its floor
    seeds = sorted(r.policy.seed for r in plan.rows if r.policy.short_str() == "shared:nvfp4-sr")
    assert seeds == [0, 1, 2]                                  # SR policies get extra seeds ...
    assert sum(r.policy.short_str() == "conventional:bf16" for r in plan.rows) == 1  # ... others do not
    assert build_plan(["shared:nvfp4"], layout="lockstep").rows[-1].role == "check"


# ------------------------------------------------------------------------------------------------
# lossless policies give KL = 0 exactly, on every engine
# ------------------------------------------------------------------------------------------------
def _zero_kl_run(tmp_path, engine, model, policies, tokens):
    cfg = KLConfig(model=model, docs=2, tokens=tokens, prefill=3, segment=16, policies=policies,
                   out=str(tmp_path / engine), progress=False, plot=False, device="cpu", engine=engine)
    return run_kl(cfg)


@pytest.mark.parametrize("engine, model, policies, tokens", [
    ("decode", "tiny-qwen3.5", LOSSLESS + LOSSY, 40),
    ("scan", "tiny-qwen3.5", LOSSLESS + LOSSY, 40),
    ("scan", "tiny-nemotron-h", LOSSLESS + LOSSY, 40),
    # the Triton interpreter is slow: one full window through the kernel plus a tail
    ("triton", "tiny-qwen3.5", ("shared:fp32", "split:fp32/fp32@fold=buffered", "conventional:fp32") + LOSSY, 20),
])
def test_lossless_policy_gives_zero_kl_against_its_matched_reference(tmp_path, engine, model, policies, tokens):
    s = _zero_kl_run(tmp_path, engine, model, policies, tokens)
    for p in policies:
        o = s["results"][p]["overall"]
        if StatePolicy.parse(p).is_lossless:
            assert o["max"] == 0.0 and o["top1_agreement"] == 1.0, (engine, p, o["max"])
            assert o["nll"] == o["nll_ref"]
            assert o["verdict"] == WITHIN_FLOOR
        else:
            assert o["mean"] > 0 and o["verdict"] == CLEARS_FLOOR, (engine, p, o["mean"])
    # the floor is KL(fp32 || reference): finite, and for the window arithmetic of the scan engines
    # not zero (that is what the matched reference removes from the policies' numbers)
    floors = {r: e["floor"]["overall"]["mean"] for r, e in s["references"].items()}
    assert all(v >= 0 and math.isfinite(v) for v in floors.values())
    if engine in ("scan", "decode"):
        assert floors["shared:fp32"] > 0
    # every ReplaySSM row was served by the same code as its reference
    for p in policies:
        if StatePolicy.parse(p).is_replay:
            assert s["results"][p]["arithmetic_matched"] is True, (p, s["results"][p]["implementations"])


@pytest.mark.parametrize("engine", ["decode", "scan", "triton"])
def test_conventional_rows_run_the_arithmetic_of_their_reference(engine):
    """conventional:F and conventional:fp32 must be served by the same code (the per-token step), so
    that their KL measures the storage format alone."""
    from precision_lab.layer import random_inputs, run_layer

    inp = random_inputs("gdn", batch=1, tokens=19, heads=2, rows=16, cols=16, groups=1, dtype=torch.float32)
    impl = {p: run_layer(inp, p, engine=engine)[1].implementation for p in ("conventional:bf16", "conventional:fp32")}
    assert klmod.arithmetic_matched([impl["conventional:bf16"]], [impl["conventional:fp32"]]), impl


def test_floor_is_the_kl_between_fp32_and_the_reference(tmp_path):
    """The floor recorded for a reference equals KL(fp32 || reference) computed from two separate
    teacher-forced runs (grouped rows give the bits of separate runs)."""
    from precision_lab.data import load_documents
    from precision_lab.models import apply_policy, load_model
    from precision_lab.teacher_forced import teacher_forced_logits

    s = run_kl(KLConfig(model="tiny-qwen3.5", docs=2, tokens=30, prefill=3, segment=16, policies=("shared:nvfp4",),
                        out=str(tmp_path / "r"), progress=False, plot=False, device="cpu", engine="scan"))
    model, tok = load_model("tiny-qwen3.5")
    docs = load_documents("default", tok, n_docs=2, tokens=30)
    toks = torch.stack([d.tokens for d in docs])
    logits = {}
    for p in ("fp32", "shared:fp32"):
        apply_policy(model, p, engine="scan")
        logits[p] = teacher_forced_logits(model, toks, prefill_len=3, segment_len=16, engine="scan")[:, 3:]
    kl = kl_pairs(torch.stack([logits["fp32"], logits["shared:fp32"]]), [(0, 1)])["kl"][0].numpy()
    assert kl.max() > 0
    floor = s["references"]["shared:fp32"]["floor"]["overall"]
    assert floor["mean"] == pytest.approx(kl.mean(), rel=1e-12, abs=0)
    assert s["results"]["shared:nvfp4"]["overall"]["floor_mean"] == pytest.approx(kl.mean(), rel=1e-12, abs=0)


def test_sr_seed_spread(tmp_path):
    s = run_kl(KLConfig(model="tiny-qwen3.5", docs=2, tokens=30, prefill=3, segment=16,
                        policies=("shared:nvfp4-sr", "shared:nvfp4"), sr_seeds=3, out=str(tmp_path / "r"),
                        progress=False, plot=False, device="cpu", engine="scan"))
    sp = s["results"]["shared:nvfp4-sr"]["seeds"]
    assert sp["seeds"] == [0, 1, 2] and len(set(sp["mean"])) == 3 and sp["spread"] > 0
    assert sp["mean"][0] == s["results"]["shared:nvfp4-sr"]["overall"]["mean"]
    assert "seeds" not in s["results"]["shared:nvfp4"]      # deterministic rounding has no seed spread


def test_lockstep_layout_reports_its_row_check(tmp_path):
    base = dict(model="tiny-nemotron-h", docs=2, tokens=30, prefill=3, segment=16, policies=("shared:nvfp4",),
                progress=False, plot=False, device="cpu", engine="scan")
    lock = run_kl(KLConfig(**base, layout="lockstep", out=str(tmp_path / "l")))
    grouped = run_kl(KLConfig(**base, out=str(tmp_path / "g")))
    chk = lock["layout"]["check"]
    assert set(chk) >= {"max_kl", "exact"} and chk["exact"] == (chk["max_kl"] == 0)
    assert grouped["layout"] == {"name": "grouped", "check": None}
    a = lock["results"]["shared:nvfp4"]["overall"]["mean"]
    b = grouped["results"]["shared:nvfp4"]["overall"]["mean"]
    assert a == pytest.approx(b, rel=1e-3)                    # the same numbers up to row-position bits
    assert lock["results"]["shared:nvfp4"]["implementations"] is None  # not separable in one forward


def test_per_layer_rows_run_the_policy_in_one_layer(tmp_path):
    """Each per-layer row equals a direct run with the policy in that SSM layer and the reference in
    the others; the all-layers row equals the plain run's policy row; a lossless policy gives 0."""
    from precision_lab.data import load_documents
    from precision_lab.models import apply_policy, load_model
    from precision_lab.teacher_forced import lm_logits, run_grouped

    base = dict(model="tiny-qwen3.5", docs=2, tokens=30, prefill=3, segment=16, progress=False, plot=False,
                device="cpu", engine="scan")
    lay = run_kl(KLConfig(**base, policies=("shared:nvfp4-sr", "shared:fp32"), per_layer=True,
                          out=str(tmp_path / "layers")))
    plain = run_kl(KLConfig(**base, policies=("shared:nvfp4-sr",), out=str(tmp_path / "plain")))
    assert lay["kind"] == "kl-layers" and len(lay["ssm_layers"]) == 3
    r = lay["results"]["shared:nvfp4-sr"]
    assert r["all_layers"]["overall"]["mean"] == plain["results"]["shared:nvfp4-sr"]["overall"]["mean"]
    assert all(x["overall"]["max"] == 0 for x in lay["results"]["shared:fp32"]["per_layer"])
    means = [x["overall"]["mean"] for x in r["per_layer"]]
    assert all(m > 0 for m in means) and len(set(means)) == 3
    # independent check of layer 1 alone
    model, tok = load_model("tiny-qwen3.5")
    apply_policy(model, "fp32", engine="scan")
    toks = torch.stack([d.tokens for d in load_documents("default", tok, n_docs=2, tokens=30)])
    ref, pol = StatePolicy.parse("shared:fp32"), StatePolicy.parse("shared:nvfp4-sr")
    hid = torch.cat([seg.hidden for seg in run_grouped(model, toks, [[ref] * 3, [ref, pol, ref]], prefill_len=3,
                                                        segment_len=16, engine="scan", seq_ids=torch.arange(2))], 1)
    logits = lm_logits(model, hid).view(2, 2, 30, -1)[:, :, 3:]
    kl = kl_pairs(logits, [(0, 1)])["kl"][0].numpy()
    assert r["per_layer"][1]["overall"]["mean"] == pytest.approx(kl.mean(), rel=1e-12, abs=0)
    table = klmod.format_layers_table(lay)
    assert "all layers" in table and "model.layers.1" in table


# ------------------------------------------------------------------------------------------------
# statistics against hand-computed cases
# ------------------------------------------------------------------------------------------------
def test_bootstrap_resamples_documents():
    # per-document means 0.1, 0.2, 0.6: a resample of 3 documents has mean 0.1 (all three the first)
    # and 0.6 with probability 1/27 > 2.5 % each, so the 95 % interval is exactly [0.1, 0.6]
    b = doc_bootstrap(np.array([0.1, 0.2, 0.6]))
    assert b["mean_over_docs"] == pytest.approx(0.3) and b["n_docs"] == 3
    assert b["ci95"] == pytest.approx([0.1, 0.6])
    # two documents: means {0, 0.5, 1} with probabilities 1/4, 1/2, 1/4 -> [0, 1]
    assert doc_bootstrap(np.array([0.0, 1.0]))["ci95"] == pytest.approx([0.0, 1.0])
    assert doc_bootstrap(np.array([0.7]))["ci95"] is None


def _check_document_intervals():
    """Document 0 has KL 0 at every position, document 1 has KL 1 (with within-document noise that
    averages out): intervals must be [0, 1] overall and in every bucket. Resampling tokens would give
    a narrow interval around 0.5; always drawing one document, a point."""
    T = 64
    noise = np.tile([-0.25, 0.25], T // 2)
    kl = np.stack([np.zeros(T), 1.0 + noise])
    agree = np.stack([np.ones(T, bool), np.arange(T) % 4 != 0])     # 100 % and 75 %
    s = klmod.summarize_comparison(kl, agree)
    o = s["overall"]
    assert o["doc_ci95"] == pytest.approx([0.0, 1.0]) and o["doc_mean_over_docs"] == pytest.approx(0.5)
    assert o["top1_agreement"] == pytest.approx(0.875)
    for b in s["buckets"]["log2"] + s["buckets"]["linear"]:
        assert b["ci95"] == pytest.approx([0.0, 1.0 + noise[b["lo"] - 1:b["hi"]].mean()]), (b["lo"], b["hi"])
    assert [(b["lo"], b["hi"]) for b in s["buckets"]["log2"]] == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31),
                                                                  (32, 63), (64, 64)]


def test_summary_intervals_are_over_documents_not_tokens():
    _check_document_intervals()


@pytest.mark.parametrize("mutation", ["tokens", "one_document"])
def test_bootstrap_mutations_are_caught(monkeypatch, mutation):
    """The hand-computed check fails if the bootstrap resamples tokens instead of documents, or always
    draws the same document."""
    if mutation == "tokens":
        monkeypatch.setattr(klmod, "_resampling_units", lambda x: x.ravel())
    else:
        real = np.random.default_rng

        class OneDocument:
            def __init__(self, seed):
                self.rng = real(seed)

            def integers(self, *a, **k):
                return np.zeros_like(self.rng.integers(*a, **k))

        monkeypatch.setattr(np.random, "default_rng", OneDocument)
    with pytest.raises(AssertionError):
        _check_document_intervals()


def test_nll_and_top1_hand_computed():
    V = 4
    # row 0: uniform logits (NLL = log 4 whatever the target); row 1: target 2 has logit log 3 among
    # zeros -> p = 3/6, NLL = log 2; argmax of row 1 is token 2, of row 0 token 0 (first of ties)
    logits = torch.zeros(2, 1, 3, V, dtype=torch.float64)
    logits[1, 0, :, 2] = math.log(3.0)
    targets = torch.full((1, 2), 2)                            # the last position has no next token
    r = kl_pairs(logits, [(0, 1)], targets)
    assert r["nll"][0].numpy() == pytest.approx(np.full((1, 2), math.log(4)))
    assert r["nll"][1].numpy() == pytest.approx(np.full((1, 2), math.log(2)))
    assert not r["agree"].any()
    # KL(uniform || p1) = sum 1/4 log((1/4)/p1_v), p1 = (1/6, 1/6, 1/2, 1/6)
    expect = 0.75 * math.log(6 / 4) + 0.25 * math.log(2 / 4)
    assert r["kl"][0].numpy() == pytest.approx(np.full((1, 3), expect), abs=1e-15)
    nll = np.concatenate([r["nll"].numpy(), np.full((2, 1, 1), np.nan)], axis=2)
    s = summarize_comparison(r["kl"][0].numpy(), r["agree"][0].numpy(), nll[1], nll[0])
    assert s["overall"]["nll"] == pytest.approx(math.log(2)) and s["overall"]["nll_ref"] == pytest.approx(math.log(4))
    assert s["overall"]["top1_agreement"] == 0.0


def test_floor_verdicts():
    up = floor_check(np.array([2.0, 3.0, 4.0]), np.array([1.0, 1.0, 1.0]))
    assert up["verdict"] == CLEARS_FLOOR and up["excess"]["delta"] == pytest.approx(2.0)
    assert up["excess"]["ci95"] == pytest.approx([1.0, 3.0]) and up["floor_mean"] == 1.0
    same = floor_check(np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert same["verdict"] == WITHIN_FLOOR and same["excess"]["ci95"] == [0.0, 0.0]
    # above the floor on average, but one document below it: the interval reaches below 0
    mixed = floor_check(np.array([0.0, 5.0]), np.array([1.0, 1.0]))
    assert mixed["excess"]["delta"] == pytest.approx(1.5) and mixed["verdict"] == WITHIN_FLOOR
    zero = floor_check(np.array([0.0, 0.0]), np.zeros(2))
    assert zero["verdict"] == WITHIN_FLOOR
    one = floor_check(np.array([2e-3]), np.array([1e-3]))
    assert one["verdict"] == CLEARS_FLOOR and one["excess"]["ci95"] is None


def test_version_1_files_are_read():
    v1 = {"kind": "kl", "schema_version": 1, "policies": ["shared:nvfp4"], "reference": "fp32",
          "results": {"shared:nvfp4": {"overall": {"mean": 1.0}, "buckets": {"log2": []}}}}
    s = read_kl_summary(v1)
    assert s["results"]["shared:nvfp4"]["reference"] == "fp32" and s["references"] == {}
    with pytest.raises(ValueError, match="schema_version 3"):
        read_kl_summary({**v1, "schema_version": 3})
