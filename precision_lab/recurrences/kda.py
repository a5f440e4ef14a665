"""Kimi Delta Attention recurrence: torch reference, any float dtype (float64 for ground truth).

As GDN (gdn.py) with a per-channel decay along the key axis K: g_t [K], α_t = exp(g_t) [K]:

    d_t = β_t (v_t − S_{t-1} diag(α_t) k_t)
    S_t = S_{t-1} diag(α_t) + d_t k_tᵀ,          o_t = S_t q_t

Window closed form with the cumulative log decay c_j ∈ R^K (⊙ elementwise along K):

    d_j = β_j (v_j − [S₀ (e^{c_j} ⊙ k_j) + Σ_{i<j} ((e^{c_j − c_i} ⊙ k_i)·k_j) d_i])
    o   = S₀ (e^{c_W} ⊙ q) + Σ_j ((e^{c_W − c_j} ⊙ k_j)·q) d_j,   S_W = S₀ diag(e^{c_W}) + Σ_j d_j (e^{c_W − c_j} ⊙ k_j)ᵀ
"""
from __future__ import annotations

import torch

from . import _delta
from ._core import Prepared, chunk_forward, fold, readout, step  # noqa: F401  (re-exported)


def prepare(inp) -> Prepared:
    """KDAInputs → the common per-head form (see ``precision_lab.layer.KDAInputs`` for shapes)."""
    return _delta.prepare_delta(inp, "kda")


def decode(inp, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Conventional token-by-token decode, no quantization: (o [B,T,Hv,V], final state [B,Hv,V,K])."""
    return _delta.decode(inp, "kda", initial_state)


def chunked_prefill(inp, initial_state: torch.Tensor | None = None,
                    chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked parallel form (triangular solve per chunk): (o [B,T,Hv,V], final state [B,Hv,V,K])."""
    return _delta.chunked_prefill(inp, "kda", initial_state, chunk_size)
