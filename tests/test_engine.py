"""The teacher-forced engine equals token-by-token decode through the same adapters (docs/design.md §8).

One adapted model per architecture holds the fp32 reference and one policy of every mode in
lockstep; the stream is cut into a prefill and segments that start and end inside ReplaySSM windows
(L = 4, segment 6). Token-by-token decode runs the same stream one cached forward per token on the
decode engine (the ground truth).

Tolerance. The two paths feed each SSM layer inputs that differ in the last fp32 bits (transformers'
projections and attention run on [B, 6, D] in one path and [B, 1, D] in the other). Where that moves a
lossy rounding decision (RNE or SR) of a state element, the two runs differ by that element's
rounding, not by fp32 rounding (``precision_lab/scan.py`` explains the same effect inside a layer).
So: the fp32 reference must agree to fp32 tolerance; every quantized policy must agree to within 5%
of its own effect, at every position (max over positions of KL(decode || engine) <= 0.05 x mean KL(fp32
|| policy)). A wrong seed, a wrong window or a leaked read copy changes outputs by the order of the
effect itself and fails — ``test_engine_check_can_fail`` shows it.
"""
import pytest
import torch

import precision_lab.models as M
from precision_lab.teacher_forced import compare_engines, run, teacher_forced_logits, token_by_token

POLICIES = ["fp32", "conventional:fp16-sr", "shared:nvfp4-sr@L4", "split:bf16-sr/nvfp4@L4",
            "split:fp32/fp8e4m3@L4@fold=buffered"]
N, P, SEG = 22, 6, 6


def _check(engine_logits, decode_logits, policies):
    """Per-policy verdicts: (ok, engine disagreement, policy effect)."""
    return {p: (v["ok"], v["disagreement"], v["effect"])
            for p, v in compare_engines(engine_logits, decode_logits, policies).items()}


def _ids(B=2):
    return torch.randint(0, 256, (B, N), generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("name", ["tiny-qwen3.5", "tiny-nemotron-h", "tiny-kimi-linear", "tiny-mamba2"])
def test_teacher_forced_equals_token_by_token(name):
    model, _ = M.load_model(name)
    M.apply_policy(model, POLICIES, seed=5)
    ids = _ids()
    fast = teacher_forced_logits(model, ids, prefill_len=P, segment_len=SEG, engine="scan")
    ref = token_by_token(model, ids, prefill_len=P)
    verdicts = _check(fast, ref, POLICIES)
    bad = {p: v for p, v in verdicts.items() if not v[0]}
    assert not bad, f"engine != decode for {bad}"
    served = {e for m in M.policy_mixers(model) for e, _ in m.served}
    assert served == {"scan", "decode"}       # both engines really ran


def test_engine_check_can_fail():
    """The same comparison flags a wrong SR seed and a wrong window length."""
    model, _ = M.load_model("tiny-qwen3.5")
    ids = _ids()
    pols = ["fp32", "shared:nvfp4-sr@L4"]
    M.apply_policy(model, pols, seed=5)
    ref = token_by_token(model, ids, prefill_len=P)
    M.apply_policy(model, pols, seed=6)                       # another SR bit stream
    wrong_seed = teacher_forced_logits(model, ids, prefill_len=P, segment_len=SEG, engine="scan")
    assert not _check(wrong_seed, ref, pols)["shared:nvfp4-sr@L4"][0]
    M.apply_policy(model, ["fp32", "shared:nvfp4-sr@L5"], seed=5)   # flushes at other steps
    wrong_l = teacher_forced_logits(model, ids, prefill_len=P, segment_len=SEG, engine="scan")
    assert not _check(wrong_l, ref, pols)["shared:nvfp4-sr@L4"][0]


def test_segments_and_sequence_ids():
    """Segment length does not change results; SR draws follow the given global sequence ids."""
    model, _ = M.load_model("tiny-mamba2")
    M.apply_policy(model, ["split:fp16-sr/nvfp4-sr@L4"], seed=1)
    ids = _ids(3)
    a = teacher_forced_logits(model, ids, prefill_len=P, segment_len=4, engine="scan")
    b = teacher_forced_logits(model, ids, prefill_len=P, segment_len=16, engine="scan")
    # Mamba-2 (no attention): segment cuts change no step of the state machine (SR events, flushes),
    # so the logits agree to fp32 rounding. Not bit for bit on every CPU: some BLAS builds sum a row
    # of a product in another order at another row count (the fp32 model alone moves ~1e-6 here on
    # such a CPU), while different SR draws move them by more than 1e-3 (the seq-id check below).
    assert ((a - b).abs().max() / a.abs().max()).item() < 1e-5
    # row 1 alone with seq id 1 gives row 1 of the batch run (SR keyed by sequence id, not batch slot)
    c = teacher_forced_logits(model, ids[1:2], prefill_len=P, segment_len=4, engine="scan", seq_ids=torch.tensor([1]))
    assert ((c[0] - a[1]).abs().max() / a[1].abs().max()).item() < 1e-5   # batch size changes only fp32 bits
    d = teacher_forced_logits(model, ids[1:2], prefill_len=P, segment_len=4, engine="scan", seq_ids=torch.tensor([0]))
    assert (d[0] - a[1]).abs().max() > 1e-3


def test_engine_errors():
    model, _ = M.load_model("tiny-mamba2")
    with pytest.raises(ValueError, match="apply_policy"):
        next(run(model, _ids(), prefill_len=2))
    M.apply_policy(model, "fp32")
    with pytest.raises(ValueError, match="prefill_len"):
        next(run(model, _ids(), prefill_len=N))
    with pytest.raises(ValueError, match="engine"):
        next(run(model, _ids(), engine="fast"))
