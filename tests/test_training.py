"""The training recipe on CPU: evaluation windows and bits per byte on hand-checked cases, the SSM
memory of heads with hand-set decays, best-checkpoint selection, saving (atomic, sharded, verified),
and short end-to-end runs whose checkpoints transformers loads back."""
import json
import math
import time

import pytest
import torch
from torch import nn

from precision_lab import training as tr
from precision_lab.models.tokenizer import PAD_ID


def test_contiguous_windows_layout():
    doc = torch.arange(10)
    x, y = tr.contiguous_windows([doc], 4)
    assert x.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, PAD_ID, PAD_ID, PAD_ID]]
    assert y.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, tr.IGNORE, tr.IGNORE, tr.IGNORE]]
    x, y = tr.contiguous_windows([doc, torch.arange(5)], 4, full_only=True)
    assert x.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    x, _ = tr.contiguous_windows([doc], 4, max_windows_per_doc=1)
    assert x.shape == (1, 4)


class _NextIsPlusOne(nn.Module):
    """Puts probability 1/2 on token x+1 after x and spreads 1/2 evenly over the other 257 tokens."""

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, use_cache=False):
        V = 258
        logp = torch.full((*input_ids.shape, V), math.log(0.5 / (V - 1)), dtype=torch.float64)
        logp.scatter_(-1, ((input_ids + 1) % V)[..., None], math.log(0.5))
        return type("Out", (), {"logits": logp.float()})()


def test_bits_per_byte_hand_checked():
    # 9 predicted bytes: 7 follow their predecessor by +1 (1 bit each), 2 do not (1 + log2(257) bits each)
    doc = torch.tensor([10, 11, 12, 13, 50, 51, 52, 53, 54, 7])
    x, y = tr.contiguous_windows([doc], 4)
    r = tr.bits_per_byte(_NextIsPlusOne(), x, y, batch_size=2)
    assert r["bytes"] == 9
    assert r["bpb"] == pytest.approx((7 * 1 + 2 * (1 + math.log2(257))) / 9, rel=1e-6)
    # a model that knows nothing: log2(258) bits per byte
    uniform = type("U", (_NextIsPlusOne,), {"forward": lambda self, input_ids, use_cache=False: type(
        "O", (), {"logits": torch.zeros(*input_ids.shape, 258)})()})()
    assert tr.bits_per_byte(uniform, x, y)["bpb"] == pytest.approx(math.log2(258), rel=1e-6)


@pytest.mark.parametrize("arch", ["qwen3.5", "nemotron-h"])
def test_ssm_memory_of_hand_set_decays(arch):
    model = tr.build_model(arch, seed=0, overrides=tr.TINY_OVERRIDES[arch])
    mods = [m for m in model.modules() if tr.is_gdn(m) or tr.is_mamba2(m)]
    want = []
    with torch.no_grad():
        for li, m in enumerate(mods):
            n = m.A_log.numel()
            # per-token decays independent of the input: zero the input-dependent projection rows
            A = torch.logspace(-4, 0, n, dtype=torch.float64) * (li + 1)
            sp = torch.linspace(0.5, 2.0, n, dtype=torch.float64)  # softplus(dt_bias), above Mamba-2's dt floor
            m.A_log.copy_(A.log())
            m.dt_bias.copy_(sp + torch.log(-torch.expm1(-sp)))
            if tr.is_gdn(m):
                m.in_proj_a.weight.zero_()
                step = torch.nn.functional.softplus(m.dt_bias.double())
            else:
                m.in_proj.weight[-n:].zero_()
                # a step below Nemotron-H's default floor: transformers computes with the mixer's floor,
                # time_step_limit[0] (5.24 sets it to time_step_min = 1e-3; 5.25 keeps the config's
                # (0, inf), no floor)
                m.dt_bias[0] = math.log(math.expm1(1e-4))
                floor = m.time_step_limit[0]  # what the mixer's forward clamps at
                assert floor in (0.0, 1e-3) and model.config.time_step_min == 1e-3
                step = torch.nn.functional.softplus(m.dt_bias.double()).clamp(min=floor)
            rate = m.A_log.double().exp() * step
            want += (1.0 / -torch.expm1(-rate)).tolist()
    x = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(1))
    mem = tr.ssm_memory(model, x, batch_size=2)
    got = [h["memory"] for h in mem["heads"]]
    assert got == pytest.approx(want, rel=1e-5)
    assert mem["tokens"] == 120 and mem["n_heads"] == len(want)
    assert mem["counts"] == {f">={t}": sum(w >= t for w in want) for t in tr.MEMORY_THRESHOLDS}
    assert mem["counts"][">=100"] > mem["counts"][">=10000"] > 0
    assert all(h["mean_alpha"] == pytest.approx(1 - 1 / h["memory"], rel=1e-9) for h in mem["heads"])


