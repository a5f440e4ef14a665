"""The engines that run an SSM layer under a state policy, declared once (docs/design.md §4, §8).

All engines serve the same semantics and read and write the same state (``precision_lab.state``):

=================  ============================================================================
``decode``         token by token through the torch state machine (``engines/torch_decode.py``); the
                   ground truth, and the only engine for KDA, custom and MX formats
``scan``           window-parallel teacher forcing in torch (``engines/torch_scan.py``)
``triton``         window-parallel teacher forcing on the Triton scan kernels
                   (``engines/triton_scan.py``)
``triton-decode``  token by token on the Triton decode-step kernels, state in the packed device
                   layout (``engines/triton_decode.py``): what generation runs on a GPU
``auto``           resolved by ``resolve``: on CUDA ``triton-decode`` for single-token steps and
                   ``triton`` for multi-token forwards; elsewhere ``decode`` and ``scan``
=================  ============================================================================

An engine that cannot serve a call (a format without a Triton codec, KDA, no GPU and no
interpreter) falls back to a torch engine and says so in ``LayerStats.implementation``
(``"torch fallback (<reason>): ..."``); nothing changes semantics silently.
"""
from __future__ import annotations

import importlib

import torch

ENGINES = ("decode", "scan", "triton", "triton-decode")
ENGINE_CHOICES = (*ENGINES, "auto")

# engine name -> (module, function) implementing ``fn(inputs, policy, **run_layer kwargs) -> (y, stats)``
_IMPLEMENTATIONS = {
    "decode": ("precision_lab.engines.torch_decode", "run_decode"),
    "scan": ("precision_lab.engines.torch_scan", "run_layer_scan"),
    "triton": ("precision_lab.engines.triton_scan", "run_layer_triton"),
    "triton-decode": ("precision_lab.engines.triton_decode", "run_layer_triton_decode"),
}


def check_engine(engine: str, *, allow_auto: bool = True) -> str:
    """``engine`` if it is a known name, else a ValueError listing the names."""
    names = ENGINE_CHOICES if allow_auto else ENGINES
    if engine not in names:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(names)}")
    return engine


def resolve(engine: str, *, tokens: int | None, device: torch.device | str) -> str:
    """The engine that serves a call: ``auto`` by token count and device (see the module table),
    any other name as given. ``tokens=None``: a teacher-forced segment of any length."""
    check_engine(engine)
    if engine != "auto":
        return engine
    cuda = torch.device(device).type == "cuda"
    if tokens == 1:
        return "triton-decode" if cuda else "decode"
    return "triton" if cuda else "scan"


def implementation(engine: str):
    """The callable behind an engine name."""
    module, fn = _IMPLEMENTATIONS[check_engine(engine, allow_auto=False)]
    try:
        return getattr(importlib.import_module(module), fn)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"engine {engine!r} is not available: cannot load {module}.{fn} ({e})") from e


__all__ = ["ENGINES", "ENGINE_CHOICES", "check_engine", "implementation", "resolve"]
