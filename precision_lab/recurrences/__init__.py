"""Torch references of the SSM recurrences (docs/design.md §3): Mamba-2, GDN, KDA.

Each module has ``prepare(inputs) -> Prepared`` (the common per-head form of ``_core``),
``decode(inputs, initial_state)`` (conventional, token by token) and ``chunked_prefill``. The
generic math (step, output-only readout, fold, window d's, chunked form) lives once in ``_core``.
"""
from __future__ import annotations

from . import gdn, kda, mamba2
from ._core import (
    Prepared,
    check_state,
    chunk_forward,
    chunked,
    compute_dtype,
    cumulative,
    delta,
    fold,
    readout,
    recurrent,
    step,
    window_deltas,
    window_outputs,
    zeros_state,
)

_MODULES = {"mamba2": mamba2, "gdn": gdn, "kda": kda}


def prepare(inputs) -> Prepared:
    """Any of Mamba2Inputs / GDNInputs / KDAInputs → Prepared."""
    kind = getattr(inputs, "kind", None)
    if kind not in _MODULES:
        raise TypeError(f"expected Mamba2Inputs, GDNInputs or KDAInputs, got {type(inputs).__name__}")
    return _MODULES[kind].prepare(inputs)


__all__ = ["Prepared", "check_state", "chunk_forward", "chunked", "compute_dtype", "cumulative", "delta", "fold", "gdn",
           "kda", "mamba2", "prepare", "readout", "recurrent", "step", "window_deltas", "window_outputs", "zeros_state"]
