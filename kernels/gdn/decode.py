"""Gated DeltaNet decode-step kernels (DESIGN §3, §4, §7): conventional step, ReplaySSM step, verify.

Per token, value head h (key head kh = h // (Hv/Hk), GVA); state S [V, K] of a pool slot:
    q, k ← l2norm(q), l2norm(k) (``x · rsqrt(Σx² + 1e-6)``, optional);  q̃ = scale · q;  α = e^g
    conventional:  d = β (v − α S k);  S ← α S + d kᵀ;  o = S q̃;  store round_F(S)
ReplaySSM records per token: k (normalised, per key head), d [V], a = g, and for the recompute
fold also v [V] and β. With a base state S_b holding everything before logical position lo, the
state before position p applied to a vector x is

    S_{p-1} x = e^{Σ_{i=lo..p-1} a_i} (S_b x) + Σ_{j=lo..p-1} e^{Σ_{i=j+1..p-1} a_i} (k_j·x) d_j

so the output-only step reads S_b once for both ``S_b q̃`` and ``S_b k`` and computes
``d_p = β (v − α S_{p-1} k)``, ``o_p = α S_{p-1} q̃ + (k_p·q̃) d_p`` (drafts in order, each seeing the
d's of the earlier ones).

* non-flush / verify (``flush=False``): S_b = READ copy, lo = 0; writes only o and the T records.
* flush: fold the W buffered records into the UPDATE checkpoint in fp32 in closed form,
  S ← e^{c_W} S + Σ_j e^{c_W − c_j} d_j k_jᵀ (one fp32 matrix product) — ``recompute=True`` (DESIGN
  gdn_fold="recompute") first recomputes the window's d's from the update checkpoint, oldest first,
  d_j = β_j (v_j − α_j S_{j-1} k_j) with S_{j-1} k_j in the output-only form above (S_b = update
  checkpoint); ``recompute=False`` ("buffered") folds the stored d's. ``fold_new``
  (autoregressive flush, T = 1) then runs the new token as a conventional step on the fp32 S and
  o = S q̃ comes from that result; otherwise the drafts are verified against S_b = fp32 S, lo = W.
  round_H(S) → update checkpoint, round_F(S) → read copy (split), from the same fp32 S.

One program per (row block of V, value head, batch entry). ``slots[b] = -1`` skips an entry.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from precision_lab.kernels.decode_state import (
    FMT_NVFP4,
    PackedState,
    load_state,
    sr_seed,
    store_state,
)

__all__ = ["GDNRecords", "gdn_conventional_step", "gdn_decode_stream", "gdn_replay_step"]


class GDNRecords:
    """Ring buffers of GDN records for ``slots`` sequences: k [S, RING, Hk, K], d and v
    [S, RING, Hv, V], a (= g) and beta [S, RING, Hv], all fp32."""

    def __init__(self, slots: int, ring: int, Hk: int, Hv: int, V: int, K: int, device="cpu"):
        if ring & (ring - 1):
            raise ValueError(f"ring size must be a power of two, got {ring}")
        self.ring = ring
        self.k = torch.zeros(slots, ring, Hk, K, dtype=torch.float32, device=device)
        self.d = torch.zeros(slots, ring, Hv, V, dtype=torch.float32, device=device)
        self.v = torch.zeros(slots, ring, Hv, V, dtype=torch.float32, device=device)
        self.a = torch.zeros(slots, ring, Hv, dtype=torch.float32, device=device)
        self.beta = torch.zeros(slots, ring, Hv, dtype=torch.float32, device=device)


@triton.jit
def _l2norm(x, NORM: tl.constexpr):
    if NORM:
        return x * tl.rsqrt(tl.sum(x * x, 0) + 1e-6)
    else:
        return x


@triton.jit
def gdn_conventional_step_kernel(
    st_d, st_sc, st_gs, s_d, s_sc, s_gs,
    slot_ptr, seq_ptr, ev_ptr, seed,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, scale,
    Hk, Hv, R, C,
    FMT: tl.constexpr, SR: tl.constexpr, NORM: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr,
):
    i_r, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_kh = i_h // (Hv // Hk)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    valid = slot >= 0
    rows = i_r * BR + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    m_r = (rows < R) & ((rows * 0 + slot) >= 0)  # (block & scalar masks trip the interpreter)
    m_c = cols < C
    slot = tl.maximum(slot, 0)
    bh = i_b.to(tl.int64) * Hv + i_h
    bk = i_b.to(tl.int64) * Hk + i_kh

    b_q = scale * _l2norm(tl.load(q_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
    b_k = _l2norm(tl.load(k_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
    b_v = tl.load(v_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
    alpha = tl.exp(tl.load(g_ptr + bh).to(tl.float32))
    beta = tl.load(beta_ptr + bh).to(tl.float32)

    b_s = load_state(st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C, FMT, BR, BC)
    b_d = beta * (b_v - alpha * tl.sum(b_s * b_k[None, :], 1))
    b_s = alpha * b_s + b_d[:, None] * b_k[None, :]
    b_o = tl.sum(b_s * b_q[None, :], 1)
    tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    store_state(b_s, st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C,
                seed, seq, ev, False, FMT, SR, BR, BC)


@triton.jit
def gdn_replay_scores_kernel(
    rk_ptr, s_rk, slot_ptr, start_ptr, wlen_ptr, q_ptr, k_ptr, qn_ptr, kn_ptr, kq_ptr, kk_ptr, scale,
    Hk, C, RING,
    T: tl.constexpr, FLUSH: tl.constexpr, FOLD_NEW: tl.constexpr, NORM: tl.constexpr,
    BC: tl.constexpr, BJ: tl.constexpr,
):
    """Per (key head, batch entry): normalise the T new q/k (q̃ = scale·q) into qn, kn [B, T, Hk, K],
    write the new k records, and the scores k_j·q̃_t, k_j·k_t of every window position j into
    kq, kk [B, T, Hk, BJ] — once per key head instead of once per value head and row block."""
    i_kh, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    start = tl.load(start_ptr + i_b)
    W = tl.load(wlen_ptr + i_b)
    cols = tl.arange(0, BC)
    jj = tl.arange(0, BJ)
    m_c = cols < C
    m_cv = m_c & ((cols * 0 + slot) >= 0)
    if FLUSH:  # the history is folded: only the new tokens are scored
        m_hist = (jj < 0) & ((jj * 0 + slot) >= 0)
    else:
        m_hist = (jj < W) & ((jj * 0 + slot) >= 0)
    slot = tl.maximum(slot, 0)
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    t_k = tl.load(rk_ptr + slot * s_rk + (pos * Hk + i_kh)[:, None] * C + cols[None, :],
                  mask=m_hist[:, None] & m_c[None, :], other=0)
    for t in tl.static_range(T):
        bk = (i_b.to(tl.int64) * T + t) * Hk + i_kh
        b_q = scale * _l2norm(tl.load(q_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
        b_k = _l2norm(tl.load(k_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
        tl.store(qn_ptr + bk * C + cols, b_q, mask=m_c)
        tl.store(kn_ptr + bk * C + cols, b_k, mask=m_c)
        t_k = tl.where((jj == W + t)[:, None], b_k[None, :], t_k)
        if not FOLD_NEW:
            q = ((start + W + t) & (RING - 1)).to(tl.int64)
            tl.store(rk_ptr + slot * s_rk + (q * Hk + i_kh) * C + cols, b_k, mask=m_cv)
        tl.store(kq_ptr + bk * BJ + jj, tl.sum(t_k * b_q[None, :], 1))
        tl.store(kk_ptr + bk * BJ + jj, tl.sum(t_k * b_k[None, :], 1))


@triton.jit
def gdn_replay_step_kernel(
    u_d, u_sc, u_gs, su_d, su_sc, su_gs,                       # update checkpoint
    r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,                       # read copy
    rk_ptr, rd_ptr, rv_ptr, ra_ptr, rbeta_ptr, s_rk, s_rd, s_ra,  # records (slot strides; v as d, beta as a)
    slot_ptr, start_ptr, wlen_ptr, seq_ptr, ev_ptr, seed,
    qn_ptr, kn_ptr, kq_ptr, kk_ptr, v_ptr, g_ptr, beta_ptr, o_ptr,
    Hk, Hv, R, C, RING,
    T: tl.constexpr, FLUSH: tl.constexpr, FOLD_NEW: tl.constexpr, SPLIT: tl.constexpr,
    RECOMPUTE: tl.constexpr,
    UFMT: tl.constexpr, USR: tl.constexpr, RFMT: tl.constexpr, RSR: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr,
):
    i_r, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_kh = i_h // (Hv // Hk)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    valid = slot >= 0
    start = tl.load(start_ptr + i_b)
    W = tl.load(wlen_ptr + i_b)
    rows = i_r * BR + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    jj = tl.arange(0, BJ)
    # (block & scalar masks trip the interpreter: broadcast the slot test explicitly)
    m_r = (rows < R) & ((rows * 0 + slot) >= 0)
    m_c = cols < C
    slot_ok = (jj * 0 + slot) >= 0
    slot = tl.maximum(slot, 0)

    m_win = (jj < W) & slot_ok
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    h_a = tl.load(ra_ptr + slot * s_ra + pos * Hv + i_h, mask=m_win, other=0)
    if FLUSH:  # keys of the history, for the fold (outputs use the scores of the pre-kernel)
        h_k = tl.load(rk_ptr + slot * s_rk + (pos * Hk + i_kh)[:, None] * C + cols[None, :],
                      mask=m_win[:, None] & m_c[None, :], other=0)
    if FLUSH and RECOMPUTE:
        h_d = tl.zeros([BJ, BR], dtype=tl.float32)  # recomputed below from the update checkpoint
    else:
        h_d = tl.load(rd_ptr + slot * s_rd + (pos * Hv + i_h)[:, None] * R + rows[None, :],
                      mask=m_win[:, None] & m_r[None, :], other=0)
    if FLUSH:  # the history is folded; outputs see only the new tokens
        t_a = tl.zeros_like(h_a)
        t_d = tl.zeros([BJ, BR], dtype=tl.float32)
    else:
        t_a = h_a
        t_d = h_d

    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    if FLUSH:
        b_s = load_state(u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C, UFMT, BR, BC)
        c = tl.cumsum(h_a, 0)  # c_j = Σ_{i<=j} a_i (0 past the window: h_a is 0 there)
        if RECOMPUTE:
            # d'_j = β_j (v_j − α_j S_{j-1} k_j) with S_{j-1} k_j in output-only form from the update
            # checkpoint: e^{c_{j-1}} (S k_j) + Σ_{i<j} e^{c_{j-1}-c_i} (k_i·k_j) d'_i
            h_v = tl.load(rv_ptr + slot * s_rd + (pos * Hv + i_h)[:, None] * R + rows[None, :],
                          mask=m_win[:, None] & m_r[None, :], other=0)
            h_beta = tl.load(rbeta_ptr + slot * s_ra + pos * Hv + i_h, mask=m_win, other=0)
            sk0 = tl.dot(b_s, tl.trans(h_k), input_precision="ieee")            # [BR, BJ]: S k_j
            gram = tl.dot(h_k, tl.trans(h_k), input_precision="ieee")           # [BJ, BJ]: k_i·k_j
            for j in range(0, W):
                at = jj == j
                c_prev = tl.sum(tl.where(jj < j, h_a, 0.0), 0)
                wi = tl.where(jj < j, tl.exp(c_prev - c), 0.0)
                g_j = tl.sum(tl.where(at[None, :], gram, 0.0), 1)               # k_i·k_j over i
                s_k = tl.exp(c_prev) * tl.sum(tl.where(at[None, :], sk0, 0.0), 1) + \
                    tl.sum((wi * g_j)[:, None] * h_d, 0)
                a_j = tl.sum(tl.where(at, h_a, 0.0), 0)
                beta_j = tl.sum(tl.where(at, h_beta, 0.0), 0)
                v_j = tl.sum(tl.where(at[:, None], h_v, 0.0), 0)
                d_j = beta_j * (v_j - tl.exp(a_j) * s_k)
                h_d = tl.where(at[:, None], d_j[None, :], h_d)
        # closed-form fold: S = e^{c_W} S + Σ_j e^{c_W - c_j} d_j k_jᵀ (one fp32 matrix product)
        tot = tl.sum(h_a, 0)
        w = tl.where(m_win, tl.exp(tot - c), 0.0)
        b_s = tl.exp(tot) * b_s + tl.dot(tl.trans(w[:, None] * h_d), h_k, input_precision="ieee")
        lo = W
    else:
        b_s = load_state(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, RFMT, BR, BC)
        lo = W * 0

    if FOLD_NEW:
        # autoregressive flush: the new token is a conventional step on the fp32 state
        bh = i_b.to(tl.int64) * Hv + i_h
        bk = i_b.to(tl.int64) * Hk + i_kh
        b_q = tl.load(qn_ptr + bk * C + cols, mask=m_c, other=0)
        b_k = tl.load(kn_ptr + bk * C + cols, mask=m_c, other=0)
        b_v = tl.load(v_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
        alpha = tl.exp(tl.load(g_ptr + bh).to(tl.float32))
        beta = tl.load(beta_ptr + bh).to(tl.float32)
        b_d = beta * (b_v - alpha * tl.sum(b_s * b_k[None, :], 1))
        b_s = alpha * b_s + b_d[:, None] * b_k[None, :]
        b_o = tl.sum(b_s * b_q[None, :], 1)
        tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
    if FLUSH:
        store_state(b_s, u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C,
                    seed, seq, ev, False, UFMT, USR, BR, BC)
        if SPLIT:
            store_state(b_s, r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                        seed, seq, ev, True, RFMT, RSR, BR, BC)
    if not FOLD_NEW:
        for t in tl.static_range(T):
            bh = (i_b.to(tl.int64) * T + t) * Hv + i_h
            bk = (i_b.to(tl.int64) * T + t) * Hk + i_kh
            b_q = tl.load(qn_ptr + bk * C + cols, mask=m_c, other=0)
            b_k = tl.load(kn_ptr + bk * C + cols, mask=m_c, other=0)
            sc_q = tl.load(kq_ptr + bk * BJ + jj)
            sc_k = tl.load(kk_ptr + bk * BJ + jj)
            b_v = tl.load(v_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
            g = tl.load(g_ptr + bh).to(tl.float32)
            beta = tl.load(beta_ptr + bh).to(tl.float32)
            p = W + t
            m_w = (jj >= lo) & (jj < p)
            w_a = tl.where(m_w, t_a, 0.0)
            tot = tl.sum(w_a, 0)
            decay = tl.where(m_w, tl.exp(tot - tl.cumsum(w_a, 0)), 0.0)
            e_tot = tl.exp(tot)
            s_q = e_tot * tl.sum(b_s * b_q[None, :], 1) + tl.sum((decay * sc_q)[:, None] * t_d, 0)
            s_k = e_tot * tl.sum(b_s * b_k[None, :], 1) + tl.sum((decay * sc_k)[:, None] * t_d, 0)
            alpha = tl.exp(g)
            b_d = beta * (b_v - alpha * s_k)
            b_o = alpha * s_q + tl.sum(tl.where(jj == p, sc_q, 0.0), 0) * b_d
            tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
            at = jj == p
            t_a = tl.where(at, g, t_a)
            t_d = tl.where(at[:, None], b_d[None, :], t_d)
            qp = ((start + p) & (RING - 1)).to(tl.int64)
            tl.store(rd_ptr + slot * s_rd + (qp * Hv + i_h) * R + rows, b_d, mask=m_r)
            tl.store(ra_ptr + slot * s_ra + qp * Hv + i_h, g, mask=valid & (i_r == 0))
            if RECOMPUTE:
                tl.store(rv_ptr + slot * s_rd + (qp * Hv + i_h) * R + rows, b_v, mask=m_r)
                tl.store(rbeta_ptr + slot * s_ra + qp * Hv + i_h, beta, mask=valid & (i_r == 0))


# ---------------------------------------------------------------------------------------------
# Host wrappers
# ---------------------------------------------------------------------------------------------
def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def _block_rows(R: int, stored: tuple[int, ...], block_r: int | None) -> int:
    """Rows per program; ``stored``: formats the launch writes (writing NVFP4 needs the head's amax)."""
    if any(f == FMT_NVFP4 for f in stored):
        return _pow2(R)  # NVFP4's global scale is per matrix: one program owns the whole head
    return block_r if block_r is not None else min(_pow2(R), 32)


def _num_warps(br: int, bc: int) -> int:
    return 8 if br * bc >= 8192 else 4


def _as_i64(v, B: int, device) -> torch.Tensor:
    return torch.as_tensor(v, dtype=torch.int64, device=device).expand(B).contiguous()


def _check(state: PackedState, V: int, K: int) -> None:
    if (state.R, state.C) != (V, K):
        raise ValueError(f"state pool holds [{state.R}, {state.C}] matrices, inputs need [{V}, {K}]")


def gdn_conventional_step(state: PackedState, slots: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *, scale: float | None = None,
                          qk_l2norm: bool = True, seq_ids: torch.Tensor | None = None,
                          events: torch.Tensor | int = 1, seed: int = 0, layer: int = 0,
                          block_r: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One conventional GDN decode step, state updated in place in ``state``'s format.

    state: PackedState pool [S, Hv, V, K]; slots [B] (-1 = skip); q, k [B, Hk, K]; v [B, Hv, V];
    g, beta [B, Hv]. Returns o [B, Hv, V] in v's dtype.
    """
    Bsz, Hk, K = q.shape
    Hv, V = v.shape[1:]
    _check(state, V, K)
    if Hv % Hk:
        raise ValueError(f"value heads {Hv} must be a multiple of key heads {Hk}")
    dev = v.device
    v = v.contiguous()
    o = torch.empty_like(v) if out is None else out
    seq_ids = torch.arange(Bsz, device=dev) if seq_ids is None else seq_ids
    br = _block_rows(V, (state.code,), block_r)
    bc = max(_pow2(K), 16)
    gdn_conventional_step_kernel[(triton.cdiv(V, br), Hv, Bsz)](
        *state.kernel_args(), slots.to(torch.int32).contiguous(), _as_i64(seq_ids, Bsz, dev),
        _as_i64(events, Bsz, dev), sr_seed(seed, layer),
        q.contiguous(), k.contiguous(), v, g.contiguous(), beta.contiguous(), o,
        float(K ** -0.5 if scale is None else scale), Hk, Hv, V, K,
        FMT=state.code, SR=state.sr, NORM=qk_l2norm, BR=br, BC=bc, num_warps=_num_warps(br, bc),
        enable_fp_fusion=False)
    return o


def gdn_replay_step(update: PackedState, read: PackedState | None, records: GDNRecords,
                    slots: torch.Tensor, start: torch.Tensor, wlen: torch.Tensor,
                    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                    scale: float | None = None, qk_l2norm: bool = True, flush: bool = False,
                    fold_new: bool = False, recompute: bool = True, seq_ids: torch.Tensor | None = None,
                    events: torch.Tensor | int = 1, seed: int = 0, layer: int = 0,
                    block_r: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One ReplaySSM GDN step for T = v.shape[1] tokens (see the module docstring).

    update / read: PackedState pools [S, Hv, V, K] (read=None: shared mode); records: ring buffers;
    start, wlen [B] int32 window pointers (advance them with ``mamba2.decode.commit``); q, k
    [B, T, Hk, K]; v [B, T, Hv, V]; g, beta [B, T, Hv]. Returns o [B, T, Hv, V].
    """
    Bsz, T, Hk, K = q.shape
    Hv, V = v.shape[2:]
    if fold_new and (T != 1 or not flush):
        raise ValueError("fold_new (autoregressive flush) needs flush=True and T = 1")
    if T > records.ring:
        raise ValueError(f"T = {T} tokens do not fit a ring of {records.ring} records")
    shared = read is None
    read = update if shared else read
    _check(update, V, K)
    _check(read, V, K)
    dev = v.device
    v = v.contiguous()
    o = torch.empty_like(v) if out is None else out
    seq_ids = torch.arange(Bsz, device=dev) if seq_ids is None else seq_ids
    br = _block_rows(V, (update.code, read.code) if flush else (), block_r)
    bc = max(_pow2(K), 16)
    bj = max(records.ring, 16)
    slots32, start32, wlen32 = (t.to(torch.int32).contiguous() for t in (slots, start, wlen))
    qn = torch.empty(Bsz, T, Hk, K, dtype=torch.float32, device=dev)
    kn = torch.empty_like(qn)
    kq = torch.empty(Bsz, T, Hk, bj, dtype=torch.float32, device=dev)
    kk = torch.empty_like(kq)
    gdn_replay_scores_kernel[(Hk, Bsz)](
        records.k, records.k.stride(0), slots32, start32, wlen32, q.contiguous(), k.contiguous(), qn, kn, kq, kk,
        float(K ** -0.5 if scale is None else scale), Hk, K, records.ring,
        T=T, FLUSH=flush, FOLD_NEW=fold_new, NORM=qk_l2norm, BC=bc, BJ=bj, num_warps=4)
    gdn_replay_step_kernel[(triton.cdiv(V, br), Hv, Bsz)](
        *update.kernel_args(), *read.kernel_args(),
        records.k, records.d, records.v, records.a, records.beta,
        records.k.stride(0), records.d.stride(0), records.a.stride(0),
        slots32, start32, wlen32, _as_i64(seq_ids, Bsz, dev), _as_i64(events, Bsz, dev), sr_seed(seed, layer),
        qn, kn, kq, kk, v, g.contiguous(), beta.contiguous(), o, Hk, Hv, V, K, records.ring,
        T=T, FLUSH=flush, FOLD_NEW=fold_new, SPLIT=not shared, RECOMPUTE=recompute,
        UFMT=update.code, USR=update.sr, RFMT=read.code, RSR=read.sr,
        BR=br, BC=bc, BJ=bj, num_warps=_num_warps(br, bc), enable_fp_fusion=False)
    return o


def gdn_decode_stream(q, k, v, g, beta, *, policy, scale: float | None = None, qk_l2norm: bool = True,
                      S0: torch.Tensor | None = None, seq_ids: torch.Tensor | None = None, layer: int = 0,
                      slots: torch.Tensor | None = None, pool_slots: int | None = None):
    """Autoregressive GDN decode of a whole stream with the kernels (DESIGN §4), one launch per token.

    q, k [B, T, Hk, K]; v [B, T, Hv, V]; g, beta [B, T, Hv]; policy: StatePolicy; S0 [B, Hv, V, K].
    Returns (o [B, T, Hv, V], update PackedState pool, read PackedState pool, state writes).
    """
    from precision_lab.kernels.decode_state import initial_pool
    from precision_lab.kernels.mamba2.decode import commit
    from precision_lab.quant.philox import COPY_READ, COPY_UPDATE

    Bsz, T, Hk, K = q.shape
    Hv, V = v.shape[2:]
    dev = v.device
    slots = torch.arange(Bsz, device=dev) if slots is None else slots.to(dev)
    S = int(pool_slots or int(slots.max()) + 1)
    seq_ids = torch.arange(Bsz, device=dev) if seq_ids is None else seq_ids.to(dev)
    S0 = torch.zeros(Bsz, Hv, V, K, device=dev) if S0 is None else S0.float()
    kw = dict(seq_ids=seq_ids, seed=policy.seed, layer=layer)
    update = initial_pool(S0, policy.update, slots, S, copy=COPY_UPDATE, **kw)
    read = initial_pool(S0, policy.read, slots, S, copy=COPY_READ, **kw) if policy.mode == "split" else None
    os_, writes, L = [], 0, policy.buffer_len
    records = GDNRecords(S, _pow2(L), Hk, Hv, V, K, device=dev) if policy.is_replay else None
    start = torch.zeros(Bsz, dtype=torch.int32, device=dev)
    wlen = torch.zeros(Bsz, dtype=torch.int32, device=dev)
    recompute = policy.gdn_fold == "recompute"
    for t in range(T):
        if not policy.is_replay:
            o = gdn_conventional_step(update, slots, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], scale=scale,
                                      qk_l2norm=qk_l2norm, events=writes + 1, **kw)
            writes += 1
            os_.append(o)
            continue
        flush = t % L == L - 1
        sl = slice(t, t + 1)
        o = gdn_replay_step(update, read, records, slots, start, wlen, q[:, sl], k[:, sl], v[:, sl], g[:, sl],
                            beta[:, sl], scale=scale, qk_l2norm=qk_l2norm, flush=flush, fold_new=flush,
                            recompute=recompute, events=writes + 1, **kw)
        os_.append(o[:, 0])
        commit(start, wlen, 0 if flush else 1, flush, records.ring)
        writes += int(flush)
    return torch.stack(os_, 1), update, (update if read is None else read), writes
