"""Gated DeltaNet recurrence: torch reference, any float dtype (float64 for ground truth).

Per sequence and value head h (key head h // (Hv/Hk), GVA), state S [V, K]; q, k L2-normalised
(``qk_l2norm``), q scaled by ``scale`` (default K^-1/2):

    α_t = exp(g_t)                  (scalar per head; a_t = g_t)
    d_t = β_t (v_t − α_t S_{t-1} k_t)
    S_t = α_t S_{t-1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ = α_t S_{t-1} + d_t k_tᵀ
    o_t = S_t q_t

In the common form of ``_core``: u = d (depends on the state), k = k, q = scale·q. Window closed
form with checkpoint S₀ and cumulative log decay c:

    d_j = β_j (v_j − [e^{c_j} S₀ k_j + Σ_{i<j} e^{c_j − c_i} (k_i·k_j) d_i])
    o   = e^{c_W}(S₀ q) + Σ_j e^{c_W − c_j} (k_j·q) d_j,      S_W = e^{c_W} S₀ + Σ_j e^{c_W − c_j} d_j k_jᵀ

Which checkpoint the d's of a ReplaySSM window are computed from (``gdn_fold``) is fixed in
``precision_lab.engines.torch_decode``.
"""
from __future__ import annotations

import torch

from . import _delta
from ._core import Prepared, chunk_forward, fold, readout, step  # noqa: F401  (re-exported)
from ._delta import l2norm  # noqa: F401


def prepare(inp) -> Prepared:
    """GDNInputs → the common per-head form (see ``precision_lab.layer.GDNInputs`` for shapes)."""
    return _delta.prepare_delta(inp, "gdn")


def decode(inp, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Conventional token-by-token decode, no quantization: (o [B,T,Hv,V], final state [B,Hv,V,K])."""
    return _delta.decode(inp, "gdn", initial_state)


def chunked_prefill(inp, initial_state: torch.Tensor | None = None,
                    chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked parallel form (triangular solve per chunk): (o [B,T,Hv,V], final state [B,Hv,V,K])."""
    return _delta.chunked_prefill(inp, "gdn", initial_state, chunk_size)
