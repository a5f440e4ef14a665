"""Model adapters: hybrid transformers models whose SSM state runs under a precision-lab policy.

    from precision_lab.models import load_model, apply_policy, new_stream
    model, tok = load_model("tiny-qwen3.5")                  # preset, hub id or local path
    apply_policy(model, "split:fp16-sr/nvfp4", engine="auto")  # swaps each SSM mixer of THIS model
    out = model.generate(**tok("Once upon a time", return_tensors="pt"), max_new_tokens=20)
    model.precision_lab_report()                              # which code served each layer

Architectures: Qwen3.5 / Qwen3.5-MoE (Gated DeltaNet), Nemotron-H / Nemotron 3 (Mamba-2),
Kimi-Linear (KDA), Mamba-2. ``apply_policy`` replaces each SSM mixer module of the given instance
with a policy mixer (``mixers.py``) that adopts the module's own weights (state_dict unchanged);
nothing is patched globally, other instances are untouched.

Token-by-token cached generation. Every forward with a transformers cache continues one stream:
the first call (the prompt) is the prefill, written once into the checkpoint; each later token is a
decode step of the policy (docs/design.md §4: ReplaySSM buffering and flush every L steps for shared/split,
a rounded store every step for conventional). ``model.generate`` and manual loops
(``model(input_ids=tok, cache=cache, use_cache=True)``) both work; use ``new_stream`` to create the
cache when you want to set the SR sequence ids or the first-call-is-prefill flag. Decode steps run
on the Triton decode-step kernels on CUDA (``triton-decode``, state kept in the packed device
layout) and on the torch ``decode`` engine elsewhere, unless ``engine`` forces another;
``precision_lab.generation`` runs whole decode steps as CUDA graphs. Beam search is not
supported (the policy state does not follow ``reorder_cache``).

Several policies at once: ``apply_policy(model, [p0, p1, ...])`` makes each mixer run rows
``[g*B, (g+1)*B)`` of a ``G*B``-row batch under policy g (the KL driver's lockstep mode).
"""
from __future__ import annotations

import types
from pathlib import Path

import torch
from torch import nn

from ._hf import hub_unreachable_reason, import_transformers
from .mixers import branch_stream
from .presets import PRESETS, build_preset, list_presets

__all__ = ["PRESETS", "apply_policy", "branch_stream", "cache_kwarg", "list_presets", "load_model", "new_stream", "policy_mixers",
           "precision_lab_report", "set_engine", "ssm_modules"]


def load_model(name_or_path_or_preset: str, *, dtype: torch.dtype | str | None = None,
               device: str | torch.device = "cpu", seed: int = 0):
    """Load a model and its tokenizer.

    name_or_path_or_preset: a preset name (``precision-lab models`` lists them), a local directory
        or a hub id (through ``from_pretrained``; real checkpoints default to bf16 weights — the SSM
        state is always computed and kept in fp32 by the policy mixers). A hub id that is not in the
        local cache while the hub cannot be reached (offline mode, no network) fails at once.
    dtype:  weight dtype (default: the preset's, or bfloat16 for checkpoints)
    device: where the model lives
    seed:   weight seed for presets (same seed, same weights)
    Returns ``(model, tokenizer)`` with the model in eval mode and gradients off.
    """
    import_transformers()
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    name = str(name_or_path_or_preset)
    if name in PRESETS:
        from .tokenizer import build_byte_tokenizer

        model = build_preset(name, dtype=dtype, device=device, seed=seed)
        return model, build_byte_tokenizer()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(name).expanduser()
    hub_kwargs = {}
    if not local.exists():
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        not_found = (f"unknown model {name!r}: not a preset ({', '.join(PRESETS)}), not a local directory "
                     "and not a hub id (owner/name)")
        if name.startswith((".", "/", "~")) or name.count("/") != 1:
            raise ValueError(not_found)
        try:
            validate_repo_id(name)
        except HFValidationError as e:
            raise ValueError(f"{not_found}: {e}") from None
        unreachable = hub_unreachable_reason()
        if unreachable is not None:
            if not isinstance(try_to_load_from_cache(name, "config.json"), str):
                raise ValueError(f"cannot load model {name!r}: it is not in the local hub cache and the hub cannot "
                                 f"be reached ({unreachable}); presets: {', '.join(PRESETS)}")
            hub_kwargs["local_files_only"] = True  # cached: load it without a minute of retries
    try:
        # adapter_kwargs: transformers' look-up of a PEFT adapter does not inherit local_files_only
        model = AutoModelForCausalLM.from_pretrained(str(local) if local.exists() else name,
                                                     dtype=dtype or torch.bfloat16, **hub_kwargs,
                                                     **({"adapter_kwargs": dict(hub_kwargs)} if hub_kwargs else {}))
        tok = AutoTokenizer.from_pretrained(str(local) if local.exists() else name, **hub_kwargs)
    except OSError as e:
        raise ValueError(f"cannot load model {name!r} ({e}); presets: {', '.join(PRESETS)}") from e
    model = model.to(device)
    model.eval()
    model.requires_grad_(False)
    model.precision_lab_source = {"pretrained": name}
    return model, tok