def test_long_memory_init_spreads_decays():
    for arch in tr.ARCHS:
        model = tr.build_model(arch, seed=0, overrides=tr.TINY_OVERRIDES[arch])
        for m in model.modules():
            if tr.is_gdn(m) or tr.is_mamba2(m):
                rate = m.A_log.double().exp() * torch.nn.functional.softplus(m.dt_bias.double())
                assert rate.min().item() == pytest.approx(tr.INIT_RATE_RANGE[0], rel=1e-5)
                assert rate.max().item() == pytest.approx(tr.INIT_RATE_RANGE[1], rel=1e-5)
                assert m.A_log.requires_grad and m.dt_bias.requires_grad


def test_full_size_models_fit_one_weight_file():
    for arch in tr.ARCHS:
        model = tr.build_model(arch, seed=0)
        n = tr.param_count(model)
        assert 7_000_000 < n and 2 * n + 64 * 1024 < tr.MAX_FILE_BYTES, (arch, n)


def test_best_checkpoint_keeps_lowest_validation():
    lin = nn.Linear(2, 2)
    best = tr.BestCheckpoint()
    kept = []
    for step, bpb in enumerate([5.0, 4.0, 4.5, 4.0, 3.9, 4.2]):
        with torch.no_grad():
            lin.weight.fill_(step)
        kept.append(best.offer(step, bpb, lin))
    assert kept == [True, True, False, False, True, False]
    assert best.step == 4 and best.bpb == 3.9 and torch.all(best.state["weight"] == 4)


def test_lr_schedule():
    assert tr._lr_factor(0.0, 0, 10, 0.1) == pytest.approx(0.1)
    assert tr._lr_factor(0.0, 9, 10, 0.1) == 1.0
    assert tr._lr_factor(0.0, 10, 10, 0.1) == 1.0
    assert tr._lr_factor(0.5, 50, 10, 0.1) == pytest.approx(0.55)
    assert tr._lr_factor(1.0, 90, 10, 0.1) == pytest.approx(0.1)


def test_sharded_save_loads_back(tmp_path):
    from transformers import AutoModelForCausalLM

    model = tr.build_model("nemotron-h", seed=3, overrides=tr.TINY_OVERRIDES["nemotron-h"])
    card = tr.save_checkpoint(tmp_path, model.state_dict(), model.config,
                              {"name": "t", "describe": "t", "parameters": 1, "class": type(model).__name__},
                              max_file_bytes=100_000, readme=False)
    shards = [f for f in card["files"] if f.endswith(".safetensors")]
    assert len(shards) >= 2 and "model.safetensors.index.json" in card["files"]
    assert all((tmp_path / f).stat().st_size <= 100_000 for f in shards)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    want = tr.storage_state(model.state_dict())
    got = loaded.state_dict()
    assert all(torch.equal(got[k], want[k].float()) for k in want)
    assert want["model.layers.0.mixer.A_log"].dtype == torch.float32  # decays kept exact
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def _tiny_cfg(tmp_path, arch, **kw):
    base = dict(arch=arch, out=str(tmp_path / arch), tiny=True, seq_len=64, batch_size=2, steps=4, eval_every=2,
                log_every=2, eval_batch_size=8, val_max_windows=6, heldout_max_windows=1, memory_windows=1,
                warmup_steps=2, minutes=10.0, device="cpu")
    base.update(kw)
    return tr.TrainConfig(**base)


