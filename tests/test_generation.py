"""Fast generation (precision_lab.generation) and the policy mixers' decode path on the Triton
decode-step kernels: the same tokens as ``model.generate``, the same logits as the torch decode
engine, one prefill per context for decode scoring. CPU, tiny presets; kernels in the interpreter.
(CUDA graph capture itself needs a GPU: scripts/bench_generate.py checks it there.)"""
import pytest
import torch

from precision_lab.generation import generate, score_branches, step_key
from precision_lab.models import apply_policy, cache_kwarg, load_model, new_stream

PRESETS = ["tiny-qwen3.5", "tiny-nemotron-h"]



DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the kernels compiled where a GPU is present


@pytest.fixture(scope="module", params=PRESETS)
def model_tok(request):
    return load_model(request.param, device=DEV)


def _batch(tok):
    enc = tok(["Once upon a time there", "The cat"], return_tensors="pt", padding=True, padding_side="left")
    return {k: v.to(DEV) for k, v in enc.items()}


@pytest.mark.parametrize("policy", ["fp32", "split:fp16-sr/nvfp4@L4"])
def test_generate_matches_model_generate(model_tok, policy):
    model, tok = model_tok
    apply_policy(model, policy, engine="auto")
    enc = _batch(tok)
    ref = model.generate(**enc, max_new_tokens=10, do_sample=False, pad_token_id=257)
    res = generate(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10, graphs=False)
    assert torch.equal(res.tokens, ref)
    if DEV == "cuda":  # the same decode steps replayed from CUDA graphs
        res_g = generate(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10, graphs=True)
        assert res_g.graphs["captured"] >= 1 and res_g.graphs["disabled_reason"] is None, res_g.graphs
        assert torch.equal(res_g.tokens, ref)
    assert res.new_tokens == 9 and len(res.finished) == 2  # the last token needs no step


def test_generate_stops_when_every_row_finished(model_tok):
    model, tok = model_tok
    apply_policy(model, "fp32")
    enc = _batch(tok)
    free = generate(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, graphs=False)
    first = free.tokens[:, enc["input_ids"].shape[1]]
    # make each row's first generated token its EOS: both rows finish at once
    res = generate(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, graphs=False,
                   eos_token_id=first.tolist(), pad_token_id=257, check_every=1)
    assert res.tokens.shape[1] == enc["input_ids"].shape[1] + 1 and res.finished == [1, 1]


@pytest.mark.parametrize("engine", ["auto", "decode", "triton-decode"])
def test_a_policy_string_is_parsed_once_per_call_path(model_tok, engine, policy_parses):
    """apply_policy parses the string once; a generation then passes the parsed StatePolicy down to
    the mixers and engines and never parses (or rebuilds) a policy per step or per layer."""
    model, _ = model_tok
    apply_policy(model, "split:fp16-sr/nvfp4", engine=engine)
    assert policy_parses.strings == ["split:fp16-sr/nvfp4"]
    policy_parses.clear()
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(0)).to(DEV)
    n = 4 if engine == "triton-decode" and DEV == "cpu" else 12   # the interpreter takes ~1 s per step
    res = generate(model, ids, max_new_tokens=n, graphs=False)
    assert res.new_tokens == n - 1  # decode steps, each through every SSM layer
    assert policy_parses.strings == [] and policy_parses.built == []


@pytest.mark.parametrize("policy", ["fp32", "shared:nvfp4-sr@L4", "split:fp8e4m3-sr/nvfp4@L4", "conventional:bf16"])
def test_mixer_decode_steps_on_the_kernels(model_tok, policy):
    """Decode steps through the policy mixers on the decode-step kernels give the torch decode
    engine's logits (fp32 tolerance; bf16 storage can flip a rounding), and the state lives in the
    packed device layout between steps."""
    model, tok = model_tok
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1)).to(DEV)
    res = {}
    for eng in ("decode", "triton-decode"):
        apply_policy(model, policy, engine=eng)
        cache = new_stream(model)
        kw = {cache_kwarg(model): cache}
        out = model(input_ids=ids, use_cache=True, **kw)
        logits = [out.logits[:, -1]]
        for _ in range(6):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **kw)
            logits.append(out.logits[:, -1])
        res[eng] = torch.stack(logits, 1)
        if eng == "triton-decode":
            assert all(k != ("eager",) for k in [step_key(model, cache)[:1]])
            served = {k for layer in model.precision_lab_report()["layers"] for k in layer["calls"]}
            assert any(k.startswith("triton-decode:triton:") for k in served), served
    tol = 2e-3 if policy == "conventional:bf16" else 1e-4
    assert (res["decode"] - res["triton-decode"]).abs().max() < tol


