"""Gated DeltaNet decode-step kernels (docs/design.md §3, §4, §7): conventional step, ReplaySSM step, verify.

Per token, value head h (key head kh = h // (Hv/Hk), GVA); state S [V, K] of a pool slot:
    q, k ← l2norm(q), l2norm(k) (``x · rsqrt(Σx² + 1e-6)``, optional);  q̃ = scale · q;  α = e^g
    conventional:  d = β (v − α S k);  S ← α S + d kᵀ;  o = S q̃;  store round_F(S)
ReplaySSM records per token: k (normalised, per key head), d [V], a = g, and for the recompute
fold also v [V] and β. With a base state S_b holding everything before logical position lo, the
state before position p applied to a vector x is

    S_{p-1} x = e^{Σ_{i=lo..p-1} a_i} (S_b x) + Σ_{j=lo..p-1} e^{Σ_{i=j+1..p-1} a_i} (k_j·x) d_j

* non-flush, T = 1: the output-only form above with S_b = READ copy, lo = 0: S_b is read once for
  both ``S_b q̃`` and ``S_b k`` and ``d = β (v − α S_{W-1} k)``, ``o = α S_{W-1} q̃ + (k·q̃) d``; the
  scores k_j·q̃, k_j·k come from a pre-kernel run once per key head (which also normalises q, k and
  writes the k record), or, in the one-launch form used at small batch (``fused_scores``), from the
  program itself. Writes only o and the record.
* flush: the W buffered records are folded into the UPDATE checkpoint in fp32, in registers, one
  record at a time (oldest first): ``recompute=True`` (docs/design.md §4, gdn_fold="recompute") runs the
  recurrence itself, d'_j = β_j (v_j − α_j S k_j), S ← α_j S + d'_j k_jᵀ — the reference's d'_j
  (output-only form from the update checkpoint) and closed-form fold, in another fp32 order;
  ``recompute=False`` ("buffered") folds the stored d's in closed form,
  S ← e^{c_W} S + Σ_j e^{c_W − c_j} d_j k_jᵀ, one FMA per element and record — also the fold of
  a shared-mode flush whose stored d's came from the checkpoint itself (all but the records a
  speculative flush round committed from its unrounded S under a lossy format: ``window_from_update``;
  a chunked form of
  the recompute fold — every S k_j first, then a forward substitution per row — measured 2.2×
  slower on the H200 and was removed: kernels/gdn/README.md). ``fold_new``
  (autoregressive flush, T = 1) then runs the new token as a conventional step on the fp32 S and
  o = S q̃ comes from that result. round_H(S) → update checkpoint, round_F(S) → read copy (split),
  from the same fp32 S.
* drafts (verify, T > 1, S_b = READ copy; speculative flush, S_b = the folded fp32 S): S_{W-1} is
  formed in registers (non-flush: the buffered closed form of the window on S_b) and each draft is
  a step on it, never stored: d_t = β (v − α S k), o_t = α S q̃ + (k·q̃) d_t, S ← α S + d_t kᵀ — the
  same values as the output-only form (each draft sees the d's of the earlier ones), another fp32
  order. Writes o and the T records. (A blocked form of verify — the drafts' d's from a unit
  lower-triangular T×T system, the products on tensor cores — cut the SASS from ~7100 to ~2800
  instructions but measured slower on the H200 at T = 8, batch 256: 693-695 µs against 602-604 µs
  for this form in two runs; it was removed.)

Why no ``tl.dot`` and no window tiles: a fold is W rank-1 updates, each needing S k_j first, and a
fp32 dot over [W, rows] record tiles (plus picking rows out of tiles with where/sum) kept whole
tiles live and spilled; here S stays in registers as four column quarters (each thread holds more
columns of fewer rows, so S·x is an FMA chain plus three shuffle levels), records are read one at
a time through the software pipeliner (``tl.range(num_stages=)`` stages the next records in shared
memory, seven ahead, three in a small grid: ``_fold_stages``; the exception is a small grid's
buffered flush, whose closed-form fold needs no S k_j and runs as fp32 products of window tiles,
``_fold_product``), and the folds use
``tl.fma`` (a flush runs with enable_fp_fusion=False: it rounds state; steps that store none run with
fusion on, like Mamba-2's).

One program per (row block of V, value head, batch entry). ``slots[b] = -1`` skips an entry.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import C_E4M3, C_FP32, C_NVFP4, FMT_E4M3, FMT_FP32
from precision_lab.kernels.common.launch import (
    as_i64,
    check_fp4_decode,
    fused_nonflush_warps,
    fused_scores_launch,
    overlap_scores_launch,
    pdl_kwargs,
    pow2,
    resolve_fp4_decode,
    warps_for_tile,
)
from precision_lab.kernels.common.overlap import await_scores, release_dependents
from precision_lab.kernels.common.state_io import column_quarters, load_state_cols, program_slot, store_state4
from precision_lab.kernels.decode_state import (
    FMT_NVFP4,
    PackedState,
    load_state,
    read_state_dot,
    sr_seed,
    store_state,
)

__all__ = ["GDNRecords", "gdn_conventional_step", "gdn_replay_step"]


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
def _token_inputs(v_ptr, g_ptr, beta_ptr, bh, rows, m_r, R):
    """A new token's v [BR] of the rows, log decay g and beta (fp32); ``bh``: its (batch entry or
    draft, value head) row."""
    b_v = tl.load(v_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
    g = tl.load(g_ptr + bh).to(tl.float32)
    beta = tl.load(beta_ptr + bh).to(tl.float32)
    return b_v, g, beta


@triton.jit
def gdn_conventional_step_kernel(
    st_d, st_sc, st_gs, s_d, s_sc, s_gs,
    slot_ptr, seq_ptr, ev_ptr, seed,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, scale,
    Hk: tl.constexpr, Hv: tl.constexpr, R: tl.constexpr, C: tl.constexpr,
    FMT: tl.constexpr, SR: tl.constexpr, NORM: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr,
):
    i_r, i_h, i_b, slot, rows, m_r = program_slot(slot_ptr, R, BR)
    i_kh = i_h // (Hv // Hk)
    valid = slot >= 0
    cols = tl.arange(0, BC)
    m_c = cols < C
    slot = tl.maximum(slot, 0)
    bh = i_b.to(tl.int64) * Hv + i_h
    bk = i_b.to(tl.int64) * Hk + i_kh

    b_q = scale * _l2norm(tl.load(q_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
    b_k = _l2norm(tl.load(k_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32), NORM)
    b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, bh, rows, m_r, R)
    alpha = tl.exp(g)

    b_s = load_state(st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C, FMT, BR, BC, HW)
    b_d = beta * (b_v - alpha * tl.sum(b_s * b_k[None, :], 1))
    b_s = alpha * b_s + b_d[:, None] * b_k[None, :]
    b_o = tl.sum(b_s * b_q[None, :], 1)
    tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    store_state(b_s, st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C,
                seed, seq, ev, False, FMT, SR, BR, BC, HW)


@triton.jit
def _raw_qk(q_ptr, k_ptr, bk, C, BC: tl.constexpr):
    """A new token's q and k as given (fp32 [BC], 0 past C; ``bk``: its (token, key head) row)."""
    cols = tl.arange(0, BC)
    m_c = cols < C
    return (tl.load(q_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32),
            tl.load(k_ptr + bk * C + cols, mask=m_c, other=0).to(tl.float32))


@triton.jit
def _new_qk(q_ptr, k_ptr, bk, C, scale, NORM: tl.constexpr, BC: tl.constexpr):
    """A new token's q̃ = scale·l2norm(q) and k = l2norm(k) (fp32 [BC], 0 past C; ``bk``: its (token,
    key head) row), and the factors f_q, f_k with q̃ ≈ f_q·q, k ≈ f_k·k (one rounding apart)."""
    q, k = _raw_qk(q_ptr, k_ptr, bk, C, BC)
    return _norm_qk(q, k, scale, NORM)


@triton.jit
def _joint_qk(q_ptr, k_ptr, bk, C, BC: tl.constexpr):
    """``_raw_qk`` as one load of a [BC, 2] pointer tile (q and k side by side in each thread)."""
    cols = tl.arange(0, BC)
    m_c = cols < C
    qk = tl.load(tl.join(q_ptr + bk * C + cols, k_ptr + bk * C + cols), mask=tl.join(m_c, m_c), other=0)
    return tl.split(qk.to(tl.float32))


@triton.jit
def _norm_qk(q, k, scale, NORM: tl.constexpr):
    """``_new_qk`` of q and k already loaded."""
    if NORM:
        r_q = tl.rsqrt(tl.sum(q * q, 0) + 1e-6)
        r_k = tl.rsqrt(tl.sum(k * k, 0) + 1e-6)
        return scale * (q * r_q), k * r_k, scale * r_q, r_k
    else:
        return scale * q, k, scale, 1.0


@triton.jit
def _k_window(rk, start, jj, m_hist, cols, m_c, Hk, C, RING):
    """The key head's k records as a [BJ, BC] tile over logical window positions jj (ring position
    ``(start + j) & (RING-1)``), 0 outside ``m_hist``; ``rk``: the slot's record of the key head at
    ring position 0 (``rk_ptr + slot·s_rk + kh·C``)."""
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    return tl.load(rk + (pos * Hk)[:, None] * C + cols[None, :], mask=m_hist[:, None] & m_c[None, :], other=0)


@triton.jit
def _k_window4(rk, start, jj, m_hist, C, RING, Hk, BC: tl.constexpr):
    """``_k_window`` as four column quarters [BJ, BC/4] (chunks, as ``_load4`` loads an fp32 state),
    so that the scores are row products of the state's shape (``_matvec``)."""
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    return _quarter_loads(rk + (pos * Hk)[:, None] * C, m_hist, C, BC, False)


@triton.jit
def _window_records(ra, rd, start, n_w, m_r, Hv, R, RING, BJ: tl.constexpr):
    """A window's positions jj, their mask, and the value head's a and d records (``ra``, ``rd``: the
    slot's records of the head at ring position 0) as [BJ] and [BJ, rows] tiles: the output-only
    step's window, and the product fold's."""
    jj = tl.arange(0, BJ)
    m_win = jj < n_w
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    h_a = tl.load(ra + pos * Hv, mask=m_win, other=0)
    h_d = tl.load(rd[None, :] + (pos * Hv * R)[:, None], mask=m_win[:, None] & m_r[None, :], other=0)
    return jj, m_win, h_a, h_d