@pytest.mark.parametrize("arch", ["qwen3.5", "nemotron-h"])
def test_tiny_training_run_writes_a_loadable_checkpoint(tmp_path, arch):
    from transformers import AutoModelForCausalLM

    from precision_lab.gutenberg import gutenberg_documents
    from precision_lab.models.tokenizer import byte_ids

    lines = []
    card = tr.train(_tiny_cfg(tmp_path, arch), log=lines.append)
    out = tmp_path / arch
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "card.json", "config.json", "model.safetensors"]
    assert json.loads((out / "card.json").read_text()) == json.loads(json.dumps(card))
    assert card["status"] == "final" and card["training"]["steps"] == 4 and card["training"]["tokens"] == 4 * 2 * 64
    assert [c["step"] for c in card["learning_curve"]] == [0, 2, 4]
    best = min(card["learning_curve"], key=lambda c: c["val_bpb"])
    assert card["training"]["best_step"] == best["step"] and card["results"]["validation_bpb"] == best["val_bpb"]
    assert card["data"]["heldout"][0] == "hamlet_gut" and len(card["data"]["train"]) == 65
    assert card["ssm_memory"]["n_heads"] == len(card["ssm_memory"]["heads"]) > 0
    assert any("parameters" in s for s in lines) and any("s/step" in s for s in lines)
    assert "held-out bits per byte" in (out / "README.md").read_text()
    tr.verify_weights(out)

    # the folder loads with transformers and reproduces the card's held-out number
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    docs = [byte_ids(d.text) for d in gutenberg_documents("heldout")]
    x, y = tr.contiguous_windows(docs, 64, max_windows_per_doc=1)
    r = tr.bits_per_byte(model, x, y, batch_size=8)
    assert r["bytes"] == card["results"]["heldout_bytes"]
    assert r["bpb"] == pytest.approx(card["results"]["heldout_bpb"], rel=1e-5)

    # a corrupted weight file is refused
    raw = bytearray((out / "model.safetensors").read_bytes())
    raw[-1] ^= 1
    (out / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupted"):
        tr.verify_weights(out)


def test_wall_clock_budget_stops_training(tmp_path):
    texts = {"train": ["to be or not to be, that is the question. " * 200],
             "validation": ["whether 'tis nobler in the mind to suffer " * 10],
             "heldout": ["the slings and arrows of outrageous fortune " * 10]}
    started = time.monotonic()
    cfg = _tiny_cfg(tmp_path, "qwen3.5", steps=None, minutes=0.15, final_margin_s=1.0, eval_every=1000,
                    val_max_windows=None, heldout_max_windows=None)
    card = tr.train(cfg, started=started, log=lambda s: None, documents=texts)
    assert card["training"]["stopped_by"] == "time budget" and card["training"]["steps"] >= 1
    assert card["training"]["train_seconds"] < 9.0
    assert card["data"]["source"] == "given documents"


def test_script_refuses_short_windows():
    from tests._scripts import load_script

    mod = load_script("train_hybrid")
    with pytest.raises(SystemExit):
        mod.parse_args(["--seq-len", "512"])
    assert mod.parse_args(["--seq-len", "512", "--tiny"]).seq_len == 512


def test_saved_config_records_the_step_floor_the_mixers_applied(tmp_path):
    """A model trained under a release that floored the step at time_step_min while its config said
    (0, inf) saves the floor it applied, so that the saved model computes as trained under any release."""
    from transformers import AutoModelForCausalLM

    model = tr.build_model("nemotron-h", seed=3, overrides=tr.TINY_OVERRIDES["nemotron-h"])
    mixers = [m for m in model.modules() if type(m).__name__ == "NemotronHMamba2Mixer"]
    assert mixers
    for m in mixers:  # what 5.24 set on the mixer, whatever the config said
        m.time_step_limit = (1e-3, float("inf"))
    model.config.time_step_limit = (0.0, float("inf"))
    tr.record_step_limits(model)
    assert tuple(model.config.time_step_limit) == (1e-3, float("inf"))
    tr.save_checkpoint(tmp_path, model.state_dict(), model.config,
                       {"name": "t", "describe": "t", "parameters": 1, "class": type(model).__name__}, readme=False)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert [tr.step_limits(m) for m in loaded.modules() if type(m).__name__ == "NemotronHMamba2Mixer"] == \
        [(1e-3, float("inf"))] * len(mixers)

    # mixers that disagree leave the config as it is; a model without Mamba-2 mixers is untouched
    mixers[0].time_step_limit = (0.0, float("inf"))
    model.config.time_step_limit = (0.0, 5.0)
    tr.record_step_limits(model)
    assert tuple(model.config.time_step_limit) == (0.0, 5.0)
    gdn = tr.build_model("qwen3.5", seed=3, overrides=tr.TINY_OVERRIDES["qwen3.5"])
    before = gdn.config.to_dict()
    tr.record_step_limits(gdn)
    assert gdn.config.to_dict() == before
