"""Torch references of the GDN decode-step kernels (``decode.py``), fp32, in the kernels' order.

Dense per-batch tensors (no pool, no slots); the math is in ``decode.py``'s docstring. Also
``gdn_stream_reference``: a whole autoregressive stream under a ``StatePolicy`` (docs/design.md §4).
"""
from __future__ import annotations

import torch
from precision_lab.kernels.decode_state import PackedState, rbits_for
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE


def _heads(t: torch.Tensor, Hv: int, dim: int = -2) -> torch.Tensor:
    """key-head tensor [..., Hk, K] → value heads [..., Hv, K] (GVA)."""
    return t.repeat_interleave(Hv // t.shape[dim], dim=dim)


def _l2norm(x: torch.Tensor, norm: bool) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6) if norm else x


def _qk(q, k, Hv, scale, norm):
    K = q.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    return scale * _heads(_l2norm(q.float(), norm), Hv), _heads(_l2norm(k.float(), norm), Hv)


def store(S, fmt, *, seed, layer, seq_ids, events, copy) -> PackedState:
    """The codes a kernel stores for the fp32 states S [B, H, R, C]."""
    return PackedState.quantize(S, fmt, rbits_for(S.shape, fmt, seed=seed, layer=layer, seq_ids=seq_ids,
                                                  events=events, copy=copy))


def _conv(S, q, k, v, g, beta):
    """One conventional update on value-head tensors: q, k [B, Hv, K]; v [B, Hv, V]; g, beta [B, Hv]."""
    alpha = torch.exp(g.float())
    d = beta.float()[..., None] * (v.float() - alpha[..., None] * (S * k[..., None, :]).sum(-1))
    S = alpha[..., None, None] * S + d[..., :, None] * k[..., None, :]
    return S, d, (S * q[..., None, :]).sum(-1)


def gdn_conventional_step_ref(S, q, k, v, g, beta, *, scale=None, qk_l2norm=True):
    """S [B, Hv, V, K] fp32; q, k [B, Hk, K]; v [B, Hv, V]; g, beta [B, Hv].
    Returns (o [B, Hv, V], S_new fp32 before rounding)."""
    qh, kh = _qk(q, k, v.shape[1], scale, qk_l2norm)
    S, _, o = _conv(S, qh, kh, v, g, beta)
    return o, S


def gdn_replay_step_ref(S_update, S_read, hist, q, k, v, g, beta, *, scale=None, qk_l2norm=True,
                        flush=False, fold_new=False, recompute=True):
    """One ReplaySSM GDN step on dense tensors.

    hist: dict k [B, W, Hv, K] (normalised, per value head), d, v [B, W, Hv, V], a, beta [B, W, Hv].
    q, k [B, T, Hk, K]; v [B, T, Hv, V]; g, beta [B, T, Hv].
    Returns (o [B, T, Hv, V], new records dict for the T tokens, S fp32 after the fold or None).
    """
    Bsz, T, Hv, V = v.shape
    W = hist["a"].shape[1]
    S_new = None
    if flush:
        S = S_update
        a, kk = hist["a"], hist["k"]                                   # [B, W, Hv], [B, W, Hv, K]
        c = torch.cumsum(a, 1)
        if recompute:
            sk0 = torch.einsum("bhvk,bjhk->bjhv", S, kk)                 # S k_j
            gram = torch.einsum("bihk,bjhk->bijh", kk, kk)               # k_i·k_j
            ds = []
            for j in range(W):
                c_prev = a[:, :j].sum(1)
                s_k = torch.exp(c_prev)[..., None] * sk0[:, j]
                if j:
                    wi = torch.exp(c_prev[:, None] - c[:, :j])             # [B, j, Hv]
                    s_k = s_k + ((wi * gram[:, :j, j])[..., None] * torch.stack(ds, 1)).sum(1)
                ds.append(hist["beta"][:, j][..., None] * (hist["v"][:, j] - torch.exp(a[:, j])[..., None] * s_k))
            d = torch.stack(ds, 1) if W else hist["d"]
        else:
            d = hist["d"]
        tot = a.sum(1)
        w = torch.exp(tot[:, None] - c)
        S = torch.exp(tot)[..., None, None] * S + torch.einsum("bjhv,bjhk->bhvk", w[..., None] * d, kk)
        lo = W
    else:
        S, lo = S_read, 0
    if fold_new:
        qh, kh = _qk(q[:, 0], k[:, 0], Hv, scale, qk_l2norm)
        S, d, o = _conv(S, qh, kh, v[:, 0], g[:, 0], beta[:, 0])
        new = {"k": kh[:, None], "d": d[:, None], "v": v.float(), "a": g.float(), "beta": beta.float()}
        return o[:, None], new, S
    if flush:
        S_new = S
    tk = [hist["k"][:, j] for j in range(W)] if not flush else [None] * W
    td = [hist["d"][:, j] for j in range(W)] if not flush else [None] * W
    ta = [hist["a"][:, j] for j in range(W)] if not flush else [None] * W
    outs, new = [], {"k": [], "d": []}
    for t in range(T):
        qh, kh = _qk(q[:, t], k[:, t], Hv, scale, qk_l2norm)
        p = W + t
        if p > lo:
            a = torch.stack(ta[lo:p], 1)                                   # [B, J, Hv]
            kk = torch.stack(tk[lo:p], 1)
            dd = torch.stack(td[lo:p], 1)
            tot = a.sum(1)
            decay = torch.exp(tot[:, None] - torch.cumsum(a, 1))
            s_q = torch.exp(tot)[..., None] * (S * qh[..., None, :]).sum(-1) + \
                ((decay * (kk * qh[:, None]).sum(-1))[..., None] * dd).sum(1)
            s_k = torch.exp(tot)[..., None] * (S * kh[..., None, :]).sum(-1) + \
                ((decay * (kk * kh[:, None]).sum(-1))[..., None] * dd).sum(1)
        else:
            s_q, s_k = (S * qh[..., None, :]).sum(-1), (S * kh[..., None, :]).sum(-1)
        alpha = torch.exp(g[:, t].float())
        d = beta[:, t].float()[..., None] * (v[:, t].float() - alpha[..., None] * s_k)
        outs.append(alpha[..., None] * s_q + (kh * qh).sum(-1)[..., None] * d)
        tk.append(kh)
        td.append(d)
        ta.append(g[:, t].float())
        new["k"].append(kh)
        new["d"].append(d)
    new = {"k": torch.stack(new["k"], 1), "d": torch.stack(new["d"], 1), "v": v.float(), "a": g.float(),
           "beta": beta.float()}
    return torch.stack(outs, 1), new, S_new


