"""Torch references of the GDN teacher-forced scans in ``scan.py``, in the kernels' arithmetic order
(fp32, window by window, the same triangular solve; the math is in ``scan.py``'s docstring)."""
from __future__ import annotations

import torch
from precision_lab.kernels.gdn.scan import L2NORM_EPS
from precision_lab.kernels.mamba2.scan_reference import round_states
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE


def _prep(q, k, v, g, beta, scale, qk_l2norm):
    HK, K = q.shape[2], q.shape[3]
    HV = v.shape[2]
    scale = K ** -0.5 if scale is None else float(scale)
    qf, kf = q.float(), k.float()
    if qk_l2norm:
        qf = qf * torch.rsqrt((qf * qf).sum(-1, keepdim=True) + L2NORM_EPS)
        kf = kf * torch.rsqrt((kf * kf).sum(-1, keepdim=True) + L2NORM_EPS)
    rep = HV // HK
    qf = (qf * scale).repeat_interleave(rep, dim=2)   # [B,T,HV,K]
    kf = kf.repeat_interleave(rep, dim=2)
    return qf, kf, v.float(), g.float(), beta.float()


def unit_lower_inverse(a: torch.Tensor) -> torch.Tensor:
    """(I + A)⁻¹ for strictly lower-triangular A [..., W, W], by forward substitution row by row."""
    W = a.shape[-1]
    ti = torch.eye(W, dtype=a.dtype, device=a.device).expand_as(a).clone()
    for i in range(1, W):
        ti[..., i, :] = ti[..., i, :] - (a[..., i, :, None] * ti).sum(-2)
    return ti


def gdn_replay_scan_ref(q, k, v, g, beta, u0, r0, *, scale, qk_l2norm: bool, L: int, seq_ids, seed: int,
                        layer: int, event0: int, update: str = "fp32", read: str = "fp32", split: bool = False,
                        recompute: bool = True, fold_partial: bool = False):
    """Reference of ``gdn_replay_scan`` (formats by quantizer name). Returns (o, u, r)."""
    qf, kf, vf, gf, bf = _prep(q, k, v, g, beta, scale, qk_l2norm)
    T = v.shape[1]
    u = u0.float().clone()
    r = r0.float().clone() if split else u
    outs = []
    for w, t0 in enumerate(range(0, T, L)):
        sl = slice(t0, min(T, t0 + L))
        W = sl.stop - sl.start
        qw, kw = qf[:, sl].transpose(1, 2), kf[:, sl].transpose(1, 2)      # [B,H,W,K]
        vw = vf[:, sl].transpose(1, 2)                                       # [B,H,W,V]
        bw = bf[:, sl].transpose(1, 2)                                       # [B,H,W]
        c = torch.cumsum(gf[:, sl].transpose(1, 2), dim=-1)                  # [B,H,W]
        ec = torch.exp(c)
        dec = torch.exp(c[..., :, None] - c[..., None, :])
        ones = torch.ones(W, W, dtype=torch.bool, device=v.device)
        zero = torch.zeros((), device=v.device)
        a = torch.where(ones.tril(-1), (kw @ kw.transpose(-1, -2)) * dec * bw[..., None], zero)
        ti = unit_lower_inverse(a)
        d = ti @ (bw[..., None] * (vw - ec[..., None] * (kw @ r.transpose(-1, -2))))
        qk = torch.where(ones.tril(), (qw @ kw.transpose(-1, -2)) * dec, zero)
        o = ec[..., None] * (qw @ r.transpose(-1, -2)) + qk @ d              # [B,H,W,V]
        if W == L or fold_partial:
            c_last = c[..., -1]
            if split and recompute:
                d = ti @ (bw[..., None] * (vw - ec[..., None] * (kw @ u.transpose(-1, -2))))
            elif split:   # buffered: the flush token's own d reads U
                kl = kw[..., -1, :]
                fix = bw[..., -1, None] * torch.exp(c_last)[..., None] * ((r * kl[..., None, :]).sum(-1)
                                                                       - (u * kl[..., None, :]).sum(-1))
                d = d.clone()
                d[..., -1, :] = d[..., -1, :] + fix
            wd = d * torch.exp(c_last[..., None] - c)[..., None]
            s = u * torch.exp(c_last)[..., None, None] + wd.transpose(-1, -2) @ kw       # [B,H,V,K]
            o[..., -1, :] = (s * qw[..., -1, None, :]).sum(-1)
            u = round_states(update, s, seed, layer, seq_ids, event0 + w, COPY_UPDATE)
            r = round_states(read, s, seed, layer, seq_ids, event0 + w, COPY_READ) if split else u
        outs.append(o.transpose(1, 2))
    o = torch.cat(outs, dim=1) if outs else vf.new_zeros(vf.shape)
    return o, u, r


def gdn_recurrent_scan_ref(q, k, v, g, beta, s0, *, scale, qk_l2norm: bool, seq_ids, seed: int, layer: int,
                           event0: int, fmt: str = "fp32"):
    """Reference of ``gdn_recurrent_scan``: conventional decode, state rounded to ``fmt`` each token."""
    qf, kf, vf, gf, bf = _prep(q, k, v, g, beta, scale, qk_l2norm)
    s = s0.float().clone()
    outs = []
    for t in range(v.shape[1]):
        alpha = torch.exp(gf[:, t])[..., None]                               # [B,H,1]
        d = bf[:, t, :, None] * (vf[:, t] - alpha * (s * kf[:, t, :, None, :]).sum(-1))
        s = alpha[..., None] * s + d[..., None] * kf[:, t, :, None, :]
        outs.append((s * qf[:, t, :, None, :]).sum(-1))
        s = round_states(fmt, s, seed, layer, seq_ids, event0 + t, COPY_UPDATE)
    o = torch.stack(outs, dim=1) if outs else vf.new_zeros(vf.shape)
    return o, s
