"""Torch references of the Mamba-2 teacher-forced scans in ``scan.py``, in the kernels' arithmetic
order (fp32, window by window; the math is in ``scan.py``'s docstring).

Formats go through the quantizer registry (``fake_quantize``) with SR bits from
``quant/philox.py state_rbits``, so any quantizer works here, built-in or custom.
"""
from __future__ import annotations

import torch
from precision_lab.quant import fake_quantize, get_quantizer
from precision_lab.quant.philox import COPY_READ, COPY_UPDATE, state_rbits


def round_states(spec, s: torch.Tensor, seed: int, layer: int, seq_ids: torch.Tensor, event: int,
                 copy: int) -> torch.Tensor:
    """Round the states s [B,H,R,C] to format ``spec`` at write ``event`` (SR bits only if it draws them)."""
    if isinstance(spec, str) and spec == "fp32":
        return s
    q = get_quantizer(spec)
    rbits = None
    if getattr(q, "stochastic", False):
        Bsz, H, R, C = s.shape
        rbits = state_rbits(seed, layer, seq_ids.cpu().view(-1, 1), torch.arange(H).view(1, -1), event, (R, C),
                            copy).to(s.device)
    return fake_quantize(q, s, rbits)


def _prep(x, dt, A, B, C, D, dt_bias, z):
    H = x.shape[2]
    G = B.shape[2]
    dtf = torch.nn.functional.softplus(dt.float() + (dt_bias.float() if dt_bias is not None else 0.0))
    la = dtf * A.float()
    Bh = B.float().repeat_interleave(H // G, dim=2)  # [B,T,H,N]
    Ch = C.float().repeat_interleave(H // G, dim=2)
    return x.float(), dtf, la, Bh, Ch


def _epilogue(y, x, D, z):
    if D is not None:
        y = y + D.float().view(1, 1, -1, 1) * x
    if z is not None:
        zf = z.float()
        y = y * (zf * torch.sigmoid(zf))
    return y


def mamba2_replay_scan_ref(x, dt, A, B, C, D, dt_bias, z, u0, r0, *, L: int, seq_ids, seed: int, layer: int,
                           event0: int, update: str = "fp32", read: str = "fp32", split: bool = False, fold_partial: bool = False):
    """Reference of ``mamba2_replay_scan`` (same arguments; formats by quantizer name).

    Returns (y [B,T,H,P] float32, u [B,H,P,N], r [B,H,P,N]).
    """
    xf, dtf, la, Bh, Ch = _prep(x, dt, A, B, C, D, dt_bias, z)
    T = x.shape[1]
    u = u0.float().clone()
    r = r0.float().clone() if split else u
    ys = []
    for w, t0 in enumerate(range(0, T, L)):
        sl = slice(t0, min(T, t0 + L))
        W = sl.stop - sl.start
        c = torch.cumsum(la[:, sl], dim=1)                              # [B,W,H]
        ux = xf[:, sl] * dtf[:, sl, :, None]                            # [B,W,H,P]
        cb = torch.einsum("bjhn,bshn->bhjs", Ch[:, sl], Bh[:, sl])
        dec = torch.exp(c.permute(0, 2, 1)[..., :, None] - c.permute(0, 2, 1)[..., None, :])
        causal = torch.ones(W, W, dtype=torch.bool, device=x.device).tril()
        cb = torch.where(causal, cb * dec, torch.zeros((), device=x.device))
        y = torch.einsum("bhjs,bshp->bjhp", cb, ux)
        y = y + torch.einsum("bjhn,bhpn->bjhp", Ch[:, sl], r) * torch.exp(c)[..., None]
        if W == L or fold_partial:
            c_last = la[:, sl].sum(1)                                  # [B,H]
            wu = ux * torch.exp(c_last[:, None] - c)[..., None]
            s = u * torch.exp(c_last)[..., None, None] + torch.einsum("bshp,bshn->bhpn", wu, Bh[:, sl])
            y[:, -1] = torch.einsum("bhpn,bhn->bhp", s, Ch[:, sl.stop - 1])
            u = round_states(update, s, seed, layer, seq_ids, event0 + w, COPY_UPDATE)
            r = round_states(read, s, seed, layer, seq_ids, event0 + w, COPY_READ) if split else u
        ys.append(y)
    y = torch.cat(ys, dim=1) if ys else xf.new_zeros(xf.shape)
    return _epilogue(y, xf, D, z), u, r


def mamba2_recurrent_scan_ref(x, dt, A, B, C, D, dt_bias, z, s0, *, seq_ids, seed: int, layer: int, event0: int,
                              fmt: str = "fp32"):
    """Reference of ``mamba2_recurrent_scan``: conventional decode, state rounded to ``fmt`` each token."""
    xf, dtf, la, Bh, Ch = _prep(x, dt, A, B, C, D, dt_bias, z)
    s = s0.float().clone()
    ys = []
    for t in range(x.shape[1]):
        s = s * torch.exp(la[:, t])[..., None, None] + (xf[:, t] * dtf[:, t, :, None])[..., None] * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", s, Ch[:, t]))
        s = round_states(fmt, s, seed, layer, seq_ids, event0 + t, COPY_UPDATE)
    y = torch.stack(ys, dim=1) if ys else xf.new_zeros(xf.shape)
    return _epilogue(y, xf, D, z), s