@triton.jit
def _scores(t_k, b_q, b_k):
    """(k_j·q̃, k_j·k) for every row j of the window tile t_k [BJ, BC]."""
    return tl.sum(t_k * b_q[None, :], 1), tl.sum(t_k * b_k[None, :], 1)


@triton.jit
def gdn_replay_scores_kernel(
    rk_ptr, s_rk, slot_ptr, start_ptr, wlen_ptr, q_ptr, k_ptr, qn_ptr, kn_ptr, kq_ptr, kk_ptr, scale,
    Hk: tl.constexpr, C: tl.constexpr, RING: tl.constexpr,
    T: tl.constexpr, SCORES: tl.constexpr, FOLD_NEW: tl.constexpr, NORM: tl.constexpr,
    BC: tl.constexpr, BJ: tl.constexpr, PDL: tl.constexpr,
):
    """Per (key head, batch entry): normalise the T new q/k (q̃ = scale·q) into qn, kn [B, T, Hk, K]
    and write the new k records. With SCORES (the output-only step, T = 1) also the scores k_j·q̃,
    k_j·k of every window position j (the new token at j = W) into kq, kk [B, T, Hk, BJ]; otherwise
    only k_t·q̃_t into kq [B, T, Hk]. Once per key head instead of once per value head and row block.
    The step kernel's one-launch form (FUSED) computes the same with the same helpers. PDL: the step
    kernel after it overlaps it (``await_scores``)."""
    release_dependents(PDL)
    i_kh, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    start = tl.load(start_ptr + i_b)
    W = tl.load(wlen_ptr + i_b)
    cols = tl.arange(0, BC)
    jj = tl.arange(0, BJ)
    m_c = cols < C
    m_cv = m_c & ((cols * 0 + slot) >= 0)
    m_hist = (jj < W) & ((jj * 0 + slot) >= 0)
    slot = tl.maximum(slot, 0)
    if SCORES:
        t_k = _k_window(rk_ptr + slot * s_rk + i_kh * C, start, jj, m_hist, cols, m_c, Hk, C, RING)
    for t in tl.static_range(T):
        bk = (i_b.to(tl.int64) * T + t) * Hk + i_kh
        b_q, b_k, _, _ = _new_qk(q_ptr, k_ptr, bk, C, scale, NORM, BC)
        tl.store(qn_ptr + bk * C + cols, b_q, mask=m_c)
        tl.store(kn_ptr + bk * C + cols, b_k, mask=m_c)
        if not FOLD_NEW:
            q = ((start + W + t) & (RING - 1)).to(tl.int64)
            tl.store(rk_ptr + slot * s_rk + (q * Hk + i_kh) * C + cols, b_k, mask=m_cv)
        if SCORES:
            t_k = tl.where((jj == W + t)[:, None], b_k[None, :], t_k)
            sc_q, sc_k = _scores(t_k, b_q, b_k)
            tl.store(kq_ptr + bk * BJ + jj, sc_q)
            tl.store(kk_ptr + bk * BJ + jj, sc_k)
        else:
            tl.store(kq_ptr + bk, tl.sum(b_k * b_q, 0))


