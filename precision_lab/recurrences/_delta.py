"""Shared input preparation of the two delta-rule layers (GDN, KDA); the math is in gdn.py / kda.py."""
from __future__ import annotations

import torch

from . import _core
from ._core import Prepared


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x · rsqrt(Σx² + eps) along the last axis (the normalisation HF's Qwen3-Next / fla use)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def prepare_delta(inp, kind: str) -> Prepared:
    q, k, v = inp.q, inp.k, inp.v
    label = "GDN" if kind == "gdn" else "KDA"
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"{label} q and k must both be [B, T, Hk, K], got q {list(q.shape)}, k {list(k.shape)}")
    Bsz, T, Hk, K = q.shape
    if v.dim() != 4 or v.shape[:2] != (Bsz, T):
        raise ValueError(f"{label} v must be [B, T, Hv, V] with B, T = {Bsz}, {T}, got {list(v.shape)}")
    Hv = v.shape[2]
    if Hv % Hk:
        raise ValueError(f"{label} value heads Hv = {Hv} must be a multiple of key heads Hk = {Hk} (GVA)")
    g_shape = (Bsz, T, Hv) if kind == "gdn" else (Bsz, T, Hv, K)
    if tuple(inp.g.shape) != g_shape:
        raise ValueError(f"{label} g must be {list(g_shape)}, got {list(inp.g.shape)}")
    if tuple(inp.beta.shape) != (Bsz, T, Hv):
        raise ValueError(f"{label} beta must be [B, T, Hv] = {[Bsz, T, Hv]}, got {list(inp.beta.shape)}")
    dtype = _core.compute_dtype(v.dtype)
    cast = lambda t: t.to(dtype)
    qc, kc = cast(q), cast(k)
    if inp.qk_l2norm:
        qc, kc = _core.per_token(l2norm, qc), _core.per_token(l2norm, kc)
    scale = K ** -0.5 if inp.scale is None else float(inp.scale)
    rep = Hv // Hk
    qc = (qc * scale).repeat_interleave(rep, dim=2)
    kc = kc.repeat_interleave(rep, dim=2)
    a = cast(inp.g) if kind == "kda" else cast(inp.g).unsqueeze(-1)
    return Prepared(kind, a, kc, qc, None, cast(v), cast(inp.beta), None, None, v.dtype)


def decode(inp, kind: str, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    p = prepare_delta(inp, kind)
    S0 = _core.zeros_state(p) if initial_state is None else _core.check_state(initial_state, p)
    y, S = _core.recurrent(p, S0)
    return p.finish(y), S


def chunked_prefill(inp, kind: str, initial_state: torch.Tensor | None = None,
                    chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    p = prepare_delta(inp, kind)
    S0 = _core.zeros_state(p) if initial_state is None else _core.check_state(initial_state, p)
    y, S = _core.chunked(p, S0, chunk_size)
    return p.finish(y), S