def ssm_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of every SSM mixer the adapters know, adapted or not, in order."""
    from .mixers import MIXERS, PolicyMixer

    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, PolicyMixer) or type(m).__name__ in MIXERS]


def policy_mixers(model: nn.Module) -> list:
    """The PolicyMixer modules of an adapted model, in layer order."""
    from .mixers import PolicyMixer

    return [m for _, m in model.named_modules() if isinstance(m, PolicyMixer)]


def apply_policy(model: nn.Module, policy, *, engine: str = "auto", seed: int | None = 0) -> nn.Module:
    """Swap every SSM mixer of ``model`` (this instance only) for a policy mixer.

    policy: a policy string / StatePolicy, or a list of them (lockstep groups, see module docstring)
    engine: "auto" (default: on CUDA the Triton decode-step kernels for decode tokens and the Triton
            scans for prefills; elsewhere the torch decode and scan engines), "decode", "scan",
            "triton" or "triton-decode" (``precision_lab.engines``). The engine that actually served
            each call is recorded and reported by ``model.precision_lab_report()``.
    seed:   stochastic-rounding seed given to every policy (None keeps the policies' own seeds)
    Calling it again on an adapted model changes the policies in place. Returns ``model``.
    """
    from precision_lab.engines import check_engine
    from precision_lab.policy import StatePolicy

    from .mixers import MIXERS, PolicyMixer

    check_engine(engine)
    policies = [policy] if isinstance(policy, (str, StatePolicy)) else list(policy)
    policies = [StatePolicy.parse(p, seed=seed) for p in policies]
    for p in policies:
        # Resolve the formats now so an unknown format fails before any model work. (StatePolicy.validate()
        # would also probe fake(), but its probe passes no SR bits, which SR quantizers refuse.)
        try:
            p.quantizers()
        except (KeyError, ValueError, ImportError) as e:
            raise ValueError(f"policy {p.short_str()!r}: {e}") from e
    found = ssm_modules(model)
    if not found:
        kinds = sorted({type(m).__name__ for m in model.modules()})[:12]
        raise ValueError(f"model {type(model).__name__} has no SSM layers the adapters know (supported mixers: "
                         f"{', '.join(MIXERS)}); its modules include {', '.join(kinds)}")
    for qual, mod in found:
        if isinstance(mod, PolicyMixer):
            mod.set_policies(policies, engine=engine)
            continue
        parent_name, _, child = qual.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = MIXERS[type(mod).__name__](mod, policies, engine=engine)
        setattr(parent, child, new)
    model.precision_lab_policies = policies
    model.precision_lab_report = types.MethodType(precision_lab_report, model)
    return model


def set_engine(model: nn.Module, engine: str) -> None:
    """Set the engine of every policy mixer of ``model``."""
    for m in policy_mixers(model):
        m.set_policies(m.policies, engine=engine)


def precision_lab_report(model: nn.Module) -> dict:
    """Which policies the model runs and which implementation served each SSM layer so far."""
    layers = []
    for qual, m in ssm_modules(model):
        served = dict(sorted((f"{e}:{impl}", n) for (e, impl), n in getattr(m, "served", {}).items()))
        layers.append({"module": qual, "layer_idx": getattr(m, "layer_idx", None),
                       "kind": getattr(m, "kind", None),
                       "original": getattr(m, "original_class", type(m).__name__),
                       "adapted": hasattr(m, "served"), "engine": getattr(m, "engine", None),
                       "calls": served})
    pols = getattr(model, "precision_lab_policies", [])
    return {"model": type(model).__name__, "source": getattr(model, "precision_lab_source", None),
            "policies": [p.short_str() for p in pols], "seed": pols[0].seed if pols else None,
            "layers": layers}


def cache_kwarg(module: nn.Module) -> str:
    """Name of the cache argument of ``module.forward``: ``cache`` (transformers >= 5.2x),
    ``past_key_values`` or ``cache_params`` (older 5.x, e.g. the GPU machine's 5.17)."""
    import inspect

    params = inspect.signature(module.forward).parameters
    for name in ("cache", "past_key_values", "cache_params"):
        if name in params:
            return name
    raise TypeError(f"{type(module).__name__}.forward takes no cache argument")


def new_stream(model: nn.Module, *, seq_ids: torch.Tensor | None = None, first_is_prefill: bool = True,
               engine: str | None = None):
    """A fresh transformers cache with a precision-lab stream attached.

    seq_ids:          [B] global sequence ids for the SR counters (default arange(B))
    first_is_prefill: the first forward is the prefill (False: every token is a decode step)
    engine:           engine for every mixer on this stream (None: each mixer's setting)
    """
    import_transformers()
    from transformers import DynamicCache

    from .mixers import stream_context

    cache = DynamicCache(config=model.config)
    ctx = stream_context(cache)
    ctx.seq_ids = None if seq_ids is None else torch.as_tensor(seq_ids, dtype=torch.int64)
    ctx.first_is_prefill = first_is_prefill
    ctx.engine = engine
    return cache