def gdn_stream_reference(q, k, v, g, beta, *, policy, scale=None, qk_l2norm=True, S0=None, seq_ids=None,
                         layer: int = 0):
    """A whole autoregressive GDN stream through the step references.
    Returns (o [B, T, Hv, V], final decoded update copy, final decoded read copy, writes)."""
    Bsz, T, Hv, V = v.shape
    K = q.shape[-1]
    seq_ids = torch.arange(Bsz) if seq_ids is None else seq_ids.cpu()
    S0 = torch.zeros(Bsz, Hv, V, K) if S0 is None else S0.float()
    kw = dict(seed=policy.seed, layer=layer, seq_ids=seq_ids)
    ev0 = torch.zeros(Bsz, dtype=torch.int64)
    upd = store(S0, policy.update, events=ev0, copy=COPY_UPDATE, **kw).dequantize()
    split = policy.mode == "split"
    rd = store(S0, policy.read, events=ev0, copy=COPY_READ, **kw).dequantize() if split else upd
    recompute = policy.gdn_fold == "recompute"
    writes, outs, L = 0, [], policy.buffer_len
    empty = {"k": torch.zeros(Bsz, 0, Hv, K), "d": torch.zeros(Bsz, 0, Hv, V), "v": torch.zeros(Bsz, 0, Hv, V),
             "a": torch.zeros(Bsz, 0, Hv), "beta": torch.zeros(Bsz, 0, Hv)}
    hist = empty
    for t in range(T):
        sl = slice(t, t + 1)
        ev = torch.full((Bsz,), writes + 1, dtype=torch.int64)
        if not policy.is_replay:
            o, S = gdn_conventional_step_ref(upd, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], scale=scale,
                                             qk_l2norm=qk_l2norm)
            upd = rd = store(S, policy.update, events=ev, copy=COPY_UPDATE, **kw).dequantize()
            writes += 1
            outs.append(o)
            continue
        flush = t % L == L - 1
        o, new, S = gdn_replay_step_ref(upd, rd, hist, q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl],
                                        scale=scale, qk_l2norm=qk_l2norm, flush=flush, fold_new=flush,
                                        recompute=recompute)
        outs.append(o[:, 0])
        if flush:
            upd = store(S, policy.update, events=ev, copy=COPY_UPDATE, **kw).dequantize()
            rd = store(S, policy.read, events=ev, copy=COPY_READ, **kw).dequantize() if split else upd
            writes += 1
            hist = empty
        else:
            hist = {key: torch.cat([hist[key], new[key]], 1) for key in hist}
    return torch.stack(outs, 1), upd, rd, writes