def test_score_branches_equals_separate_streams(model_tok):
    """Prefill each context once and branch per continuation == score every pair as its own stream
    (to fp32 rounding: a batch of another size runs the projections in another summation order)."""
    model, tok = model_tok
    apply_policy(model, "split:fp16-sr/nvfp4@L4")
    ctx = tok(["To be, or not to be", "Hi"], return_tensors="pt", padding=True, padding_side="left")
    ctx = {k: v.to(DEV) for k, v in ctx.items()}
    branch_of = torch.tensor([0, 0, 1, 0])
    forced = torch.randint(0, 256, (4, 5), generator=torch.Generator().manual_seed(2)).to(DEV)
    seq_ids = torch.tensor([11, 12])
    logits = score_branches(model, ctx["input_ids"], ctx["attention_mask"], branch_of, forced, graphs=False,
                            seq_ids=seq_ids)
    for r, b in enumerate(branch_of.tolist()):
        one = generate(model, ctx["input_ids"][b:b + 1], ctx["attention_mask"][b:b + 1], max_new_tokens=5,
                       graphs=False, forced=forced[r:r + 1], seq_ids=seq_ids[b:b + 1])
        assert torch.allclose(logits[r], one.logits[0], atol=1e-4, rtol=0), r


def test_prompt_decoded_by_the_triton_scan_continues_by_name(model_tok, monkeypatch):
    """A context run as decode steps (``first_is_prefill=False``) goes to the teacher-forced Triton
    scan under ``auto`` on CUDA, which returns NVFP4 copies without codes: the next single-token steps
    continue on the torch decode engine, named in the report, and give the decode engine's logits.
    (Here CUDA's ``auto`` choice is forced, so the same route runs on the interpreter.)"""
    import precision_lab.models.mixers as mixers

    model, _ = model_tok
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(3)).to(DEV)
    nxt = torch.randint(0, 256, (2, 3), generator=torch.Generator().manual_seed(4)).to(DEV)
    as_on_cuda = {1: "triton-decode"}
    res, served = {}, set()
    for eng in ("decode", "auto"):
        if eng == "auto":
            monkeypatch.setattr(mixers, "resolve", lambda e, *, tokens, device: as_on_cuda.get(tokens, "triton"))
        apply_policy(model, "shared:nvfp4-sr@L4", engine=eng)
        cache = new_stream(model, first_is_prefill=False)
        kw = {cache_kwarg(model): cache}
        logits = [model(input_ids=ids, use_cache=True, **kw).logits[:, -1]]
        for t in range(nxt.shape[1]):
            logits.append(model(input_ids=nxt[:, t:t + 1], use_cache=True, **kw).logits[:, -1])
        res[eng] = torch.stack(logits, 1)
        if eng == "auto":
            served = {k for layer in model.precision_lab_report()["layers"] for k in layer["calls"]}
    assert any(k.startswith("triton:") for k in served), served   # the context on the Triton scan
    assert any("without codes" in k and "torch-decode" in k for k in served), served
    assert (res["decode"] - res["auto"]).abs().max() < 1e-4


def test_a_flush_that_re_solves_its_window_is_never_captured():
    """A GDN flush over a window it did not write from the checkpoint (``window_from_update``: after
    a speculative flush round, or a window packed from a LayerState) launches the re-solving kernel
    variant: the step key sends it eagerly instead of into a graph captured for ordinary flushes."""
    from dataclasses import replace
    from types import SimpleNamespace

    from precision_lab.layer import random_inputs, run_layer
    from precision_lab.models.mixers import stream_context
    from precision_lab.state import DeviceState

    inp = random_inputs("gdn", batch=2, tokens=6, heads=4, rows=8, cols=16, groups=2, dtype=torch.float32, seed=1)
    _, st = run_layer(inp, "shared:nvfp4-sr@L8", engine="decode", prefill_len=3)  # W = 3 on the torch engine
    packed = DeviceState.from_layer_state(st.state, 2, "cpu")
    assert packed.window == 3 and not packed.window_from_update
    cache = SimpleNamespace()
    ctx = stream_context(cache)
    for window, from_update, key in [(3, False, (False,)), (7, False, ("eager", 0)), (7, True, (True,))]:
        ctx.states = {0: [replace(packed, window=window, window_from_update=from_update)]}
        assert step_key(None, cache) == key, (window, from_update)
