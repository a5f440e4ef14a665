"""Model presets: tiny models of each adapted architecture (offline, for tests and demos) and
random-init models with the shapes of published checkpoints (for speed work).

A preset name works wherever a model is accepted (CLI ``--model``, ``load_model``, lm-eval
``pretrained=``). Tiny presets use the local byte tokenizer (``tokenizer.py``) and an init that makes
state errors visible: random-init models at HF's default ``initializer_range`` (0.02) give
near-uniform logits that hide quantization effects (docs/pitfalls.md §6), so tiny presets use 0.3 and give
their SSM heads slow decays (long memory), where state rounding accumulates the way it does in
trained models.

Shape presets copy the SSM/attention layer counts and state shapes of docs/reference.md §2; the remaining
sizes (hidden size, MLP width, vocabulary) are our best reading of the published configs and are
marked as such in ``describe``. Their weights are random: they are for timing, not for KL numbers.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Preset:
    name: str
    model_type: str            # transformers model_type (qwen3_5_text, nemotron_h, kimi_linear, mamba2)
    config: dict               # config kwargs
    kind: str                  # "tiny" (tests/demos), "shape" (random-init copy of a published shape) or
    #                            "trained" (weights shipped in precision_lab/assets/models/<name>)
    describe: str
    default_dtype: str = "float32"
    init: Callable | None = field(default=None, compare=False)  # extra init applied after HF's


def _log_uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))).float()


def _slow_decay_init(model: torch.nn.Module, seed: int) -> None:
    """Give every SSM head a decay rate between 1e-3 and 0.1 per token (memory of 10 to 1000 tokens)
    and keep the decay projections small, so the recurrent state integrates over long spans.

    Applied to the tiny presets only. The init range 0.3 alone makes decay inputs so large that
    every head forgets within a few tokens, and a state that forgets cannot accumulate error."""
    gen = torch.Generator().manual_seed(seed + 12345)
    with torch.no_grad():
        for mod in model.modules():
            cls = type(mod).__name__
            if cls.endswith("GatedDeltaNet"):
                # g = -exp(A_log) * softplus(a + dt_bias); a = in_proj_a(h) small -> g ~ -A * softplus(dt_bias)
                n = mod.A_log.numel()
                mod.A_log.copy_(torch.log(_log_uniform(n, 1e-3, 0.1, gen)))
                mod.dt_bias.fill_(0.5413)  # softplus(0.5413) = 1
                mod.in_proj_a.weight.mul_(0.05)
            elif cls in ("NemotronHMamba2Mixer", "Mamba2Mixer"):
                # alpha = exp(-exp(A_log) * softplus(dt + dt_bias)): decay ~ A * dt with dt ~ 0.1
                n = mod.A_log.numel()
                mod.A_log.copy_(torch.log(_log_uniform(n, 1e-2, 1.0, gen)))
                mod.dt_bias.fill_(-2.252)  # softplus(-2.252) = 0.1
                w = mod.in_proj.weight
                w[-n:].mul_(0.05)  # the dt rows of in_proj
            elif cls == "KimiLinearDeltaAttention":
                fg = mod.forget_gate
                fg.A_log.copy_(torch.log(_log_uniform(fg.A_log.numel(), 1e-3, 0.1, gen)).view_as(fg.A_log))
                fg.dt_bias.fill_(0.5413)
                fg.f_b_proj.weight.mul_(0.05)


_TINY_COMMON = {"vocab_size": 258, "initializer_range": 0.3, "tie_word_embeddings": False,
                "pad_token_id": 257, "bos_token_id": 256, "eos_token_id": 256}

PRESETS: dict[str, Preset] = {}


def _add(p: Preset) -> None:
    PRESETS[p.name] = p


_add(Preset(
    "tiny-qwen3.5", "qwen3_5_text",
    {**_TINY_COMMON, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
     "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
     "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
     "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "max_position_embeddings": 1 << 20},
    "tiny", "Qwen3.5 (GDN, GVA 2 key / 4 value heads, 32x32 states): 3 GDN + 1 attention layer, byte vocab",
    init=_slow_decay_init))
_add(Preset(
    "tiny-nemotron-h", "nemotron_h",
    {**_TINY_COMMON, "hidden_size": 64, "intermediate_size": 128, "hybrid_override_pattern": "M-M*M-",
     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
     "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 32, "n_groups": 2, "conv_kernel": 4,
     "chunk_size": 16, "max_position_embeddings": 1 << 20, "time_step_limit": (0.0, float("inf"))},
    "tiny", "Nemotron-H (Mamba-2, 8 heads of 16x32, 2 groups): 3 Mamba-2 + 1 attention + 2 MLP blocks",
    init=_slow_decay_init))
_add(Preset(
    "tiny-kimi-linear", "kimi_linear",
    {**_TINY_COMMON, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
     "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
     "mlp_layer_types": ["dense"] * 4, "num_attention_heads": 4, "num_key_value_heads": 4,
     "kv_lora_rank": 32, "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
     "v_head_dim": 16, "linear_num_heads": 4, "linear_head_dim": 32, "linear_conv_kernel_dim": 4,
     "num_local_experts": 4, "moe_intermediate_size": 32, "num_experts_per_tok": 2,
     "max_position_embeddings": 1 << 20},
    "tiny", "Kimi-Linear (KDA, 4 heads of 32x32, per-channel decay): 3 KDA + 1 MLA layer",
    init=_slow_decay_init))
_add(Preset(
    "tiny-mamba2", "mamba2",
    {**_TINY_COMMON, "hidden_size": 64, "num_hidden_layers": 3, "num_heads": 8, "head_dim": 16,
     "expand": 2, "state_size": 32, "n_groups": 2, "conv_kernel": 4, "chunk_size": 16},
    "tiny", "Mamba-2 (pure SSM, 8 heads of 16x32, 2 groups): 3 layers",
    init=_slow_decay_init))

# Shapes from docs/reference.md §2 (SSM/attention layer counts and state shapes). Other sizes are assumptions.
_add(Preset(
    "qwen3.5-4b-shape", "qwen3_5_text",
    {"vocab_size": 248320, "hidden_size": 2560, "intermediate_size": 9216, "num_hidden_layers": 32,
     "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
     "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
     "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
     "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "tie_word_embeddings": True,
     "max_position_embeddings": 262144},
    "shape", "random-init Qwen3.5-4B shape: 24 GDN (16 key / 32 value heads, 128x128) + 8 attention "
    "layers; hidden 2560, MLP 9216, vocab 248320 (non-SSM sizes assumed)", default_dtype="bfloat16"))
_add(Preset(
    "nemotron-3-nano-4b-shape", "nemotron_h",
    {"vocab_size": 131072, "hidden_size": 3072, "intermediate_size": 12288,
     "hybrid_override_pattern": "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-M-",
     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
     "mamba_num_heads": 96, "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
     "chunk_size": 128, "max_position_embeddings": 262144},
    "shape", "random-init Nemotron-3-Nano-4B shape: 21 Mamba-2 (96 heads, 80x128, 8 groups) + 4 attention "
    "layers; hidden 3072, MLP 12288, vocab 131072 (non-SSM sizes assumed)", default_dtype="bfloat16"))


# Trained byte-level hybrids shipped with the package (scripts/train_hybrid.py; docs/training.md):
# weights, transformers config and model card in precision_lab/assets/models/<name>/.
TRAINED = {
    "gutenberg-qwen3.5": ("qwen3_5_text", "Qwen3.5-style hybrid trained on the Gutenberg (Shakespeare) train split: "
                          "6 Gated DeltaNet + 2 attention layers, 7.4M parameters, byte vocabulary"),
    "gutenberg-nemotron-h": ("nemotron_h", "Nemotron-H-style hybrid trained on the Gutenberg (Shakespeare) train "
                             "split: 6 Mamba-2 + 2 attention + 6 MLP blocks, 7.4M parameters, byte vocabulary"),
}
for _name, (_mt, _desc) in TRAINED.items():
    _add(Preset(_name, _mt, {}, "trained", _desc, default_dtype="float32"))


def trained_folder(name: str):
    """The folder of a shipped trained model (weights, config.json, card.json, README.md)."""
    from importlib import resources

    return resources.files("precision_lab.assets").joinpath("models", name)


def trained_card(name: str) -> dict:
    """The model card (card.json) of a shipped trained model."""
    import json

    return json.loads(trained_folder(name).joinpath("card.json").read_text())


def list_presets() -> list[dict]:
    """One dict per preset: name, kind ("tiny" | "shape" | "trained"), architecture, description."""
    return [{"name": p.name, "kind": p.kind, "model_type": p.model_type, "dtype": p.default_dtype,
             "description": p.describe} for p in PRESETS.values()]


def build_config(name: str):
    """The transformers config of a preset (no weights)."""
    from transformers import AutoConfig

    p = PRESETS[name]
    if p.kind == "trained":
        return AutoConfig.from_pretrained(str(trained_folder(name)))
    return AutoConfig.for_model(p.model_type, **p.config)


def load_trained(name: str, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """A shipped trained model, its weight files checked against the sha256 in its card first (a
    damaged or truncated file is refused with the file's name). Weights load in ``dtype``
    (default float32: the shipped bf16 weights upcast, so CPU runs compute in fp32)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from precision_lab.training import verify_weights

    folder = Path(str(trained_folder(name)))
    if not (folder / "card.json").is_file():
        raise FileNotFoundError(f"trained model {name!r}: {folder} holds no card.json (incomplete installation?)")
    verify_weights(folder)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype or torch.float32)
    except Exception as e:  # noqa: BLE001 - a damaged file that passed the checksum, or a config problem
        raise ValueError(f"trained model {name!r} in {folder} cannot be loaded: {type(e).__name__}: {e}") from e
    model = model.to(device)
    model.eval()
    model.requires_grad_(False)
    model.precision_lab_source = {"preset": name, "kind": "trained", "folder": str(folder)}
    return model


def build_preset(name: str, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
                 seed: int = 0) -> torch.nn.Module:
    """A randomly initialised model of preset ``name``, the same weights for the same seed, built
    without touching the global RNG."""
    from transformers import AutoModelForCausalLM

    p = PRESETS[name]
    if p.kind == "trained":
        return load_trained(name, dtype=dtype, device=device)
    config = build_config(name)
    dtype = dtype or getattr(torch, p.default_dtype)
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if p.init else dtype)
        if p.init is not None:
            p.init(model, seed)
            model = model.to(dtype)
    model.eval()
    model.requires_grad_(False)
    model.precision_lab_source = {"preset": name, "seed": seed, "kind": p.kind}
    return model
