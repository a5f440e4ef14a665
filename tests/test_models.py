"""Model adapters: fp32-mode parity with the unmodified transformers forward, explicit per-instance
swapping, presets, tokenizer and error messages."""
import copy

import pytest
import torch

import precision_lab.models as M
from precision_lab.models.tokenizer import build_byte_tokenizer

ARCHS = ["tiny-qwen3.5", "tiny-nemotron-h", "tiny-kimi-linear", "tiny-mamba2"]


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def _cached_logits(model, ids, prefill):
    """Prefill `prefill` tokens in one forward, then one token per forward through the HF cache."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    outs = [model(input_ids=ids[:, :prefill], use_cache=True, **{M.cache_kwarg(model): cache}).logits]
    for t in range(prefill, ids.shape[1]):
        outs.append(model(input_ids=ids[:, t:t + 1], use_cache=True, **{M.cache_kwarg(model): cache}).logits)
    return torch.cat(outs, 1)


@pytest.mark.parametrize("name", ARCHS)
def test_fp32_policy_reproduces_hf_forward(name):
    ref, _ = M.load_model(name)
    ad = M.apply_policy(copy.deepcopy(ref), "fp32", engine="decode")
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full_ref, full_ad = ref(input_ids=ids).logits, ad(input_ids=ids).logits
        dec_ref, dec_ad = _cached_logits(ref, ids, 12), _cached_logits(ad, ids, 12)
    # fp32 tolerance: the two paths sum in different orders (chunked vs sequential)
    assert _rel(full_ad, full_ref) < 2e-5
    assert _rel(dec_ad, dec_ref) < 2e-5
    # ...and the comparison is sharp enough to see a state error: rounding the state to nvfp4 breaks it
    bad = M.apply_policy(copy.deepcopy(ref), "conventional:nvfp4", engine="decode")
    with torch.no_grad():
        assert _rel(_cached_logits(bad, ids, 12), dec_ref) > 1e-3
    rep = ad.precision_lab_report()
    assert rep["policies"] == ["fp32"] and rep["layers"]
    assert all(layer["adapted"] and any(k.startswith("decode:") for k in layer["calls"]) for layer in rep["layers"])


def test_swap_is_per_instance_and_keeps_weights():
    a, _ = M.load_model("tiny-qwen3.5")
    b, _ = M.load_model("tiny-qwen3.5")
    keys = list(a.state_dict())
    M.apply_policy(a, "split:fp16-sr/nvfp4")
    assert list(a.state_dict()) == keys                       # same parameter names
    for (_, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y)                              # same weights (presets are seeded)
    assert len(M.policy_mixers(a)) == 3 and not M.policy_mixers(b)   # b untouched: no global patching
    mixer = M.policy_mixers(a)[0]
    assert mixer.in_proj_qkv is M.ssm_modules(a)[0][1].in_proj_qkv
    # re-applying changes the policies in place, not the module
    M.apply_policy(a, ["fp32", "shared:nvfp4"], engine="scan")
    assert M.policy_mixers(a)[0] is mixer and [p.short_str() for p in mixer.policies] == ["fp32", "shared:nvfp4"]


def test_generate_runs_the_policy_decode_path():
    model, tok = M.load_model("tiny-nemotron-h")
    M.apply_policy(model, "split:fp32/nvfp4@L4", engine="auto")
    enc = tok(["The lighthouse keeper"], return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (1, enc["input_ids"].shape[1] + 6)
    calls = M.policy_mixers(model)[0].served
    engines = {e for e, _ in calls}
    assert "decode" in engines                                 # single-token steps on the decode engine
    assert sum(calls.values()) == 6                            # one prefill + five decode steps


def test_presets_and_tokenizer():
    names = [p["name"] for p in M.list_presets()]
    assert {"tiny-qwen3.5", "tiny-nemotron-h", "tiny-kimi-linear", "tiny-mamba2", "qwen3.5-4b-shape"} <= set(names)
    tok = build_byte_tokenizer()
    s = "Tide stain\n\tshaped ☃ like an island"
    ids = tok(s)["input_ids"]
    assert ids == list(s.encode("utf-8"))                     # one token per byte, nothing appended
    assert tok.decode(ids) == s
    cfg = M.presets.build_config("qwen3.5-4b-shape")         # shape presets build their config offline
    assert cfg.linear_num_value_heads == 32 and cfg.layer_types.count("linear_attention") == 24


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown model"):
        M.load_model("no-such-preset")
    model, _ = M.load_model("tiny-mamba2")
    with pytest.raises(ValueError, match="unknown mode"):
        M.apply_policy(model, "half:nvfp4")
    with pytest.raises(ValueError, match="nvfp9"):
        M.apply_policy(model, "shared:nvfp9")
    with pytest.raises(ValueError, match="engine"):
        M.apply_policy(model, "fp32", engine="warp")
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    with pytest.raises(ValueError, match="no SSM layers"):
        M.apply_policy(llama, "fp32")


def test_checkpoint_directory_loads_through_from_pretrained(tmp_path):
    """A local checkpoint (here: a saved tiny preset) loads by path and adapts like the preset."""
    model, tok = M.load_model("tiny-qwen3.5")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = M.load_model(str(tmp_path), dtype="float32")
    ids = torch.tensor([tok2("checkpoint")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    M.apply_policy(loaded, "shared:nvfp4")
    assert loaded.precision_lab_report()["source"] == {"pretrained": str(tmp_path)}


def test_models_command(capsys):
    from precision_lab.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "tiny-nemotron-h" in out and "qwen3.5-4b-shape" in out and "Qwen3_5GatedDeltaNet" in out


# Timed after the imports: what is measured is the hub traffic, whose retries take 30-60 s.
_LOAD_TIMED = """
import time
from precision_lab.models import load_model
from precision_lab.models._hf import import_transformers
import_transformers()
from transformers import AutoModelForCausalLM, AutoTokenizer
t = time.perf_counter()
try:
    load_model({name!r})
