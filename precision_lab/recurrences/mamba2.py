"""Mamba-2 (SSD) recurrence: torch reference, any float dtype (float64 for ground truth).

Per sequence and head h (group g = h // (H/G)), state S [P, N]:

    dt_t = softplus(dt_raw_t + dt_bias)          α_t = exp(A · dt_t)   (a_t = A·dt_t, a scalar)
    S_t  = α_t S_{t-1} + (dt_t x_t) B_tᵀ         y_t = S_t C_t + D x_t,  then y_t *= silu(z_t)

In the common form of ``_core`` (S_t = S_{t-1} diag(e^{a_t}) + u_t k_tᵀ, y = S q): u = dt·x [P],
k = B [N], q = C [N]. The records do not depend on the state, so ReplaySSM can buffer them as they
are. Window closed form / output-only evaluation and the fold: ``_core.readout`` / ``_core.fold``:

    y = e^{c_W}(S₀ C) + Σ_j e^{c_W − c_j} (B_j·C) dt_j x_j,     S_W = e^{c_W} S₀ + Σ_j e^{c_W − c_j} dt_j x_j B_jᵀ
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _core
from ._core import Prepared, chunk_forward, fold, readout, step  # noqa: F401  (re-exported)


def prepare(inp) -> Prepared:
    """Mamba2Inputs → the common per-head form (see ``precision_lab.layer.Mamba2Inputs`` for shapes)."""
    x = inp.x
    if x.dim() != 4:
        raise ValueError(f"Mamba-2 x must be [B, T, H, P], got {list(x.shape)}")
    Bsz, T, H, P = x.shape
    dtype = _core.compute_dtype(x.dtype)
    if tuple(inp.dt.shape) != (Bsz, T, H):
        raise ValueError(f"Mamba-2 dt must be [B, T, H] = {[Bsz, T, H]}, got {list(inp.dt.shape)}")
    if tuple(inp.A.shape) != (H,):
        raise ValueError(f"Mamba-2 A must be [H] = [{H}], got {list(inp.A.shape)}")
    if inp.B.dim() != 4 or inp.B.shape[:2] != (Bsz, T) or inp.C.shape != inp.B.shape:
        raise ValueError(f"Mamba-2 B and C must both be [B, T, G, N] with B, T = {Bsz}, {T}; "
                         f"got B {list(inp.B.shape)}, C {list(inp.C.shape)}")
    G = inp.B.shape[2]
    if H % G:
        raise ValueError(f"Mamba-2 heads H = {H} must be a multiple of the groups G = {G}")
    for name, t in (("D", inp.D), ("dt_bias", inp.dt_bias)):
        if t is not None and tuple(t.shape) != (H,):
            raise ValueError(f"Mamba-2 {name} must be [H] = [{H}], got {list(t.shape)}")
    if inp.z is not None and tuple(inp.z.shape) != tuple(x.shape):
        raise ValueError(f"Mamba-2 z must be [B, T, H, P] like x, got {list(inp.z.shape)}")

    cast = lambda t: t.to(dtype)
    dt = cast(inp.dt) if inp.dt_bias is None else cast(inp.dt) + cast(inp.dt_bias)
    dt = _core.per_token(F.softplus, dt)
    xc = cast(x)
    rep = H // G
    k = cast(inp.B).repeat_interleave(rep, dim=2)
    q = cast(inp.C).repeat_interleave(rep, dim=2)
    a = (cast(inp.A) * dt).unsqueeze(-1)                     # [B, T, H, 1]
    u = dt.unsqueeze(-1) * xc                               # [B, T, H, P]
    skip = None if inp.D is None else cast(inp.D)[:, None] * xc
    gate = None if inp.z is None else _core.per_token(F.silu, cast(inp.z))
    return Prepared("mamba2", a, k, q, u, None, None, skip, gate, x.dtype)


def decode(inp, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Conventional token-by-token decode, no quantization: (y [B,T,H,P], final state [B,H,P,N])."""
    p = prepare(inp)
    S0 = _core.zeros_state(p) if initial_state is None else _core.check_state(initial_state, p)
    y, S = _core.recurrent(p, S0)
    return p.finish(y), S


def chunked_prefill(inp, initial_state: torch.Tensor | None = None,
                    chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked parallel form, no quantization: (y [B,T,H,P], final state [B,H,P,N])."""
    p = prepare(inp)
    S0 = _core.zeros_state(p) if initial_state is None else _core.check_state(initial_state, p)
    y, S = _core.chunked(p, S0, chunk_size)
    return p.finish(y), S
