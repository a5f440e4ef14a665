"""Torch references of the Mamba-2 decode-step kernels (``decode.py``), fp32, in the kernels' order.

Each function computes exactly what one kernel launch computes, on dense per-batch tensors (no
pool, no slots): the tests gather the kernels' pool slots and compare. The math is in ``decode.py``'s
docstring. Whole streams are driven by ``precision_lab.engines.triton_decode`` and checked against
the torch decode engine.
"""
from __future__ import annotations

import torch
from precision_lab.kernels.decode_state import PackedState, rbits_for, torch_softplus


def _heads(t: torch.Tensor, H: int) -> torch.Tensor:
    """[..., G, N] → [..., H, N]: each head sees its group's vector."""
    G = t.shape[-2]
    return t.repeat_interleave(H // G, dim=-2)


def _token(dt, A, dt_bias):
    """(dt after softplus, log decay a = A·dt) in the kernels' order."""
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    dt = torch_softplus(dt)
    return dt, A.float() * dt


def _finish(y, x, D, z):
    if D is not None:
        y = y + D.float()[:, None] * x
    if z is not None:
        z = z.float()
        y = y * (z / (1.0 + torch.exp(-z)))
    return y


def store(S: torch.Tensor, fmt: str, *, seed: int, layer: int, seq_ids, events, copy: int) -> PackedState:
    """The codes a kernel stores for the fp32 states S [B, H, R, C] (one write event per sequence)."""
    return PackedState.quantize(S, fmt, rbits_for(S.shape, fmt, seed=seed, layer=layer, seq_ids=seq_ids,
                                                  events=events, copy=copy))


def mamba2_conventional_step_ref(S, x, dt, A, B, C, D=None, dt_bias=None, z=None):
    """S [B, H, P, N] fp32 (the decoded stored state); x [B, H, P]; dt [B, H]; B, C [B, G, N].

    Returns (y [B, H, P] fp32, S_new [B, H, P, N] fp32 before rounding)."""
    H = x.shape[1]
    dt, a = _token(dt, A, dt_bias)
    x = x.float()
    S = torch.exp(a)[..., None, None] * S + (dt[..., None] * x)[..., :, None] * _heads(B.float(), H)[..., None, :]
    y = (S * _heads(C.float(), H)[..., None, :]).sum(-1)
    return _finish(y, x, D, z), S


def _window_out(S_base, u, b, a, lo, p, c):
    """Output-only form at position p over records lo..p (u [B,J,H,P], b [B,J,H,N], a [B,J,H])."""
    J = a.shape[1]
    j = torch.arange(J, device=a.device).view(1, J, 1)
    m = (j >= lo) & (j <= p)
    w_a = torch.where(m, a, torch.zeros_like(a))
    tot = w_a.sum(1)                                                    # [B, H]
    decay = torch.where(m, torch.exp(tot[:, None] - torch.cumsum(w_a, 1)), torch.zeros_like(a))
    score = (b * c[:, None]).sum(-1)                                    # [B, J, H]
    return torch.exp(tot)[..., None] * (S_base * c[..., None, :]).sum(-1) + ((decay * score)[..., None] * u).sum(1)


def mamba2_replay_step_ref(S_update, S_read, hist, x, dt, A, B, C, D=None, dt_bias=None, z=None, *,
                           flush=False, fold_new=False):
    """One ReplaySSM step (see decode.py) on dense tensors.

    S_update / S_read: [B, H, P, N] fp32 decoded copies; hist: dict u [B, W, H, P], b [B, W, G, N],
    a [B, W, H] (logical order, oldest first); x [B, T, H, P]; dt [B, T, H]; B, C [B, T, G, N].
    Returns (y [B, T, H, P], new records dict (T tokens), S fp32 after the fold or None).
    """
    Bsz, T, H, P = x.shape
    W = hist["a"].shape[1]
    dtv, a_new = _token(dt, A, dt_bias)
    new = {"u": dtv[..., None] * x.float(), "b": B.float(), "a": a_new}
    S_new = None
    if flush:
        # closed-form fold (the kernel's order): e^{c_W} S + (w ⊙ U)ᵀ B, w_j = e^{c_W - c_j}; an
        # autoregressive flush (fold_new) folds its own token as one more record of the same product
        k = W + int(fold_new)
        a, u_f, b_f = (torch.cat([hist[n], new[n][:, :1]], 1)[:, :k] for n in ("a", "u", "b"))
        tot = a.sum(1)
        w = torch.exp(tot[:, None] - torch.cumsum(a, 1))
        S = torch.exp(tot)[..., None, None] * S_update + \
            torch.einsum("bjhp,bjhn->bhpn", w[..., None] * u_f, _heads(b_f, H))
        S_new, lo = S, k
    else:
        S, lo = S_read, 0
    u = torch.cat([hist["u"], new["u"]], 1)
    b = _heads(torch.cat([hist["b"], new["b"]], 1), H)
    a = torch.cat([hist["a"], new["a"]], 1)
    ys = []
    for t in range(T):
        c = _heads(C[:, t].float(), H)
        y = _window_out(S, u, b, a, lo, W + t, c)
        ys.append(_finish(y, x[:, t].float(), D, None if z is None else z[:, t]))
    return torch.stack(ys, 1), new, S_new