except ValueError as e:
    print(round(time.perf_counter() - t, 2), e)
"""


@pytest.mark.parametrize("offline", ["1", None])
def test_a_model_the_hub_cannot_serve_fails_fast(tmp_path, offline):
    # no network (a hub endpoint that refuses connections) or offline mode, and nothing cached: the
    # error comes within seconds, not after a minute of retries inside from_pretrained
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    if offline:
        env["HF_HUB_OFFLINE"] = offline
    r = subprocess.run([sys.executable, "-c", _LOAD_TIMED.format(name="does/not-exist")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    seconds, _, message = r.stdout.strip().partition(" ")
    assert float(seconds) < 15, r.stdout
    assert "'does/not-exist'" in message and ("HF_HUB_OFFLINE" if offline else "127.0.0.1:9") in message


def test_a_name_that_cannot_be_a_hub_id_fails_before_any_hub_call(monkeypatch):
    monkeypatch.setattr(M, "hub_unreachable_reason", lambda *a, **k: pytest.fail("the hub was asked"))
    for name in ("a--b/c", "-x/y", "owner/na me", "a/b/c"):
        with pytest.raises(ValueError, match="not a hub id"):
            M.load_model(name)


def test_a_cached_hub_model_loads_without_the_hub(tmp_path):
    # the same unreachable hub, but the model is in the local cache: it loads from there at once
    import os
    import subprocess
    import sys

    model, tok = M.load_model("tiny-mamba2")
    snap = tmp_path / "hf" / "hub" / "models--someone--tiny" / "snapshots" / ("0" * 40)
    model.save_pretrained(snap)
    tok.save_pretrained(snap)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("0" * 40)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    code = _LOAD_TIMED.split("t = time")[0] + ("t = time.perf_counter(); m, _ = load_model('someone/tiny'); "
                                                "print(round(time.perf_counter() - t, 2), type(m).__name__)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    seconds, name = r.stdout.split()
    assert float(seconds) < 15 and name == type(model).__name__