# The state tile lives in registers as four column quarters [BR, BC/4]. Quarter c holds columns
# c·BC/4 + w ("chunks") or, with ILV, columns 4w + c (interleaved). Chunks of an fp32 pool are loaded
# directly, one [BR, BC/4] load each, which gives every thread more columns of fewer rows than one
# [BR, BC] load: a row dot product is then an in-thread FMA chain plus three shuffle levels instead of
# five. Decoded formats come as one [BR, BC] tile: interleaved quarters split it without moving data
# (the step that uses S twice), chunks cost one layout conversion (the folds, which use it 2W times).
@triton.jit
def _cols4(c: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr):
    w = tl.arange(0, BC // 4)
    if ILV:
        return 4 * w + c
    else:
        return c * (BC // 4) + w


@triton.jit
def _quarter_loads(p, m_rows, C, BC: tl.constexpr, ILV: tl.constexpr):
    """Four fp32 column quarters [rows, BC/4] (``_cols4``) of the rows at the [rows, 1] pointer tile p,
    0 outside ``m_rows`` and past column C."""
    c0, c1, c2, c3 = _cols4(0, BC, ILV), _cols4(1, BC, ILV), _cols4(2, BC, ILV), _cols4(3, BC, ILV)
    return (tl.load(p + c0[None, :], mask=m_rows[:, None] & (c0 < C)[None, :], other=0),
            tl.load(p + c1[None, :], mask=m_rows[:, None] & (c1 < C)[None, :], other=0),
            tl.load(p + c2[None, :], mask=m_rows[:, None] & (c2 < C)[None, :], other=0),
            tl.load(p + c3[None, :], mask=m_rows[:, None] & (c3 < C)[None, :], other=0))


@triton.jit
def _split4(x, BR: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr):
    """[BR, BC] → its four column quarters [BR, BC/4]."""
    if not ILV:
        return column_quarters(x, BR, BC)
    e, o = tl.split(tl.reshape(x, (BR, BC // 4, 2, 2)))
    x0, x2 = tl.split(e)
    x1, x3 = tl.split(o)
    return x0, x1, x2, x3


@triton.jit
def _join4(x0, x1, x2, x3, BR: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr):
    """Inverse of ``_split4``."""
    y = tl.reshape(tl.join(tl.join(x0, x2), tl.join(x1, x3)), (BR, BC // 4, 4))
    if ILV:
        return tl.reshape(y, (BR, BC))
    else:
        return tl.reshape(tl.permute(y, (0, 2, 1)), (BR, BC))


@triton.jit
def _load4(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C,
           FMT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr, HW: tl.constexpr):
    """``load_state``'s fp32 tile as column quarters. HW (compiled GPU kernels): E4M3 codes through the
    hardware E4M3 → fp16 conversion (exact, like the integer decode; a NaN code gives a NaN of
    another payload, which every store encodes to the same NaN code)."""
    QW: tl.constexpr = BC // 4
    if HW and FMT == C_E4M3 and not ILV:
        p = d_ptr + slot * s_d + (h * R + rows).to(tl.int64)[:, None] * C
        c0, c1, c2, c3 = _cols4(0, BC, ILV), _cols4(1, BC, ILV), _cols4(2, BC, ILV), _cols4(3, BC, ILV)
        return (tl.load(p + c0[None, :], mask=m_r[:, None] & (c0 < C)[None, :], other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32),
                tl.load(p + c1[None, :], mask=m_r[:, None] & (c1 < C)[None, :], other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32),
                tl.load(p + c2[None, :], mask=m_r[:, None] & (c2 < C)[None, :], other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32),
                tl.load(p + c3[None, :], mask=m_r[:, None] & (c3 < C)[None, :], other=0).to(tl.float8e4nv, bitcast=True).to(tl.float32))
    elif FMT != C_FP32 and (not ILV) and (FMT != C_NVFP4 or (QW // 16) * 16 == QW):
        # chunk quarters of a decoded format loaded and decoded one by one, so they come in the
        # layout of the fp32 pool's quarter loads below: splitting a decoded [BR, BC] tile instead
        # went through shared memory and left the fold loop in another layout, 42% more
        # instructions per record (sm_90 compile of the fp16-SR/NVFP4 flush at 4 warps: 819 vs 576)
        return (load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C, 0, FMT, BR, QW, HW),
                load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C, QW, FMT, BR, QW, HW),
                load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C, 2 * QW, FMT, BR, QW, HW),
                load_state_cols(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C, 3 * QW, FMT, BR,
                                QW, HW))
    elif FMT == C_FP32:
        return _quarter_loads(d_ptr + slot * s_d + (h * R + rows).to(tl.int64)[:, None] * C, m_r, C, BC, ILV)
    else:
        return _split4(load_state(d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C, FMT, BR, BC, HW),
                       BR, BC, ILV)


@triton.jit
def _store4(x0, x1, x2, x3, d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C,
            seed, seq, ev, COPY: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
            BR: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr, HW: tl.constexpr):
    """``store_state`` of a tile held as column quarters: quarter by quarter where they are whole SR
    groups (and NVFP4 blocks), else through the joined tile. HW: NVFP4 block scales through the GPU's
    E4M3 conversions (the same bytes; ``store_state``)."""
    QW: tl.constexpr = BC // 4
    if FMT == C_FP32:
        p = d_ptr + slot * s_d + (h * R + rows).to(tl.int64)[:, None] * C
        c0, c1, c2, c3 = _cols4(0, BC, ILV), _cols4(1, BC, ILV), _cols4(2, BC, ILV), _cols4(3, BC, ILV)
        tl.store(p + c0[None, :], x0, mask=m_r[:, None] & (c0 < C)[None, :])
        tl.store(p + c1[None, :], x1, mask=m_r[:, None] & (c1 < C)[None, :])
        tl.store(p + c2[None, :], x2, mask=m_r[:, None] & (c2 < C)[None, :])
        tl.store(p + c3[None, :], x3, mask=m_r[:, None] & (c3 < C)[None, :])
    elif (not ILV) and (QW // 8) * 8 == QW and (FMT != C_NVFP4 or (QW // 16) * 16 == QW):
        # chunk quarters are the column blocks store_state4 rounds one at a time (fewer live registers
        # than rounding the joined tile, and no layout conversions to join it; same codes)
        store_state4(x0, x1, x2, x3, d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows, m_r, R, C,
                     seed, seq, ev, COPY, FMT, SR, BR, QW, HW)
    else:
        store_state(_join4(x0, x1, x2, x3, BR, BC, ILV), d_ptr, sc_ptr, gs_ptr, slot, s_d, s_sc, s_gs, h, rows,
                    m_r, R, C, seed, seq, ev, COPY, FMT, SR, BR, BC, HW)


@triton.jit
def _quarters(x, BC: tl.constexpr, ILV: tl.constexpr):
    """A K-vector x [BC] held in registers as column quarters [1, BC/4] (what ``_vec4`` loads)."""
    return _split4(x[None, :], 1, BC, ILV)


@triton.jit
def _vec4(p, C, BC: tl.constexpr, ILV: tl.constexpr):
    """A K-vector at p as column quarters [1, BC/4] (0 past C)."""
    c0, c1, c2, c3 = _cols4(0, BC, ILV), _cols4(1, BC, ILV), _cols4(2, BC, ILV), _cols4(3, BC, ILV)
    return (tl.load(p + c0, mask=c0 < C, other=0)[None, :], tl.load(p + c1, mask=c1 < C, other=0)[None, :],
            tl.load(p + c2, mask=c2 < C, other=0)[None, :], tl.load(p + c3, mask=c3 < C, other=0)[None, :])


@triton.jit
def _matvec(s0, s1, s2, s3, x0, x1, x2, x3):
    """S x for S, x in column quarters: an FMA chain over the quarters, then the row sum."""
    return tl.sum(tl.fma(s3, x3, tl.fma(s2, x2, tl.fma(s1, x1, s0 * x0))), 1)


@triton.jit
def _rank1(s0, s1, s2, s3, alpha, d, k0, k1, k2, k3):
    """α S + d kᵀ (one multiply and one FMA per element)."""
    dc = d[:, None]
    return (tl.fma(dc, k0, alpha * s0), tl.fma(dc, k1, alpha * s1),
            tl.fma(dc, k2, alpha * s2), tl.fma(dc, k3, alpha * s3))


# The folds walk the window oldest record first. A record's loads would sit on the loop's critical
# path (a few hundred cycles, more under load, per record); the software pipeliner stages the next
# STAGES - 1 records in shared memory while the current one is applied (``_fold_stages``).
@triton.jit
def _fold_recompute(s0, s1, s2, s3, rk, rv, ra, rbeta, start, n_w, m_r, Hk, Hv, R, C, RING,
                    BC: tl.constexpr, STAGES: tl.constexpr):
    """The recurrence itself over the n_w window records (the "recompute" fold):
    d'_j = β_j (v_j − α_j S k_j),  S ← α_j S + d'_j k_jᵀ."""
    for j in tl.range(0, n_w, num_stages=STAGES):
        p = ((start + j) & (RING - 1)).to(tl.int64)
        k0, k1, k2, k3 = _vec4(rk + p * Hk * C, C, BC, False)
        alpha = tl.exp(tl.load(ra + p * Hv))
        d = tl.load(rbeta + p * Hv) * (tl.load(rv + p * Hv * R, mask=m_r, other=0) -
                                       alpha * _matvec(s0, s1, s2, s3, k0, k1, k2, k3))
        s0, s1, s2, s3 = _rank1(s0, s1, s2, s3, alpha, d, k0, k1, k2, k3)
    return s0, s1, s2, s3


@triton.jit
def _fold_buffered(s0, s1, s2, s3, rk, rd, ra, start, n_w, m_r, Hk, Hv, R, C, RING,
                   BC: tl.constexpr, BJ: tl.constexpr, STAGES: tl.constexpr):
    """Closed form over the n_w window records with their stored d's (the "buffered" fold, and the
    history of a verify step): S ← e^{c_W} S + Σ_j e^{c_W − c_j} d_j k_jᵀ, one FMA per element and
    record."""
    jj = tl.arange(0, BJ)
    h_a = tl.load(ra + ((start + jj) & (RING - 1)).to(tl.int64) * Hv, mask=jj < n_w, other=0)
    tot = tl.sum(h_a, 0)
    e_tot = tl.exp(tot)
    s0, s1, s2, s3 = e_tot * s0, e_tot * s1, e_tot * s2, e_tot * s3
    c = tot * 0
    for j in tl.range(0, n_w, num_stages=STAGES):
        p = ((start + j) & (RING - 1)).to(tl.int64)
        k0, k1, k2, k3 = _vec4(rk + p * Hk * C, C, BC, False)
        c = c + tl.load(ra + p * Hv)
        wd = (tl.exp(tot - c) * tl.load(rd + p * Hv * R, mask=m_r, other=0))[:, None]
        s0, s1, s2, s3 = tl.fma(wd, k0, s0), tl.fma(wd, k1, s1), tl.fma(wd, k2, s2), tl.fma(wd, k3, s3)
    return s0, s1, s2, s3


@triton.jit
def _fold_buffered_product(s0, s1, s2, s3, rk, rd, ra, start, n_w, m_r, Hk, Hv, R, C, RING,
                           BC: tl.constexpr, BJ: tl.constexpr):
    """``_fold_buffered`` as one fp32 product per column quarter (``_fold_product``): the window's d
    records (``_window_records``, transposed to [rows, window]), weighted by e^{c_W − c_j} (0 past
    n_w), times its k records as [window, BC/4] quarters (``_k_window4``), accumulated onto e^{c_W} S.
    Every record is requested in the round trip that brings the state tile, where the loop waits for
    each record's loads in turn. Same math, rounded differently: the weights come from a cumulative
    sum, not the loop's running one, and the products may order their sums otherwise."""
    jj, m_win, h_a, h_d = _window_records(ra, rd, start, n_w, m_r, Hv, R, RING, BJ)
    t0, t1, t2, t3 = _k_window4(rk, start, jj, m_win, C, RING, Hk, BC)
    tot = tl.sum(h_a, 0)
    e_tot = tl.exp(tot)
    wd = tl.trans(h_d) * tl.where(m_win, tl.exp(tot - tl.cumsum(h_a, 0)), 0.0)[None, :]
    # (written e^{c_W} S + product, the compiler accumulates the product onto the tile the same way)
    return (tl.dot(wd, t0, e_tot * s0, input_precision="ieee"), tl.dot(wd, t1, e_tot * s1, input_precision="ieee"),
            tl.dot(wd, t2, e_tot * s2, input_precision="ieee"), tl.dot(wd, t3, e_tot * s3, input_precision="ieee"))


@triton.jit
def _token(qn_ptr, kn_ptr, kq_ptr, v_ptr, g_ptr, beta_ptr, i_b, t, i_h, i_kh, rows, m_r, Hk, Hv, R, C,
           T: tl.constexpr, BC: tl.constexpr, ILV: tl.constexpr):
    """New token t's inputs: q̃, k (quarters), v, g, β and k·q̃."""
    bh = (i_b.to(tl.int64) * T + t) * Hv + i_h
    bk = (i_b.to(tl.int64) * T + t) * Hk + i_kh
    q0, q1, q2, q3 = _vec4(qn_ptr + bk * C, C, BC, ILV)
    k0, k1, k2, k3 = _vec4(kn_ptr + bk * C, C, BC, ILV)
    b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, bh, rows, m_r, R)
    return q0, q1, q2, q3, k0, k1, k2, k3, b_v, g, beta, tl.load(kq_ptr + bk)


@triton.jit
def gdn_replay_step_kernel(
    u_d, u_sc, u_gs, su_d, su_sc, su_gs,                       # update checkpoint
    r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,                       # read copy
    rk_ptr, rd_ptr, rv_ptr, ra_ptr, rbeta_ptr, s_rk, s_rd, s_ra,  # records (slot strides; v as d, beta as a)
    slot_ptr, start_ptr, wlen_ptr, seq_ptr, ev_ptr, seed,
    q_ptr, k_ptr, qn_ptr, kn_ptr, kq_ptr, kk_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, scale,
    Hk: tl.constexpr, Hv: tl.constexpr, R: tl.constexpr, C: tl.constexpr, RING: tl.constexpr,
    T: tl.constexpr, FLUSH: tl.constexpr, FOLD_NEW: tl.constexpr, SPLIT: tl.constexpr,
    RECOMPUTE: tl.constexpr, RESOLVE: tl.constexpr, NORM: tl.constexpr, FUSED: tl.constexpr,
    UFMT: tl.constexpr, USR: tl.constexpr, RFMT: tl.constexpr, RSR: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr, HW: tl.constexpr, FP4: tl.constexpr,
    PDL: tl.constexpr, FOLD_STAGES: tl.constexpr, TOKEN_FIRST: tl.constexpr, EARLY_TOKEN: tl.constexpr,
    EARLY_QK: tl.constexpr, QUARTER_SCORES: tl.constexpr, FOLD_PRODUCT: tl.constexpr,
):
    tl.static_assert((not TOKEN_FIRST) or (FUSED and FLUSH and FOLD_NEW))
    # FUSED: the one-launch form of a one-token step (no scores kernel before it): the program
    # normalises the new q, k from the inputs (q_ptr, k_ptr) and computes the scores it needs itself,
    # and one program per (key head, batch entry) writes the new k record (the output-only block)
    tl.static_assert((not FUSED) or (T == 1 and (FOLD_NEW or not FLUSH)))
    # FP32_LOADS_FIRST (the one-launch output-only step from an fp32 read copy, small batches): the
    # state tile and the window's records requested first (see below)
    FP32_LOADS_FIRST: tl.constexpr = FUSED and (not FLUSH) and T == 1 and RFMT == C_FP32
    i_r, i_h, i_b, slot, rows, m_r = program_slot(slot_ptr, R, BR)
    i_kh = i_h // (Hv // Hk)
    bk = i_b.to(tl.int64) * Hk + i_kh  # this token's q, k row (batch entry, key head)
    valid = slot >= 0
    cols = tl.arange(0, BC)
    m_c = cols < C
    # the writer of the key head's new k record in the one-launch form: its first value head, row block 0
    m_own = m_c & ((cols * 0 + slot) >= 0) & ((cols * 0 + i_r) == 0) & ((cols * 0 + i_h % (Hv // Hk)) == 0)
    start = tl.load(start_ptr + i_b)
    n_w = tl.where(valid, tl.load(wlen_ptr + i_b), 0)  # a skipped entry has an empty window
    slot = tl.maximum(slot, 0)
    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    rk = rk_ptr + slot * s_rk + i_kh * C  # record j of this head: rk + p·Hk·C, rd + p·Hv·R, ra + p·Hv
    rd = rd_ptr + slot * s_rd + i_h * R + rows
    rv = rv_ptr + slot * s_rd + i_h * R + rows
    ra = ra_ptr + slot * s_ra + i_h
    rbeta = rbeta_ptr + slot * s_ra + i_h
    ILV: tl.constexpr = (not FLUSH) and T == 1 and RFMT != C_FP32
    # the output-only step reads S_b q̃ and S_b k straight from FP8/NVFP4 codes (no decoded tile)
    FROM_CODES: tl.constexpr = (not FLUSH) and T == 1 and (RFMT == C_E4M3 or RFMT == C_NVFP4)
    # PDL: the scores kernel before this launch may still be running. Its outputs (qn .. kk) are read
    # only after await_scores, which comes after the state and record loads; an output-only step from
    # stored codes reads the raw q, k instead, as the one-launch form does, so that its state product
    # need not wait at all.
    RAW_QK: tl.constexpr = FROM_CODES and (FUSED or PDL)
    if FROM_CODES:
        # The state product first, before the records and scores: a GPU thread issues in program
        # order, so loads placed after the first wait (a reduction, a layout change through shared
        # memory) are requested a memory round trip later. H200, W = 7, both orders in one run
        # (reports/diagnostics/nonflush-order.jsonl, run 4): NVFP4 at batch 256 61.7-61.8 µs against
        # 67.4, FP8 65.5 against 65.7-66.0; batch 16 8.3 against 8.8 (NVFP4), 9.7 against 10.1 (FP8).
        # RAW_QK: scaled by the normalisation factors below.
        if RAW_QK:
            sb_q, sb_k = read_state_dot(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                                        q_ptr + bk * C, k_ptr + bk * C, RFMT, BR, BC, HW, True, FP4)
        else:
            sb_q, sb_k = read_state_dot(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                                        qn_ptr + bk * C, kn_ptr + bk * C, RFMT, BR, BC, HW, True, FP4)
    # The one-launch output-only step from an fp32 read copy (small batches) requests its state tile
    # and the window's records first, before q and k are normalised (a reduction that waits for them),
    # so that they are in flight during that work and the scores. H200, batch 1, both in one run
    # (reports/diagnostics/nonflush-order.jsonl, run 10): W = 15 4.85-4.93 µs against 5.07-5.12, W = 7
    # 4.77-4.84 against 4.85-4.86, W = 0 the same (4.54-4.62 against 4.53); batch 4 6.81-6.90 against 6.90-6.93.
    # This order leaves three loads late in the sm_90 compile (q and k after the d-record tile's
    # layout change, the k window after q's normalisation, v, g, β after the scores: five memory
    # round trips at batch 1, scripts/kernel_resources.py --hw --ops gdn --batch 1, rounds=3/10/2/8/4),
    # and it is still the faster one. Requesting q, k with the slot lookup and the k window and v, g, β
    # before the d-record tile compiles to two round trips (rounds=5/22) and 1048 SASS instructions
    # against 1112, and ran slower at every point timed (H100, batch 1, each row three times in one
    # run, reports/diagnostics/gdn-batch1-forms.jsonl): W = 0 / 7 / 15 4.88-5.23 / 5.32-5.35 /
    # 5.45-5.48 µs against 4.55-4.61 / 4.63-4.68 / 4.75-4.79 in this order; batch 4, W = 7, 7.88-7.94
    # against 7.72-7.78. Holding the window's d records as [rows, window] (no layout change of that
    # tile, rounds=5/22 too) ran slower the same way: batch 1, W = 7, 4.87-4.90 µs against 4.50-4.52
    # (H100, reports/diagnostics/batch1-fewer-rounds-8f94169.jsonl), and so did q and k read as one
    # [K, 2] tile (rounds=3/7/19): 4.71-4.81 against 4.51-4.60 (gdn-joint-qk-c6ff2ba.jsonl; 2 % faster
    # at batch 4). A fold of the window onto the state tile (the verify step's history fold)
    # followed by one step, with no score or d-record tile, ran 6.02-6.04 µs at W = 7 (4.38-4.41 at
    # W = 0): the fold waits on each record's loads in turn.
    if FP32_LOADS_FIRST and EARLY_QK:  # q and k first, in one load (EARLY_QK_LOADS)
        e_q, e_k = _joint_qk(q_ptr, k_ptr, bk, C, BC)
    if FP32_LOADS_FIRST:
        s0, s1, s2, s3 = _load4(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, RFMT, BR, BC, ILV, HW)
        jj, m_win, h_a, h_d = _window_records(ra, rd, start, n_w, m_r, Hv, R, RING, BJ)
        if QUARTER_SCORES:
            t0, t1, t2, t3 = _k_window4(rk, start, jj, m_win, C, RING, Hk, BC)
        else:
            t_k = _k_window(rk, start, jj, m_win, cols, m_c, Hk, C, RING)
        if EARLY_TOKEN:
            b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, i_b.to(tl.int64) * Hv + i_h, rows, m_r, R)
    if FUSED or RAW_QK:  # the new token's q̃, k as the scores kernel computes them (same helper)
        if FP32_LOADS_FIRST and EARLY_QK:
            n_q, n_k, f_q, f_k = _norm_qk(e_q, e_k, scale, NORM)
        else:
            n_q, n_k, f_q, f_k = _new_qk(q_ptr, k_ptr, bk, C, scale, NORM, BC)

    if FLUSH:
        s0, s1, s2, s3 = _load4(u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C, UFMT, BR, BC, ILV, HW)
        if TOKEN_FIRST:
            # the new token's v, g, β requested before the fold (the wrapper's _token_first: the
            # one-launch autoregressive flush of a small grid)
            b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, i_b.to(tl.int64) * Hv + i_h, rows, m_r, R)
        # RESOLVE: re-solve the window's d's from U (the recompute fold). The wrapper clears it where the
        # stored d's already are those d's (shared mode, R = U; docs/design.md §4.5), and the flush then
        # folds them in closed form, one FMA per element and record instead of a product, a multiply
        # and an FMA.
        if RESOLVE:
            s0, s1, s2, s3 = _fold_recompute(s0, s1, s2, s3, rk, rv, ra, rbeta, start, n_w, m_r, Hk, Hv, R, C,
                                             RING, BC, FOLD_STAGES)
        elif FOLD_PRODUCT:
            s0, s1, s2, s3 = _fold_buffered_product(s0, s1, s2, s3, rk, rd, ra, start, n_w, m_r, Hk, Hv, R, C,
                                                    RING, BC, BJ)
        else:
            s0, s1, s2, s3 = _fold_buffered(s0, s1, s2, s3, rk, rd, ra, start, n_w, m_r, Hk, Hv, R, C, RING,
                                            BC, BJ, FOLD_STAGES)
        # + 0: the reference adds the window's record sum (+0 where no term is nonzero) to e^{c_W} S, so a
        # −0 element comes out +0; the in-register fold keeps −0 where every term is −0. Same zeros, same codes.
        s0, s1, s2, s3 = s0 + 0.0, s1 + 0.0, s2 + 0.0, s3 + 0.0
        if FOLD_NEW:
            # autoregressive flush: the new token is a conventional step on the fp32 state
            bh = i_b.to(tl.int64) * Hv + i_h
            if FUSED:
                q0, q1, q2, q3 = _quarters(n_q, BC, ILV)
                k0, k1, k2, k3 = _quarters(n_k, BC, ILV)
            else:
                await_scores(PDL)  # the fold above needed nothing from the scores kernel
                q0, q1, q2, q3 = _vec4(qn_ptr + bk * C, C, BC, ILV)
                k0, k1, k2, k3 = _vec4(kn_ptr + bk * C, C, BC, ILV)
            if not TOKEN_FIRST:
                b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, bh, rows, m_r, R)
            alpha = tl.exp(g)
            b_d = beta * (b_v - alpha * _matvec(s0, s1, s2, s3, k0, k1, k2, k3))
            s0, s1, s2, s3 = _rank1(s0, s1, s2, s3, alpha, b_d, k0, k1, k2, k3)
            b_o = _matvec(s0, s1, s2, s3, q0, q1, q2, q3)
            tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
        _store4(s0, s1, s2, s3, u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C,
                seed, seq, ev, False, UFMT, USR, BR, BC, ILV, HW)
        if SPLIT:
            # Behind an FP8 checkpoint the read copy keeps the integer block scales: with the hardware
            # conversions that flush compiled with more spills under Triton 3.6 (800 against 456 bytes of
            # stack, scripts/kernel_resources.py --hw --ops flush) and ran slower on the H200 (903-905
            # against 847-848 µs at batch 256, reports/diagnostics/hw-block-scales-6100878.jsonl).
            _store4(s0, s1, s2, s3, r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                    seed, seq, ev, True, RFMT, RSR, BR, BC, ILV, HW and UFMT != C_E4M3)
    elif not (FROM_CODES or FP32_LOADS_FIRST):
        s0, s1, s2, s3 = _load4(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, RFMT, BR, BC, ILV, HW)

    if (not FLUSH) and T == 1:
        # output-only step: S_{W-1} x = e^{c_W} (S_b x) + Σ_j e^{c_W − c_j} (k_j·x) d_j with S_b the read
        # copy; scores k_j·q̃, k_j·k from the pre-kernel (position W: the new token's k·q̃), or, in the
        # one-launch form, computed here with the pre-kernel's helpers.
        if not FP32_LOADS_FIRST:
            jj, m_win, h_a, h_d = _window_records(ra, rd, start, n_w, m_r, Hv, R, RING, BJ)
        bh = i_b.to(tl.int64) * Hv + i_h
        if FUSED:
            if not FROM_CODES:
                q0, q1, q2, q3 = _quarters(n_q, BC, ILV)
                k0, k1, k2, k3 = _quarters(n_k, BC, ILV)
            if not FP32_LOADS_FIRST:
                t_k = _k_window(rk, start, jj, m_win, cols, m_c, Hk, C, RING)
            if FP32_LOADS_FIRST and QUARTER_SCORES:
                # the window's k rows (the new token's at position W) times q̃ and k in the state's
                # column quarters: the same row products as S_b q̃, S_b k below
                new_row = (jj == n_w)[:, None]
                t0, t1 = tl.where(new_row, k0, t0), tl.where(new_row, k1, t1)
                t2, t3 = tl.where(new_row, k2, t2), tl.where(new_row, k3, t3)
                sc_q = _matvec(t0, t1, t2, t3, q0, q1, q2, q3)
                sc_k = _matvec(t0, t1, t2, t3, k0, k1, k2, k3)
            else:
                sc_q, sc_k = _scores(tl.where((jj == n_w)[:, None], n_k[None, :], t_k), n_q, n_k)
        elif not FROM_CODES:
            await_scores(PDL)  # the state tile and the records are loaded already
            q0, q1, q2, q3 = _vec4(qn_ptr + bk * C, C, BC, ILV)
            k0, k1, k2, k3 = _vec4(kn_ptr + bk * C, C, BC, ILV)
        # Where the scores are read was measured (H200, batch 256, W = 7, both orders in one run,
        # reports/diagnostics/overlap-scores.jsonl): after the state product for a decoded tile (fp32
        # read copy 165.6 µs against 179.9 with them read first), first for products from stored codes
        # (FP8 66.0 against 68.3; NVFP4 78.4 late and 78.6 first, in two calls).
        EARLY_SCORES: tl.constexpr = (not FUSED) and FROM_CODES and not PDL
        if EARLY_SCORES:
            sc_q = tl.load(kq_ptr + bk * BJ + jj)
            sc_k = tl.load(kk_ptr + bk * BJ + jj)
        if not (FP32_LOADS_FIRST and EARLY_TOKEN):
            b_v, g, beta = _token_inputs(v_ptr, g_ptr, beta_ptr, bh, rows, m_r, R)
        tot = tl.sum(h_a, 0)
        decay = tl.where(m_win, tl.exp(tot - tl.cumsum(h_a, 0)), 0.0)
        e_tot = tl.exp(tot)
        if RAW_QK:
            # the products with the raw inputs, scaled by the normalisation factors afterwards (the
            # normalised vectors are in registers here, and read_state_dot reads its vectors from
            # memory): the same values as the two-launch form's up to fp32 rounding
            sb_q = f_q * sb_q
            sb_k = f_k * sb_k
        elif FROM_CODES:
            pass  # S_b q̃ and S_b k were read first (above)
        else:
            sb_q = _matvec(s0, s1, s2, s3, q0, q1, q2, q3)
            sb_k = _matvec(s0, s1, s2, s3, k0, k1, k2, k3)
        if (not FUSED) and not EARLY_SCORES:
            await_scores(PDL)  # (returns at once where the state product above has waited)
            sc_q = tl.load(kq_ptr + bk * BJ + jj)
            sc_k = tl.load(kk_ptr + bk * BJ + jj)
        s_q = e_tot * sb_q + tl.sum((decay * sc_q)[:, None] * h_d, 0)
        s_k = e_tot * sb_k + tl.sum((decay * sc_k)[:, None] * h_d, 0)
        alpha = tl.exp(g)
        b_d = beta * (b_v - alpha * s_k)
        b_o = alpha * s_q + tl.sum(tl.where(jj == n_w, sc_q, 0.0), 0) * b_d
        tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
        qp = ((start + n_w) & (RING - 1)).to(tl.int64)
        tl.store(rd + qp * Hv * R, b_d, mask=m_r)
        tl.store(ra + qp * Hv, g, mask=valid & (i_r == 0))
        if RECOMPUTE:
            tl.store(rv + qp * Hv * R, b_v, mask=m_r)
            tl.store(rbeta + qp * Hv, beta, mask=valid & (i_r == 0))
        if FUSED:
            # One launch: the key head's new k record is written here, by one program per (key head,
            # batch entry), at logical position W. No program of this launch reads it, so programs
            # running concurrently on a GPU cannot race on it: every program reads the key head's k
            # records only at positions jj < W (the score tile above; a non-flush step has no fold)
            # and takes the new token's k from the inputs, and position W is a different ring slot
            # from all of them — (start + j) & (RING-1) is one-to-one on 0 <= j < RING and
            # W < L <= RING. (The interpreter runs programs one after another and would hide a race;
            # this argument is what rules it out on the GPU.)
            tl.store(rk + qp * Hk * C + cols, n_k, mask=m_own)
    elif not FOLD_NEW:
        # drafts (verify, T > 1; speculative flush): S_{W-1} formed in registers — the history's closed
        # form on the read copy (a flush has folded it already) — then each draft a step on it, never
        # stored: d_t = β (v − α S k),  o_t = α S q̃ + (k·q̃) d_t,  S ← α S + d_t kᵀ
        if not FLUSH:
            s0, s1, s2, s3 = _fold_buffered(s0, s1, s2, s3, rk, rd, ra, start, n_w, m_r, Hk, Hv, R, C, RING,
                                            BC, BJ, FOLD_STAGES)
        # (token t + 1's inputs are loaded before token t's stores, which they cannot pass)
        q0, q1, q2, q3, k0, k1, k2, k3, b_v, g, beta, kq = _token(qn_ptr, kn_ptr, kq_ptr, v_ptr, g_ptr, beta_ptr,
                                                                  i_b, 0, i_h, i_kh, rows, m_r, Hk, Hv, R, C,
                                                                  T, BC, ILV)
        for t in tl.static_range(T):
            bh = (i_b.to(tl.int64) * T + t) * Hv + i_h
            alpha = tl.exp(g)
            b_d = beta * (b_v - alpha * _matvec(s0, s1, s2, s3, k0, k1, k2, k3))
            b_o = alpha * _matvec(s0, s1, s2, s3, q0, q1, q2, q3) + kq * b_d
            n_in = _token(qn_ptr, kn_ptr, kq_ptr, v_ptr, g_ptr, beta_ptr, i_b, t + 1 - (t + 1) // T, i_h, i_kh,
                          rows, m_r, Hk, Hv, R, C, T, BC, ILV)
            tl.store(o_ptr + bh * R + rows, tl.where(valid, b_o, 0.0).to(o_ptr.dtype.element_ty), mask=rows < R)
            if t + 1 < T:
                s0, s1, s2, s3 = _rank1(s0, s1, s2, s3, alpha, b_d, k0, k1, k2, k3)
            qp = ((start + n_w + t) & (RING - 1)).to(tl.int64)
            tl.store(rd + qp * Hv * R, b_d, mask=m_r)
            tl.store(ra + qp * Hv, g, mask=valid & (i_r == 0))
            if RECOMPUTE:
                tl.store(rv + qp * Hv * R, b_v, mask=m_r)
                tl.store(rbeta + qp * Hv, beta, mask=valid & (i_r == 0))
            q0, q1, q2, q3, k0, k1, k2, k3, b_v, g, beta, kq = n_in


# ---------------------------------------------------------------------------------------------
# Host wrappers
# ---------------------------------------------------------------------------------------------
# The conventional step's launch shape, measured fastest on the H200 (Qwen3.5-4B shape): 4 rows × 1
# warp, at batch 256 260.8 µs against 266.2 at 8 × 1 and 280.9 at 8 × 2, the earlier default ("tune"
# rows of reports/bench/bench_kernels_round2c_quick.json), and at batch 1 / 4 / 16 3.94 / 6.70 / 19.56
# µs against 5.57 / 8.35 / 21.99 at 8 × 2 (reports/bench/tune_small_batch.json).
CONVENTIONAL_BLOCK_R = 4
CONVENTIONAL_NUM_WARPS = 1
# Above CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES (batch × value heads; batch 64 of Qwen3.5-4B's 32), a
# conventional step storing a 16-bit or FP8 state runs more rows per program than fp32's 4: with the
# SR draws and the encode, 4 rows per warp spend more instructions per program than their few bytes
# need. H100 80GB HBM3, batch 256, every shape twice in one process (reports/diagnostics/
# conv-shapes.jsonl): bf16 187.8 µs at 8 × 1 against 202.8-203.5 at 4 × 1; fp16-SR 229.3-230.1 at
# 16 × 1 against 258.1-258.8; bf16-SR 214.3-215.9 at 16 × 1 against 234.2-234.4; FP8-SR 242.3-243.2
# at 8 × 1 against 275.2-275.3 (fp32: 363.6-364.0 at 4 × 1, no other shape faster). Smaller batches
# were not timed at these shapes and keep 4 × 1. The benchmark tunes each stored format's
# conventional step over its shapes and this rule before it uses it as a baseline.
CONVENTIONAL_FORMAT_SHAPES = {"bf16": (8, 1), "fp16-sr": (16, 1), "bf16-sr": (16, 1), "fp8e4m3-sr": (8, 1)}
CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES = 2048
# The T = 1 output-only step (two-launch form) from an fp32 or NVFP4 read copy runs with a register
# cap (Triton's maxnreg). First measured with the shape arguments as runtime values, both at 168: 3
# warps per scheduler fit instead of 2 (sm_90: 16K registers each). H200, batch 256, W = 7
# (reports/diagnostics/gdn-shared-fold-nonflush-cap.jsonl, each row twice): fp32 180-183 µs against
# 187-190 uncapped (160: 190, 152: 206); NVFP4 79-80 against 83-84. With the shapes as compile-time
# constants (reports/diagnostics/shape-constants.jsonl, each row twice) the fp32 step is best at 208:
# 157.4-158.2 µs against 160.6-160.9 at 192, 167.9-168.8 at 168, 172.0-172.8 uncapped; NVFP4 stays at
# 168 (66.3-66.7 against 71.9 at 192, 74.6-75.2 at 208, 75.0-75.4 uncapped). A BF16 read copy gains
# nothing from a cap (108 against 109) and keeps none. Since the state product from FP8/NVFP4 codes
# comes first in the kernel (reports/diagnostics/nonflush-order.jsonl, run 5, each row twice): FP8 at
# 128 63.3 µs against 65.9-66.1 uncapped (at 168 it had gained nothing before: 66.1-66.4 against
# 66.4-66.5); NVFP4 at 168 62.2-62.8 against 62.5-62.7 uncapped, 65.0-65.4 at 144, 74.0-74.3 at 128.
# The NVFP4 cap was measured with the default element decode (fp4_decode="fp16"); the other decodes run
# uncapped: under it the "ptx" decode spills 776 bytes of stack per thread (sm_90 compile,
# scripts/kernel_resources.py --hw --fp4-decode ptx) and ran 276.8 µs against 61.7 for "fp16" (H200,
# batch 256, tuning rows of reports/bench/bench_kernels_round2v_quick.json).
NONFLUSH_MAX_REGISTERS = {FMT_FP32: 208, FMT_NVFP4: 168, FMT_E4M3: 128}
# Warps of a scores-kernel program (one per key head and batch entry: q/k normalisation, the k
# record, the window's scores). Its [BJ, K] window tile and the two norms reduce within a warp at 1-2
# warps instead of through shared memory and barriers at 4. H200, every row twice in one process
# (reports/diagnostics/scores-warps.jsonl), batch 256, at 2 / 1 / 4 warps: output-only step from an
# NVFP4 read copy 60.0-60.5 / 60.3-61.1 / 61.7-62.1 µs, from fp32 155.8-156.3 / 155.0-155.3 /
# 157.5-157.6, verify T = 8 517.7-519.1 / 511.8-513.7 / 527.5-528.1, speculative flush T = 8
# 680.1-680.4 / 675.1-676.5 / 689.8-691.0; batch 16 output-only step 16.7 / 17.1 / 16.7: 2 warps is
# faster than 4 at batch 256 and within 0.2 % of it at batch 16, 1 warp loses at batch 16.
SCORES_NUM_WARPS = 2
# A replay launch with fewer programs than this (about one per SM of an H200) takes smaller row blocks.
SMALL_GRID_PROGRAMS = 128
SMALL_GRID_ROWS = 16
# The one-launch output-only step from an fp32 read copy (up to a ring of 32 records) has its own
# rule, SMALL_GRID_OUTPUT_ROWS, now the same 16 rows. Once it requested q and k first (EARLY_QK_LOADS)
# its 16-row programs spent more of their time in the reductions and layout changes between the
# program's warps than waiting for memory, and 32 rows ran faster. H100, batch 1, every shape three
# times in one process
# (reports/diagnostics/batch1-output-shapes-2dc9fd3.jsonl): 32 rows x 2 warps W = 7 4.28-4.29 µs, W = 15
# 4.35-4.38, against 4.09-4.46 and 4.55-4.58 at 16 x 2 (32 x 4: 4.74-4.82; 8 x 2: 4.75-4.90; 8 x 1:
# 5.04-5.27; 16 x 1: 5.68-8.88). Re-timed with the window scored in column quarters (H100, four
# rounds, reports/diagnostics/gdn-batch1-output-shapes-dd69a2c.jsonl): 16 x 2 and 16 x 1 within the
# spread of 32 x 2 (W = 7 4.21-4.26 and 4.18-4.23 µs against 3.91-4.25). With every other batch-1 rule
# on (H100, four rounds, reports/diagnostics/gdn-batch1-rules-ab-8e87457-h100.jsonl):
# 32 x 2 3.94-4.28 µs against 4.16-4.26 at 16 x 2, again within the spread. A third such run
# (reports/diagnostics/gdn-batch1-rules-ab-8cfe43c-h100.jsonl): 3.85-4.23 against 4.16-4.17, but after
# its first round 32 x 2 read 4.20-4.23, about 1 % slower than 16 x 2. Those A/B runs and the fourth
# (gdn-batch1-rules-ab-1723f7c-h100.jsonl) all timed 32 x 2 second in their process, after one
# conventional step, in the first round: there both read about 8 % fast (32 x 2 3.85-3.97 µs), the
# rows after them did not. Every later round, 12 of 12 over the four runs, timed 32 x 2 slower than
# 16 x 2, by 0.005-0.058 µs (16 x 2 4.16-4.33): 16 rows again. Timed again with a warm-up round first
# (gdn-batch1-rules-ab-38216a3-h100.jsonl): 16 x 2 4.17-4.29 µs against 4.22-4.38, faster in 4 of 4
# rounds; in two later runs (a52ff7e, ab7987c) 16 x 2 was faster in 7 of 8 rounds. Which change to
# the kernel moved the two shapes back is not measured. The 16-row program takes three memory round
# trips where the 32-row one takes two (sm_90 compile with Triton 3.9: 928 SASS instructions, 166
# registers, rounds=7/10/12, against 1120, 168, rounds=7/31). The rule stays apart from
# SMALL_GRID_ROWS because the H200 has not timed these shapes since the kernels changed.
SMALL_GRID_OUTPUT_ROWS = 16
# There (batch 1 of Qwen3.5-4B) the one-token steps run SMALL_GRID_WARPS warps: the one-launch
# output-only step instead of fused_nonflush_warps' 4, the flush instead of the 1 warp of 128 state
# elements per thread (in both launch forms: the warps set the order of its fp32 sums, and the forms
# store the same state bits). H200, batch 1, each row three times in one run
# (reports/diagnostics/gdn-small-grid-warps.jsonl, one-launch form): output-only step at W = 0 / 7 / 15
# 4.07-4.31 / 4.44-4.50 / 4.59-4.63 µs against 4.53-4.55 / 4.73-4.76 / 4.83-5.02 at 4 warps, from an
# NVFP4 read copy 4.42-4.45 against 4.50-4.54; flush (W = 15) 7.50-7.58 against 8.30-8.34 at 1 warp
# and 7.64-7.66 at 4. The output-only step with a ring above 32 records keeps fused_nonflush_warps:
# at 2 warps it spilled (sm_90 compile, ring 64: 392 bytes of stack per thread; ring 32: 227
# registers, none).
SMALL_GRID_WARPS = 2


def _block_rows(R: int, stored: tuple[int, ...], block_r: int | None) -> int:
    """Rows per program; ``stored``: formats the launch writes (writing NVFP4 needs the head's amax)."""
    if any(f == FMT_NVFP4 for f in stored):
        return pow2(R)  # NVFP4's global scale is per matrix: one program owns the whole head
    return block_r if block_r is not None else min(pow2(R), 32)


def _small_grid(R: int, head_matrices: int, block_r: int | None) -> bool:
    """Whether a replay launch at its default 64-row blocks would have fewer than SMALL_GRID_PROGRAMS
    programs (``head_matrices``: batch × value heads; an explicit ``block_r`` is never resized)."""
    return block_r is None and triton.cdiv(R, min(pow2(R), 64)) * head_matrices < SMALL_GRID_PROGRAMS


def _small_grid_warps(T: int, flush: bool, fused: bool, R: int, br: int, bj: int, head_matrices: int,
                      block_r: int | None) -> int | None:
    """SMALL_GRID_WARPS for a one-token step in SMALL_GRID_ROWS-row (or SMALL_GRID_OUTPUT_ROWS-row)
    programs of a small grid: the one-launch output-only step up to a ring of 32 records, and the
    flush in both launch forms (the warps set the order of its fp32 sums, and both forms must store
    the same state bits); else None (the other rules stand)."""
    if (T == 1 and br in (SMALL_GRID_ROWS, SMALL_GRID_OUTPUT_ROWS) and _small_grid(R, head_matrices, block_r)
            and (flush or (fused and bj <= 32))):
        return SMALL_GRID_WARPS
    return None


# The folds' software-pipeline depth (``tl.range(num_stages=)``: STAGES - 1 records requested ahead
# of the one being applied). FOLD_STAGES where the grid is large: H100, batch 256, both depths in one
# run (reports/diagnostics/gdn-fold-stages-256.jsonl): shared fp32 flush 413.6-414.0 µs at 8 stages
# against 485.8-487.3 at 4, verify T = 8 542.3-543.0 against 564.8-566.4, fp32/NVFP4 flush
# 682.6-683.0 against 716.9-717.5, fp16-SR/NVFP4 flush the same (723.1-723.2 against 721.2-721.3);
# on the H200 4 had beaten 3 and 2 by 7-27 % in the fp32 flushes and tied 3 in the fp16-SR/NVFP4
# flush (gdn-fold-stages.jsonl). FOLD_STAGES_SMALL_GRID in a
# small grid (``_small_grid``: batch 1 of Qwen3.5-4B), where deeper staging timed slower: H100, batch
# 1, the one-launch fp32 flush at W = 15, 16 stages 8.13-8.21 µs against 7.33-7.73 at 4
# (gdn-batch1-token-first.jsonl; batch1-fold-ab-88539a5.jsonl the same), though its sm_90 compile
# requests all the window's records in one round trip (117 loads a thread against 29).
FOLD_STAGES = 8
FOLD_STAGES_SMALL_GRID = 4


def _fold_stages(small_grid: bool, fold_stages: int | None) -> int:
    """The fold's pipeline depth: ``fold_stages`` if given, else the rule above (``small_grid``:
    ``_small_grid`` of the launch)."""
    if fold_stages is not None:
        if fold_stages < 1:
            raise ValueError(f"fold_stages must be >= 1, got {fold_stages}")
        return fold_stages
    return FOLD_STAGES_SMALL_GRID if small_grid else FOLD_STAGES


# The one-launch autoregressive flush of a small grid requests the new token's v, g, β before the
# fold (TOKEN_FIRST), where after it they waited a round trip of their own (sm_90, batch 1:
# rounds=5/29/7/4, the last these). H100, batch 1, fp32 flush at W = 15, 4 stages, both in one run
# (reports/diagnostics/gdn-batch1-token-first.jsonl): 7.33 / 7.73 / 7.67 µs against 7.83 / 7.87 / 7.83.
# Only in a small grid: the same move at batch 4 timed 3 % slower (early-inputs.jsonl).
TOKEN_FIRST_SMALL_GRID = True
# The one-launch output-only step from an fp32 read copy (small batches) requests its token's v, g, β
# with the state tile and the window's records (EARLY_TOKEN_INPUTS), and only those: where they came
# after the scores they were a memory round trip of their own (sm_90, batch 1: rounds=3/10/9/1/4 →
# 3/8/15/1). Unlike the form that also requested q and k early (above, slower), this measured faster:
# H100, batch 1 each row five times, 4 and 8 three times, both forms in one process
# (reports/diagnostics/gdn-early-token-e6344c2.jsonl): batch 1 W = 7 4.46-4.53 µs against 4.63-4.71,
# W = 15 4.52-4.62 against 4.72-4.80, W = 0 4.31-4.42 against 4.52-4.58 (4.20 in the first round);
# batch 4 W = 7 7.60-7.68 against 7.72-7.79; batch 8 the same within the spread.
EARLY_TOKEN_INPUTS = True
# ... and its q and k before anything else, as one [K, 2] load (EARLY_QK_LOADS): where they came after
# the d-record tile's layout change (the kernel's first barrier), the step waited a round trip for q
# and then another for k (Nsight Compute: 109 and 48 of its 448 warp samples; H100, batch 1,
# reports/diagnostics/ncu-batch1-2bd1ea1.json). H100, both forms in one process, four rounds each
# (reports/diagnostics/gdn-early-qk-2516c10.jsonl): batch 4 5 % faster at W = 0, 7 and 15 (7.15-7.32 µs
# against 7.52-7.64 at W = 7); batch 1 W = 0 4.21-4.25 against 4.32-4.38, W = 7 and 15 the same within
# the spread (4.44-4.45 against 4.45-4.47 after a first round of 4.08); with every other batch-1 rule on
# (H100, four rounds, reports/diagnostics/gdn-batch1-rules-ab-8e87457-h100.jsonl)
# W = 7 4.25-4.29 against 4.32-4.38. Requesting the k window before
# the d-record tile as well made batch 1 10 % slower (4.74-4.96 against 4.49-4.53 at W = 7,
# gdn-early-k-window-1031428.jsonl). With q and k first the 16-row programs of batch 1 were for a
# while not the fastest shape (SMALL_GRID_OUTPUT_ROWS).
EARLY_QK_LOADS = True
# In a small grid (batch 1) that step scores its window from k records loaded as column quarters
# (WINDOW_SCORES_IN_QUARTERS): k_j·q̃ and k_j·k become row products of the state tile's shape
# (``_matvec`` on q̃, k's quarters, which the state product needs anyway), an in-thread FMA chain and
# three shuffle levels, where the [window, K] tile had five and two layout changes of q̃, k of its
# own. sm_90 compile at batch 1: 1080 SASS instructions against 1320, 166 registers against 218,
# 34 barriers against 40, every load in two round trips (rounds=7/31 against 7/19/12;
# scripts/kernel_resources.py --hw --ops gdn --batch 1). H100, both forms in one process, four
# rounds, the order alternating (reports/diagnostics/gdn-quarter-scores.jsonl): batch 1 W = 7
# 4.19-4.25 µs against 4.29-4.34, W = 15 4.30-4.37 against 4.35-4.40, W = 0 3.72-4.13 against
# 3.81-4.20; batch 4 (64-row programs) W = 7 7.34-7.43 against 7.14-7.28, slower, so only in a small grid.
# With every other batch-1 rule on (H100, four rounds,
# reports/diagnostics/gdn-batch1-rules-ab-8e87457-h100.jsonl): batch 1 W = 7 4.26-4.32 against 4.36-4.40.
WINDOW_SCORES_IN_QUARTERS = True
# The buffered fold of a small grid's one-token flush (batch 1 of Qwen3.5-4B) runs as one fp32 product
# per column quarter (FOLD_WINDOW_AS_PRODUCT, ``_fold_buffered_product``) instead of the pipelined
# loop over records, whose time grew by about 0.2 µs per record at batch 1: each record waits for its
# loads in turn (4 stages; 16 stages timed slower). H100, batch 1, shared fp32 flush, both forms in
# one process, four rounds, the order alternating (reports/diagnostics/gdn-fold-product-af710de.jsonl):
# one launch W = 15 5.91-5.98 µs against 7.62-7.65, W = 7 5.69-5.70 against 6.09-6.12, W = 0
# 5.57-5.62 against 4.38-4.78; two launches W = 15 7.83-7.88 against 9.85-9.95; with every other batch-1
# rule on (H100, four rounds, reports/diagnostics/gdn-batch1-rules-ab-8e87457-h100.jsonl)
# one launch W = 15 6.02-6.05 against 7.72-7.76. A flush comes at
# W = L - 1, so rings below 8 records (L ≤ 4: W ≤ 3, where the loop is faster) keep the loop, and so
# do rings above 32 (64: 480 bytes of stack per thread, sm_90 compile). Outputs and states agree
# with the loop's to fp32 rounding (relative 4e-7 and 9e-8 in that run), not bit for bit.
# What the products cost: their FMAs cover the whole ring whatever W is (524 FFMA instructions a
# thread; about 103 of the flush's 572 Nsight Compute samples at W = 15, H100,
# reports/diagnostics/ncu-gdn-batch1-flush-product-c255e36.json). Neither of two cheaper forms timed
# faster (H100, batch 1, W = 15): 4 warps instead of SMALL_GRID_WARPS 5.98-6.05 µs against 5.90-6.14
# (gdn-batch1-flush-warps-c255e36.jsonl); tensor-core products (input_precision "tf32x3") 7.52-7.58
# against 5.90-5.91, their sm_90 compile requesting the loads in seven round trips
# (gdn-batch1-flush-tf32x3-c255e36.jsonl).
FOLD_WINDOW_AS_PRODUCT = True


def _fold_product(small_grid: bool, flush: bool, T: int, br: int, ring: int, bc: int,
                  fold_stages: int | None) -> bool:
    """Whether a flush's buffered fold runs as products (FOLD_WINDOW_AS_PRODUCT): a one-token flush in
    SMALL_GRID_ROWS-row programs of a small grid, a ring of 8 to 32 records, column quarters of at
    least 16 (``tl.dot``'s smallest operand), and no explicit ``fold_stages`` (which asks for the loop)."""
    return (FOLD_WINDOW_AS_PRODUCT and small_grid and flush and T == 1 and br == SMALL_GRID_ROWS
            and 8 <= ring <= 32 and bc // 4 >= 16 and fold_stages is None)


def _token_first(fused: bool, flush: bool, fold_new: bool, small_grid: bool) -> bool:
    """Whether the launch requests the new token's inputs before the fold (TOKEN_FIRST_SMALL_GRID)."""
    return TOKEN_FIRST_SMALL_GRID and fused and flush and fold_new and small_grid


def _replay_launch(R: int, C: int, stored: tuple[int, ...], block_r: int | None, serial: bool,
                   head_matrices: int, read_code: int = C_FP32) -> tuple[int, int]:
    """(rows, warps) of a replay program; the whole head when the launch stores NVFP4. ``serial``
    (a flush's fold, drafts): 64 rows and 128 state elements per thread — the work is a chain over
    records and tokens, and fewer threads with more independent work each ran it fastest (H200). The
    T = 1 output-only step: 64 rows, 128 elements per thread, i.e. 2 warps (H200: from an fp32 read
    copy 188.4 µs against 218.0 at 4 warps at batch 256 in one run, bench_kernels_round2b_quick.json;
    17.5 against 20.8 µs at batch 16, reports/bench/tune_small_batch.json); from a stored read copy
    (``read_code`` not fp32) 256 elements per thread, i.e. 1 warp (H200, batch 256, W = 7, FMAs fused:
    NVFP4 82.9 µs against 88.9 at 2 warps, FP8 66.2 against 77.5; reports/diagnostics/
    nonflush-shape-fusion.jsonl). ``head_matrices``: batch ×
    value heads; a launch that would have fewer programs than SMALL_GRID_PROGRAMS (batch 1 of
    Qwen3.5-4B's 32 heads: 64 programs of 64 rows) and stores no NVFP4 takes SMALL_GRID_ROWS-row
    programs (the fp32 flush at batch 1: 9.97 µs against 13.48 at 64 rows, tune_small_batch.json)."""
    rows = min(pow2(R), 64)
    if _small_grid(R, head_matrices, block_r):
        rows = min(rows, SMALL_GRID_ROWS)
    br = _block_rows(R, stored, rows if block_r is None else block_r)
    per_thread = 128
    # A flush that stores NVFP4 owns the whole head: [128, 128] at 4 warps (H200, batch 256, fp32
    # update copy + NVFP4 read copy: 739 µs, 255 registers and 8 bytes of stack; 8 warps without a
    # spill measured 975). With an SR update copy it ran at 16 warps (32 elements per thread: 1981 µs
    # against 731 with an fp32 checkpoint), because rounding the joined [128, 128] tile at once, with
    # one SR word per element beside it, spilled 6920 bytes of stack at 4 warps (9708 µs). The state
    # is now loaded, folded and stored as column quarters (``_load4``, ``_store4``: one quarter's SR
    # values live at a time) and the SR flush takes the fp32 one's 4 warps: sm_90 compile
    # (scripts/kernel_resources.py --hw --ops flush) of the fp16-SR/NVFP4 flush at 4 warps: 255
    # registers, 48 bytes of stack outside the fold loop, 538 instructions per record (fp32
    # checkpoint: 577) and ~74k warp instructions per program at L = 16, against ~137k at 16 warps
    # before (128 registers, 88 bytes of stack) — the fold loop at 16 warps costs twice as many
    # warp instructions per record. H200, batch 256: 1504 µs (reports/bench/bench_kernels_round2b_quick.json).
    # Re-measured with the quarters (H200, batch 256, reports/diagnostics/gdn-flush-warps.jsonl): 4 warps
    # 722 µs for fp16-SR/NVFP4 against 852 at 8 warps capped at 128 registers (two programs per SM, no
    # spill), 1042 at 8 uncapped, 1209 at 16 — the fold loop's warp instructions grow with the warps.
    if read_code != C_FP32 and not serial and not stored:
        per_thread = 256  # the output-only step from a stored copy: fewer, fuller threads
    return br, max(1, min(16, br * C // (32 * per_thread)))


def _nonflush_max_registers(T: int, flush: bool, fused: bool, block_r: int | None, num_warps: int | None,
                            read_code: int, fp4_decode: str = "fp16") -> int:
    """The register cap of a launch (0: none): NONFLUSH_MAX_REGISTERS[read format] for the two-launch
    T = 1 output-only step at its default shape from an fp32, FP8 (E4M3) or NVFP4 read copy (NVFP4:
    with the fp16 element decode only)."""
    default_shape = block_r is None and num_warps is None
    if T == 1 and not flush and not fused and default_shape and (read_code != FMT_NVFP4 or fp4_decode == "fp16"):
        return NONFLUSH_MAX_REGISTERS.get(read_code, 0)
    return 0


def _conventional_launch(R: int, C: int, code: int, block_r: int | None, num_warps: int | None,
                         head_matrices: int = 0, fmt: str | None = None) -> tuple[int, int]:
    """(rows, warps) of a conventional-step program (``C``: the padded column count; ``head_matrices``:
    batch × value heads; ``fmt``: the stored format's name, for ``CONVENTIONAL_FORMAT_SHAPES``). An
    NVFP4 state needs the whole head in one program (its global scale is per matrix), far more than
    the 4-row block the 1-warp rule was measured on, so it takes ``warps_for_tile``: at 1 warp the
    [128, 128] head spilled (H200, batch 256, ncu: 2.85 ms and 8.8 M local-memory spill requests,
    against 257 µs for an fp32 state)."""
    default_br, default_nw = CONVENTIONAL_BLOCK_R, CONVENTIONAL_NUM_WARPS
    if head_matrices >= CONVENTIONAL_FORMAT_MIN_HEAD_MATRICES:
        default_br, default_nw = CONVENTIONAL_FORMAT_SHAPES.get(fmt, (default_br, default_nw))
    br = _block_rows(R, (code,), default_br if block_r is None else block_r)
    if num_warps is None:
        num_warps = default_nw if block_r is None and code != FMT_NVFP4 else warps_for_tile(br, C)
    return br, num_warps


def _check(state: PackedState, V: int, K: int) -> None:
    if (state.R, state.C) != (V, K):
        raise ValueError(f"state pool holds [{state.R}, {state.C}] matrices, inputs need [{V}, {K}]")


def gdn_conventional_step(state: PackedState, slots: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *, scale: float | None = None,
                          qk_l2norm: bool = True, seq_ids: torch.Tensor | None = None,
                          events: torch.Tensor | int = 1, seed: int = 0, layer: int = 0,
                          block_r: int | None = None, num_warps: int | None = None,
                          out: torch.Tensor | None = None) -> torch.Tensor:
    """One conventional GDN decode step, state updated in place in ``state``'s format.

    state: PackedState pool [S, Hv, V, K]; slots [B] (-1 = skip); q, k [B, Hk, K]; v [B, Hv, V];
    g, beta [B, Hv]. Returns o [B, Hv, V] in v's dtype. block_r / num_warps override the launch shape.
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
    bc = max(pow2(K), 16)
    br, num_warps = _conventional_launch(V, bc, state.code, block_r, num_warps, Bsz * Hv, state.fmt)
    gdn_conventional_step_kernel[(triton.cdiv(V, br), Hv, Bsz)](
        *state.kernel_args(), slots.to(torch.int32).contiguous(), as_i64(seq_ids, Bsz, dev),
        as_i64(events, Bsz, dev), sr_seed(seed, layer),
        q.contiguous(), k.contiguous(), v, g.contiguous(), beta.contiguous(), o,
        float(K ** -0.5 if scale is None else scale), Hk, Hv, V, K,
        FMT=state.code, SR=state.sr, NORM=qk_l2norm, BR=br, BC=bc, HW=v.is_cuda, num_warps=num_warps,
        enable_fp_fusion=False)
    return o


def gdn_replay_step(update: PackedState, read: PackedState | None, records: GDNRecords,
                    slots: torch.Tensor, start: torch.Tensor, wlen: torch.Tensor,
                    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                    scale: float | None = None, qk_l2norm: bool = True, flush: bool = False,
                    fold_new: bool = False, recompute: bool = True, seq_ids: torch.Tensor | None = None,
                    events: torch.Tensor | int = 1, seed: int = 0, layer: int = 0,
                    block_r: int | None = None, num_warps: int | None = None,
                    fused_scores: bool | None = None, fp4_decode: str = "fp16",
                    max_registers: int | None = None, window_from_update: bool = True,
                    overlap_scores: bool | None = None, fold_stages: int | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """One ReplaySSM GDN step for T = v.shape[1] tokens (see the module docstring).

    update / read: PackedState pools [S, Hv, V, K] (read=None: shared mode); records: ring buffers;
    start, wlen [B] int32 window pointers (the caller advances them: ``precision_lab.engines.triton_decode.advance``); q, k
    [B, T, Hk, K]; v [B, T, Hv, V]; g, beta [B, T, Hv]. Returns o [B, T, Hv, V]. block_r /
    num_warps override the launch shape (``_replay_launch``).
    fused_scores: run a one-token step (non-flush, or flush with fold_new) as one launch, every
    program normalising q, k and computing its scores k_j·q̃, k_j·k itself, instead of a scores
    kernel per key head followed by the step kernel; None = the batch-size rule
    (``kernels/common/launch.py``, ``fused_scores_launch``, measured on the H200). Both forms
    store the same state codes and k, v, a, β records bit for bit where their normalisations of q and
    k agree (always without ``qk_l2norm``; on a GPU the two kernels may sum Σk² in different orders);
    outputs and d records agree up to fp32 rounding (so does a later buffered fold of those d's).
    fp4_decode: "fp16", "ptx" or "mma", how the T = 1 non-flush step multiplies an NVFP4 read copy
    with q̃ and k (``mamba2_replay_step``); "mma" takes both from one tensor-core product (the
    two-launch form's normalised fp32 copies in two fp16 parts each, the one-launch form's bf16
    inputs in one).
    recompute: the flush's fold (docs/design.md §4.5), and whether v and β are stored with the
    records. In shared mode (read=None) the stored d's normally come from the checkpoint itself, so
    the flush folds them as they are (the two folds are the same computation there): always with an
    fp32 update checkpoint, and with a lossy one while ``window_from_update`` holds. A speculative
    flush round computes its committed tokens' d's from the unrounded fold, which a lossy format
    does not store; the caller then passes ``window_from_update=False`` until the next flush, and a
    recompute flush re-solves them from U (``precision_lab.engines.triton_decode`` tracks this).
    max_registers caps the registers per thread (None: ``_nonflush_max_registers``;
    0: no cap).
    overlap_scores: in the two-launch form of a one-token step, launch the step kernel as a
    programmatic dependent launch of the scores kernel, so that it loads its state and records (and
    folds them, in a flush) while q, k are normalised and scored (``overlap_scores_launch`` in
    ``kernels/common/launch.py``: None = where the GPU has it and it measured faster, i.e. the
    output-only step from an NVFP4 read copy; True forces it). The output-only step from FP8 or
    NVFP4 codes then takes its state products with the raw q, k scaled afterwards, as the one-launch
    form does: outputs and d records agree with the plain launch up to fp32 rounding; everything
    else is the same bit for bit.
    fold_stages: the software-pipeline depth of the window folds (flush, and the history of a verify
    step); None = the rule (``_fold_stages``: FOLD_STAGES, FOLD_STAGES_SMALL_GRID in a small
    grid, where a flush's buffered fold runs as products instead, ``_fold_product``). Any depth
    stores the same bits; the products agree with them to fp32 rounding.
    """
    check_fp4_decode(fp4_decode)
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
    bc = max(pow2(K), 16)
    br, nw = _replay_launch(V, bc, (update.code, read.code) if flush else (), block_r, flush or T > 1, Bsz * Hv,
                            read.code)
    bj = max(records.ring, 16)
    slots32, start32, wlen32 = (t.to(torch.int32).contiguous() for t in (slots, start, wlen))
    q, k = q.contiguous(), k.contiguous()
    scale = float(K ** -0.5 if scale is None else scale)
    fused = fused_scores_launch("gdn", Bsz, Hk, T, flush, fold_new, fused_scores, update.fmt,
                                None if shared else read.fmt)
    resolve = flush and recompute and not (shared and (update.code == C_FP32 or window_from_update))
    small_grid = _small_grid(V, Bsz * Hv, block_r)
    if small_grid and fused and not flush and read.code == C_FP32 and bj <= 32:
        br = SMALL_GRID_OUTPUT_ROWS  # the one-launch output-only step from fp32 (the rule's comment)
    if fused and not flush:  # the window's k records as a [ring, K] tile too: more warps (no spill)
        nw = max(nw, fused_nonflush_warps(bj))
    nw = _small_grid_warps(T, flush, fused, V, br, bj, Bsz * Hv, block_r) or nw
    fp4_decode = resolve_fp4_decode(fp4_decode, read, br, num_warps or nw)
    if max_registers is None:
        max_registers = _nonflush_max_registers(T, flush, fused, block_r, num_warps, read.code, fp4_decode)
    # a two-launch one-token step overlaps its scores kernel where it can (overlap_scores_launch)
    # (by default only the output-only step from an NVFP4 read copy: measured faster there, slower or
    # the same elsewhere; the comment above overlap_scores_launch). From a decoded read copy the
    # overlapped step waits for the scores kernel's q̃, k before its state product; a form that
    # normalised them itself and waited only for the scores was built at 03c6535 and reverted: H200,
    # batch 256, W = 7, three timings each in one process, the same bits from fp32 (shared 153.6-154.6
    # µs against 155.0-155.9 plain, split 154.3-154.7 against 155.4-155.7), slower from BF16 (105.9-106.4
    # against 101.7-101.8). The scores kernel takes 9.3 µs of the fp32 step's 155 there, and the
    # overlap hid about 1 of them (reports/diagnostics/gdn-own-qk-03c6535.jsonl, replay-kernel-times-03c6535.jsonl).
    pdl = T == 1 and (fold_new or not flush) and not fused and overlap_scores_launch(
        v.device, overlap_scores, measured_faster=read.code == C_NVFP4 and not flush)
    if fused:  # no scores kernel: the step programs read q and k themselves (qn .. kk are not read)
        qn = kn = kq = kk = records.a
    else:
        qn = torch.empty(Bsz, T, Hk, K, dtype=torch.float32, device=dev)
        kn = torch.empty_like(qn)
        scores = not flush and T == 1  # only the output-only step reads them
        kq = torch.empty((Bsz, T, Hk) + ((bj,) if scores else ()), dtype=torch.float32, device=dev)
        kk = torch.empty_like(kq) if scores else kq
        gdn_replay_scores_kernel[(Hk, Bsz)](
            records.k, records.k.stride(0), slots32, start32, wlen32, q, k, qn, kn, kq, kk, scale, Hk, K,
            records.ring, T=T, SCORES=scores, FOLD_NEW=fold_new, NORM=qk_l2norm, BC=bc, BJ=bj, PDL=pdl,
            num_warps=SCORES_NUM_WARPS)
    gdn_replay_step_kernel[(triton.cdiv(V, br), Hv, Bsz)](
        *update.kernel_args(), *read.kernel_args(),
        records.k, records.d, records.v, records.a, records.beta,
        records.k.stride(0), records.d.stride(0), records.a.stride(0),
        slots32, start32, wlen32, as_i64(seq_ids, Bsz, dev), as_i64(events, Bsz, dev), sr_seed(seed, layer),
        q, k, qn, kn, kq, kk, v, g.contiguous(), beta.contiguous(), o, scale, Hk, Hv, V, K, records.ring,
        T=T, FLUSH=flush, FOLD_NEW=fold_new, SPLIT=not shared, RECOMPUTE=recompute, RESOLVE=resolve, NORM=qk_l2norm, FUSED=fused,
        UFMT=update.code, USR=update.sr, RFMT=read.code, RSR=read.sr,
        BR=br, BC=bc, BJ=bj, HW=v.is_cuda, FP4=fp4_decode, PDL=pdl,
        FOLD_STAGES=_fold_stages(small_grid, fold_stages), TOKEN_FIRST=_token_first(fused, flush, fold_new, small_grid), EARLY_TOKEN=EARLY_TOKEN_INPUTS, EARLY_QK=EARLY_QK_LOADS,
        QUARTER_SCORES=WINDOW_SCORES_IN_QUARTERS and small_grid,
        FOLD_PRODUCT=_fold_product(small_grid, flush, T, br, records.ring, bc, fold_stages),
        # a step that stores no state may fuse a*b+c into FMAs (its outputs and d records are compared
        # with a tolerance; the k, v, a, beta records are copies); a flush rounds state and must not
        num_warps=num_warps or nw, enable_fp_fusion=not flush,
        **({"maxnreg": max_registers} if max_registers else {}), **pdl_kwargs(pdl))
    return o
