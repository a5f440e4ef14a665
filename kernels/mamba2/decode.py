"""Mamba-2 decode-step kernels (docs/design.md §4, §7): conventional step, ReplaySSM step, speculative verify.

Per token (one head h of group g = h // (H/G); state S [P, N] of a pool slot):
    dt = softplus(dt_raw + dt_bias),  a = A·dt (log decay),  u = dt·x [P]
    conventional:  S ← e^a S + u Bᵀ;  y = S C + D x;  y *= silu(z);  store round_F(S)
ReplaySSM keeps the checkpoint and a ring buffer of records (u [P], B [N], a) per slot. With the
records of logical positions lo..p (ring position ``(start + j) & (RING-1)``) and a base state S_b
holding everything before lo, the output of the token at position p is the output-only form

    y_p = e^{Σ_{i=lo..p} a_i} (S_b C_p) + Σ_{j=lo..p} e^{Σ_{i=j+1..p} a_i} (B_j·C_p) u_j

* non-flush step / verify (``flush=False``): S_b = the READ copy, lo = 0; the T new tokens' records
  are written at positions W..W+T-1 and their outputs are the only other writes.
* flush (``flush=True``): the W buffered records are folded into the UPDATE checkpoint in fp32
  in closed form, S ← e^{c_W} S + Σ_j e^{c_W − c_j} u_j B_jᵀ (c: cumulative log decay; one matrix
  product, on tensor cores with the 3-pass TF32 split by default — see ``mamba2_replay_step``'s
  ``fold_precision``); with ``fold_new`` (autoregressive flush, T = 1) the
  new token is folded too, as record W of the same product, and y = S C comes from that fp32 result; otherwise (speculative flush) the
  T drafts are verified against S_b = the fp32 S with lo = W. Then round_H(S) is stored as the
  update checkpoint and round_F(S) as the read copy (split mode), both from the same fp32 S.
* at large batch the autoregressive flush of an fp32 update copy runs in ``mamba2_flush_kernel``,
  several (row block, head) tiles per program with each tile's inputs loaded during the previous
  tile's fold (``tiles_per_program``; same fold and stores, ``_fold_window`` / ``_store_flushed``);
  the speculative flush runs there when ``tiles_per_program`` asks for it (same drafts,
  ``_spec_flush_drafts``).
* commit is pointer arithmetic on (start, W), done by the caller (``precision_lab.engines.triton_decode.advance``):
  rejected records are overwritten.

Launch: one program per (row block of P, head, batch entry); a program streams its rows of the
head's state (contiguous) once. ``slots[b] = -1`` skips the entry (zero output, nothing stored).
Before it, a scores kernel per (group, batch entry) writes the new tokens' B records and the scores
B_j·C_t of the window, which every head of the group would otherwise recompute; a one-token step at
small batch runs as one launch instead (``fused_scores``): each program computes its scores itself
and one program per (group, batch entry) writes the B record (docs/design.md §7).
``decode_reference.py`` computes the same things in torch, in the same order.

What makes it fast (H200 measurements in ``reports/bench``): the autoregressive non-flush step
needs only S_b C, so it reads it straight from the stored codes (``read_state_dot``: FP8 by the
hardware E4M3 conversion, NVFP4 elements through fp16 bit patterns, or as one tensor-core product
with ``fp4_decode="mma"``; never an fp32 tile of the whole state); verifying T > 1
drafts computes all T outputs as one [T, rows] tile from three small matrix products instead of
T passes over the state; the flush's fold is one tensor-core product.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import C_FP32, C_NVFP4, FMT_BF16, FMT_E4M3, FMT_FP16
from precision_lab.kernels.common.launch import (
    as_i64,
    check_fp4_decode,
    fused_nonflush_warps,
    fused_scores_launch,
    overlap_scores_launch,
    pdl_kwargs,
    pow2,
    resolve_fp4_decode,
    state_product_precision,
    warps_for_tile,
)
from precision_lab.kernels.common.overlap import await_scores, release_dependents
from precision_lab.kernels.common.products import dot_f32
from precision_lab.kernels.common.state_io import column_quarters, program_slot, store_state4
from precision_lab.kernels.decode_state import (
    FMT_FP32,
    FMT_NVFP4,
    PackedState,
    load_state,
    read_state_dot,
    softplus,
    sr_seed,
    store_state,
)

__all__ = ["Mamba2Records", "mamba2_conventional_step", "mamba2_replay_step"]


class Mamba2Records:
    """Ring buffer of ReplaySSM records for a pool of ``slots`` sequences.

    u [S, RING, H, P] fp32 (dt·x), b [S, RING, G, N] fp32 (B of the group), a [S, RING, H] fp32 (A·dt).
    """

    def __init__(self, slots: int, ring: int, H: int, G: int, P: int, N: int, device="cpu"):
        if ring & (ring - 1):
            raise ValueError(f"ring size must be a power of two, got {ring}")
        if ring * H * P >= 2 ** 31:  # the kernels address a slot's records with int32 offsets
            raise ValueError(f"a slot's u records hold ring·H·P = {ring * H * P} elements; at most 2^31 - 1")
        self.ring = ring
        self.u = torch.zeros(slots, ring, H, P, dtype=torch.float32, device=device)
        self.b = torch.zeros(slots, ring, G, N, dtype=torch.float32, device=device)
        self.a = torch.zeros(slots, ring, H, dtype=torch.float32, device=device)

    def clone(self) -> Mamba2Records:
        r = Mamba2Records.__new__(Mamba2Records)
        r.ring, r.u, r.b, r.a = self.ring, self.u.clone(), self.b.clone(), self.a.clone()
        return r


@triton.jit
def _output_gates(i_h, bh, rows, m_r, D_ptr, z_ptr, R: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """A one-token step's output gates: the head's D and the rows' z (fp32; 0 where absent)."""
    d_h = tl.load(D_ptr + i_h).to(tl.float32) if HAS_D else 0.0
    b_z = tl.load(z_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32) if HAS_Z else 0.0
    return d_h, b_z


@triton.jit
def _store_gated(b_y, b_x, d_h, b_z, valid, bh, rows, y_ptr, R: tl.constexpr, HAS_D: tl.constexpr,
                 HAS_Z: tl.constexpr):
    """A one-token step's output rows: y (+ D x, · silu(z)) stored in y's dtype (zero for a NULL slot)."""
    if HAS_D:
        b_y += d_h * b_x
    if HAS_Z:
        b_y = b_y * (b_z / (1.0 + tl.exp(-b_z)))
    tl.store(y_ptr + bh * R + rows, tl.where(valid, b_y, 0.0).to(y_ptr.dtype.element_ty), mask=rows < R)


@triton.jit
def _store_output(b_y, b_x, valid, i_h, bh, rows, m_r, D_ptr, z_ptr, y_ptr, R: tl.constexpr, HAS_D: tl.constexpr,
                  HAS_Z: tl.constexpr):
    """``_store_gated`` with the gates loaded here."""
    d_h, b_z = _output_gates(i_h, bh, rows, m_r, D_ptr, z_ptr, R, HAS_D, HAS_Z)
    _store_gated(b_y, b_x, d_h, b_z, valid, bh, rows, y_ptr, R, HAS_D, HAS_Z)


@triton.jit
def mamba2_conventional_step_kernel(
    st_d, st_sc, st_gs, s_d, s_sc, s_gs,
    slot_ptr, seq_ptr, ev_ptr, seed,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dtb_ptr, z_ptr, y_ptr,
    H: tl.constexpr, G: tl.constexpr, R: tl.constexpr, C: tl.constexpr,
    FMT: tl.constexpr, SR: tl.constexpr,
    HAS_D: tl.constexpr, HAS_DTB: tl.constexpr, HAS_Z: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr,
):
    i_r, i_h, i_b, slot, rows, m_r = program_slot(slot_ptr, R, BR)
    i_g = i_h // (H // G)
    valid = slot >= 0
    cols = tl.arange(0, BC)
    m_c = cols < C
    slot = tl.maximum(slot, 0)
    bh = i_b.to(tl.int64) * H + i_h
    bg = i_b.to(tl.int64) * G + i_g

    dt = tl.load(dt_ptr + bh).to(tl.float32)
    if HAS_DTB:
        dt += tl.load(dtb_ptr + i_h).to(tl.float32)
    dt = softplus(dt)
    alpha = tl.exp(tl.load(A_ptr + i_h).to(tl.float32) * dt)
    b_x = tl.load(x_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
    b_B = tl.load(B_ptr + bg * C + cols, mask=m_c, other=0).to(tl.float32)
    b_C = tl.load(C_ptr + bg * C + cols, mask=m_c, other=0).to(tl.float32)

    b_s = load_state(st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C, FMT, BR, BC, HW)
    b_s = alpha * b_s + (dt * b_x)[:, None] * b_B[None, :]
    b_y = tl.sum(b_s * b_C[None, :], 1)
    _store_output(b_y, b_x, valid, i_h, bh, rows, m_r, D_ptr, z_ptr, y_ptr, R, HAS_D, HAS_Z)
    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    store_state(b_s, st_d, st_sc, st_gs, slot, s_d, s_sc, s_gs, i_h, rows, m_r, R, C,
                seed, seq, ev, False, FMT, SR, BR, BC, HW)


@triton.jit
def _b_window(rb, start, jj, m_hist, cols, m_c, G, C, RING):
    """The group's B records as a [BJ, BC] tile over logical window positions jj (ring position
    ``(start + j) & (RING-1)``), 0 outside ``m_hist``; ``rb``: the slot's record of group g at ring
    position 0 (``rb_ptr + slot·s_rb + g·C``)."""
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    return tl.load(rb + (pos * G)[:, None] * C + cols[None, :], mask=m_hist[:, None] & m_c[None, :], other=0)


@triton.jit
def _scores(t_b, b_c):
    """score_j = B_j·C_t for every row j of the window tile t_b [BJ, BC] (C_t: b_c [BC])."""
    return tl.sum(t_b * b_c[None, :], 1)


@triton.jit
def mamba2_replay_scores_kernel(
    rb_ptr, s_rb, slot_ptr, start_ptr, wlen_ptr, B_ptr, C_ptr, sc_ptr,
    G: tl.constexpr, C: tl.constexpr, RING: tl.constexpr,
    T: tl.constexpr, FLUSH: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr, PDL: tl.constexpr,
):
    """Per (group, batch entry): write the T new B records and the scores B_j·C_t of every window
    position j for every new token t into sc [B, G, T, BJ] — once per group instead of once per
    head and row block (the group's B records would otherwise be re-read by every program). The
    step kernel's one-launch form (FUSED) computes the same scores with the same helpers. An
    autoregressive flush needs none of this (it keeps no record and its output window is empty), so
    it never runs after this kernel. PDL: the step kernel after it overlaps it (``await_scores``)."""
    release_dependents(PDL)
    i_g, i_b = tl.program_id(0), tl.program_id(1)
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
    t_b = _b_window(rb_ptr + slot * s_rb + i_g * C, start, jj, m_hist, cols, m_c, G, C, RING)
    for t in tl.static_range(T):
        btg = (i_b.to(tl.int64) * T + t) * G + i_g
        n_b = tl.load(B_ptr + btg * C + cols, mask=m_c, other=0).to(tl.float32)
        t_b = tl.where((jj == W + t)[:, None], n_b[None, :], t_b)
        q = ((start + W + t) & (RING - 1)).to(tl.int64)
        tl.store(rb_ptr + slot * s_rb + (q * G + i_g) * C + cols, n_b, mask=m_cv)
    for t in tl.static_range(T):
        btg = (i_b.to(tl.int64) * T + t) * G + i_g
        b_c = tl.load(C_ptr + btg * C + cols, mask=m_c, other=0).to(tl.float32)
        tl.store(sc_ptr + btg * BJ + jj, _scores(t_b, b_c))


@triton.jit
def _fold_window(b_s, h_a, h_u, h_b, m_win, FOLD_PREC: tl.constexpr, HW: tl.constexpr, SPLIT: tl.constexpr,
                 UFMT: tl.constexpr, RFMT: tl.constexpr, TILED_FMT: tl.constexpr):
    """The closed-form fold of a window's records into the state tile b_s [BR, BC] of a flush that
    stores UFMT (and RFMT in SPLIT mode): S = e^{c_W} S + Σ_j e^{c_W - c_j} u_j B_jᵀ over the
    positions ``m_win`` (h_a [BJ] log decays, h_u [BJ, BR], h_b [BJ, BC]; c: cumulative log decay).
    One matrix product (FOLD_PREC "ieee" = fp32 FMAs, "tf32x3" = tensor cores with the 3-pass split,
    fp32-level accuracy), its TF32 split done by hand on the GPU (common/products.py: the same bits in
    fewer instructions) except where only fp32 is stored, whose 128-register launch measured slower
    with it. W rank-1 FMA updates of the tile, record loads software-pipelined, measured 1.5× slower
    on the H200 (1543 µs against 1027; bench README).
    Written e^{c_W}·S + product, the compiler accumulates the product onto the decayed state tile
    inside the tensor-core product (the tile goes to the product's layout and back); a flush with an
    SR update copy that stores NVFP4 instead adds the finished product with one FMA (FOLD_FMA), the
    tile staying in its load layout. H200, batch 256, both forms in one device call each
    (reports/diagnostics/mamba2-fold-fma.jsonl): FOLD_FMA won there (fp16-SR/NVFP4 1555-1567 µs against 1588-1608,
    FP8-SR/NVFP4 1840-1852 against 1854-1862, the speculative fp16-SR/NVFP4 flush (T = 8) 2203-2218
    against 2234-2240, NVFP4-SR shared the same, 1346-1357 / 1348-1358) and lost elsewhere
    (fp32/NVFP4 1483-1488 against 1468-1477, fp32 862 against 793, fp32/FP8 1073-1076 against
    1040-1047, speculative fp32 T = 8 1660-1665 against 1539-1547). Those losses were one tile per
    program; in the multi-tile kernel (``mamba2_flush_kernel``, 8 tiles at 168 registers) FOLD_FMA
    wins for every format it runs: fp32 615 µs against 633-634, fp32/E4M3 737-747 against
    792-793, fp32/BF16 761 against 819-820, split fp32/fp32 889 against 891 (reports/diagnostics/
    mamba2-flush-tiles.jsonl, run 5). So an autoregressive flush of those formats (TILED_FMT, set by
    the wrapper from FLUSH_TILED_FORMATS) takes it in both kernels: one tile per program and several
    stay equal bit for bit."""
    FOLD_BY_HAND: tl.constexpr = HW and (UFMT != C_FP32 or (SPLIT and RFMT != C_FP32))
    FOLD_FMA: tl.constexpr = TILED_FMT or (UFMT != C_FP32 and (UFMT == C_NVFP4 or (SPLIT and RFMT == C_NVFP4)))
    tot = tl.sum(h_a, 0)
    w = tl.where(m_win, tl.exp(tot - tl.cumsum(h_a, 0)), 0.0)
    fold = dot_f32(tl.trans(w[:, None] * h_u), h_b, FOLD_PREC, FOLD_BY_HAND)
    if FOLD_FMA:
        return tl.fma(b_s, tl.exp(tot), fold)
    else:
        return tl.exp(tot) * b_s + fold


@triton.jit
def _store_flushed(b_s, u_d, u_sc, u_gs, su_d, su_sc, su_gs, r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,
                   slot, i_h, rows, m_r, R, C, seed, seq, ev, SPLIT: tl.constexpr,
                   UFMT: tl.constexpr, USR: tl.constexpr, RFMT: tl.constexpr, RSR: tl.constexpr,
                   BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr):
    """A flush's stores of the folded fp32 tile: round_H(S) → update checkpoint, and in split mode
    round_F(S) → read copy, both from the same S.
    A stored format is rounded column quarter by column quarter where the quarters are whole SR
    groups (and NVFP4 blocks): one quarter's SR values and rounding temporaries live at a time
    instead of the whole tile's (store_state4; same codes). Rounding the [64, 128] tile at once held
    255 registers at 4 warps with an fp16-SR checkpoint and an NVFP4 read copy (sm_90 compile,
    scripts/kernel_resources.py --ops flush)."""
    QW: tl.constexpr = BC // 4
    Q_OK: tl.constexpr = (QW // 8) * 8 == QW
    Q_UPD: tl.constexpr = UFMT != C_FP32 and Q_OK and (UFMT != C_NVFP4 or (QW // 16) * 16 == QW)
    Q_READ: tl.constexpr = SPLIT and RFMT != C_FP32 and Q_OK and (RFMT != C_NVFP4 or (QW // 16) * 16 == QW)
    if Q_UPD or Q_READ:
        x0, x1, x2, x3 = column_quarters(b_s, BR, BC)
    if Q_UPD:
        store_state4(x0, x1, x2, x3, u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C,
                     seed, seq, ev, False, UFMT, USR, BR, QW, HW)
    else:
        store_state(b_s, u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C,
                    seed, seq, ev, False, UFMT, USR, BR, BC, HW)
    if Q_READ:
        store_state4(x0, x1, x2, x3, r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                     seed, seq, ev, True, RFMT, RSR, BR, QW, HW)
    elif SPLIT:
        store_state(b_s, r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C,
                    seed, seq, ev, True, RFMT, RSR, BR, BC, HW)


@triton.jit
def _spec_flush_drafts(b_s, valid, i_b, i_h, i_g, i_r, slot, start, W, rows, m_r, cols, m_c, tt, m_t, A,
                       dt_ptr, dtb_ptr, x_ptr, C_ptr, D_ptr, z_ptr, y_ptr, ru_ptr, ra_ptr, s_ru, s_ra, sc_ptr,
                       H: tl.constexpr, G: tl.constexpr, R: tl.constexpr, C: tl.constexpr, RING: tl.constexpr,
                       T: tl.constexpr, BJ: tl.constexpr, HAS_D: tl.constexpr, HAS_DTB: tl.constexpr,
                       HAS_Z: tl.constexpr, STATE_PREC: tl.constexpr, VERIFY_PREC: tl.constexpr, HW: tl.constexpr):
    """The T drafts of a speculative flush, for the state rows ``rows`` of head i_h (row block i_r) after
    the fold (b_s [BR, BC]: the folded fp32 S): their records u and a stored at positions W..W+T-1 and
    their outputs stored, all T as one [TP, BR] tile from two small matrix products instead of T passes
    over the state tile:
        Y = e^{c_p} ⊙ (C_T Sᵀ) + Wn N_u  (+ D x, · silu(z)),
    c the cumulative log decay over the drafts (the history is in the folded S), N_u [TP, BR] the
    drafts' u rows, Wn = decay · score (score_tj = B_j·C_t from the scores kernel; causal: a draft
    sees only the drafts before it and itself).
    Drafts by rows (the drafts along axis 0): a flush's 32-row tile is below the 64 rows a warp-group
    MMA needs as its M dimension, and the verify block's transposed orientation compiled there to 255
    registers and 352 bytes of spill stack (sm_90) against 219 and none for this one. Its inputs
    loaded before the fold instead, so that they are in flight with the state's, ran slower: 1614-1621
    µs against 1294-1299 at 168 registers (H200, batch 256, T = 8, W = 16; reports/diagnostics/
    spec-flush-forms.jsonl). Both flush kernels run it (one tile per program, and several)."""
    bt = i_b.to(tl.int64) * T + tt                                   # [TP]
    m_tr = m_t[:, None] & m_r[None, :]
    dtv = tl.load(dt_ptr + bt * H + i_h, mask=m_t, other=0).to(tl.float32)
    if HAS_DTB:
        dtv += tl.load(dtb_ptr + i_h).to(tl.float32)
    dtv = softplus(dtv)
    x_t = tl.load(x_ptr + (bt * H + i_h)[:, None] * R + rows[None, :], mask=m_tr, other=0).to(tl.float32)
    n_u = tl.where(m_tr, dtv[:, None] * x_t, 0.0)
    n_a = tl.where(m_t, A * dtv, 0.0)
    q = ((start + W + tt) & (RING - 1)).to(tl.int64)
    tl.store(ru_ptr + slot * s_ru + (q * H + i_h)[:, None] * R + rows[None, :], n_u, mask=m_tr)
    tl.store(ra_ptr + slot * s_ra + q * H + i_h, n_a, mask=m_t & ((tt * 0 + i_r) == 0))
    c_new = tl.cumsum(n_a, 0)                                         # [TP] c at p_t = W + t
    causal = m_t[:, None] & m_t[None, :] & (tt[None, :] <= tt[:, None])
    w_new = tl.load(sc_ptr + (bt * G + i_g)[:, None] * BJ + (W + tt)[None, :], mask=causal, other=0)
    w_new = tl.where(causal, w_new * tl.exp(c_new[:, None] - c_new[None, :]), 0.0)
    c_t = tl.load(C_ptr + (bt * G + i_g)[:, None] * C + cols[None, :], mask=m_t[:, None] & m_c[None, :],
                  other=0).to(tl.float32)
    if HAS_Z:  # (requested before the products, as in every timed form)
        b_z = tl.load(z_ptr + (bt * H + i_h)[:, None] * R + rows[None, :], mask=m_tr, other=0).to(tl.float32)
    b_y = tl.exp(c_new)[:, None] * dot_f32(c_t, tl.trans(b_s), STATE_PREC, HW) + dot_f32(w_new, n_u, VERIFY_PREC, HW)
    if HAS_D:
        b_y += tl.load(D_ptr + i_h).to(tl.float32) * x_t
    if HAS_Z:
        b_y = b_y * (b_z / (1.0 + tl.exp(-b_z)))
    tl.store(y_ptr + (bt * H + i_h)[:, None] * R + rows[None, :],
             tl.where(valid, b_y, 0.0).to(y_ptr.dtype.element_ty), mask=(tt < T)[:, None] & (rows < R)[None, :])


@triton.jit
def mamba2_replay_step_kernel(
    u_d, u_sc, u_gs, su_d, su_sc, su_gs,          # update checkpoint
    r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,          # read copy
    ru_ptr, rb_ptr, ra_ptr, s_ru, s_rb, s_ra,     # records u, B, a (slot strides)
    slot_ptr, start_ptr, wlen_ptr, seq_ptr, ev_ptr, seed,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dtb_ptr, z_ptr, y_ptr, sc_ptr,
    H: tl.constexpr, G: tl.constexpr, R: tl.constexpr, C: tl.constexpr, RING: tl.constexpr,
    T: tl.constexpr, FLUSH: tl.constexpr, FOLD_NEW: tl.constexpr, SPLIT: tl.constexpr,
    UFMT: tl.constexpr, USR: tl.constexpr, RFMT: tl.constexpr, RSR: tl.constexpr,
    HAS_D: tl.constexpr, HAS_DTB: tl.constexpr, HAS_Z: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr, BW: tl.constexpr, TP: tl.constexpr, HW: tl.constexpr,
    FP4: tl.constexpr, FOLD_PREC: tl.constexpr, VERIFY_PREC: tl.constexpr, STATE_PREC: tl.constexpr,
    FUSED: tl.constexpr, PDL: tl.constexpr, TILED_FMT: tl.constexpr, EARLY_GATES: tl.constexpr,
    EARLY_DT: tl.constexpr,
):
    # FUSED: the one-launch form of a one-token step (no scores kernel before it): the program
    # computes the scores it needs itself, and one program per (group, batch entry) writes the new
    # token's B record (see the T = 1 block below)
    tl.static_assert((not FUSED) or (T == 1 and (FOLD_NEW or not FLUSH)))
    i_r, i_h, i_b, slot, rows, m_r = program_slot(slot_ptr, R, BR)
    i_g = i_h // (H // G)
    valid = slot >= 0
    start = tl.load(start_ptr + i_b)
    W = tl.load(wlen_ptr + i_b)
    cols = tl.arange(0, BC)
    # window positions held as tiles: BW of them (BJ, the scores' row width, for a one-token step;
    # a speculative step's history alone may take fewer: the wrappers' window_bound)
    jj = tl.arange(0, BW)
    # (block & scalar masks trip the interpreter: broadcast the slot test explicitly)
    m_c = cols < C
    slot_ok = (jj * 0 + slot) >= 0
    tt = tl.arange(0, TP)  # draft index (T > 1)
    m_t = (tt < T) & ((tt * 0 + slot) >= 0)
    # the writer of the group's new B record in the one-launch form: its first head, row block 0
    m_own = m_c & ((cols * 0 + slot) >= 0) & ((cols * 0 + i_r) == 0) & ((cols * 0 + i_h % (H // G)) == 0)
    slot = tl.maximum(slot, 0)
    # The output-only step from an NVFP4 read copy takes S_b C first and stores the new token's
    # records last, so that the state codes are requested before anything waits: a GPU thread issues
    # in program order, and a store waits for its value (n_u, from the dt and x loads), a layout change
    # through shared memory for a barrier. H200, W = 7, both orders in one run (reports/diagnostics/
    # nonflush-order.jsonl, run 3): batch 256 81.3-81.8 µs against 87.4-87.7 (sm_90: 127 registers
    # against 164), batch 1 5.1 against 5.3, batch 16 14.9-15.0 against 14.7. Other read copies keep
    # this kernel's order: with the state product first, fp32 reads ran slower (batch 1 5.5-5.6 µs
    # against 4.9, batch 16 28.8-29.0 against 24.5) and FP8 reads at batch 256 91.4-91.5 against 89.3.
    NVFP4_STATE_FIRST: tl.constexpr = T == 1 and (not FLUSH) and RFMT == C_NVFP4
    if NVFP4_STATE_FIRST:
        c_ptr = C_ptr + (i_b.to(tl.int64) * G + i_g) * C
        s_c, _ = read_state_dot(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, c_ptr, c_ptr,
                                RFMT, BR, BC, HW, False, FP4)
    # The window's history: logical positions jj < W (ring position (start + j) & (RING-1)), over which
    # its records are loaded as register tiles; the flush folds them, the non-flush step's outputs read them.
    m_win = (jj < W) & slot_ok
    # The one-launch output-only step from an fp32 read copy (small batches) requests its state tile
    # here and reduces it with C only at the output, so that the tile is in flight while the window's
    # records and scores are loaded and computed. (Reducing it here too, as above, made fp32 reads
    # slower: the reduction waits for the tile before any later load is issued.) H200, W = 7, both in
    # one run (reports/diagnostics/nonflush-order.jsonl, run 10): batch 1 4.51-4.79 µs against
    # 4.90-5.34, batch 4 8.27-8.63 against 8.50-8.91, batch 16 24.76-24.80 against 24.48-24.63.
    # Its loads of the window start and length land in two rounds (the sm_90 scheduler issues W's
    # after the first wait for the slot: rounds=3/21/11 at batch 1). Requested as one gathered load
    # with the slot, every record load moved a round earlier (rounds=2/24/5/2), and the step ran
    # slower: batch 1, W = 7, 5.02-5.43 µs against 5.02-5.08, W = 15 5.43-5.51 against 5.12-5.16
    # (H100, reports/diagnostics/batch1-fewer-rounds-8f94169.jsonl).
    FP32_LOADS_FIRST: tl.constexpr = T == 1 and (not FLUSH) and FUSED and RFMT == C_FP32
    # EARLY_DT (the wrapper's EARLY_TOKEN_DT): the token's dt (and dt_bias) and x requested before the
    # state tile, ahead of C's layout change, the first thing that waits (see the rule). The loads are
    # written out here and below rather than through one helper: moving the later ones into a helper
    # changed the machine code of every Mamba-2 replay launch, batch 256's included (SASS digests,
    # scripts/kernel_resources.py), which would need their timings again.
    if FP32_LOADS_FIRST and EARLY_DT:
        e_dt = tl.load(dt_ptr + i_b.to(tl.int64) * H + i_h).to(tl.float32)
        if HAS_DTB:
            e_dt += tl.load(dtb_ptr + i_h).to(tl.float32)
        e_x = tl.load(x_ptr + (i_b.to(tl.int64) * H + i_h) * R + rows, mask=m_r, other=0).to(tl.float32)
    if FP32_LOADS_FIRST:  # (the window's B records and C as well: the scores below need them)
        b_sr = load_state(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, RFMT, BR, BC, HW)
        b_c = tl.load(C_ptr + (i_b.to(tl.int64) * G + i_g) * C + cols, mask=m_c, other=0).to(tl.float32)
        t_b = _b_window(rb_ptr + slot * s_rb + i_g * C, start, jj, m_win, cols, m_c, G, C, RING)

    A = tl.load(A_ptr + i_h).to(tl.float32)
    # Offsets inside the slot's records are int32 (Mamba2Records checks that a slot's u records hold
    # fewer than 2^31 elements): the int64 form spends ~50 more instructions per program on 64-bit
    # products. H200, batch 256, before the shape constants: NVFP4 output-only step 91.9-92.4 µs with
    # int32 record and state-word offsets against 98.9 with neither (reports/diagnostics/
    # shape-constants.jsonl; int32 state-word offsets, tried again with the shape constants, gained
    # nothing and are not kept)
    pos = ((start + jj) & (RING - 1))
    h_a = tl.load((ra_ptr + slot * s_ra) + (pos * H + i_h), mask=m_win, other=0)
    h_u = tl.load((ru_ptr + slot * s_ru) + ((pos * H + i_h)[:, None] * R + rows[None, :]),
                  mask=m_win[:, None] & m_r[None, :], other=0)
    pos = pos.to(tl.int64)
    if T == 1:
        # the new token's record (T > 1: the verify block below); t_a/t_u: the output window, the
        # history (none after a flush) with the new token at position W
        bh = i_b.to(tl.int64) * H + i_h
        if FP32_LOADS_FIRST and EARLY_DT:
            dt = softplus(e_dt)
            t_x = e_x
        else:
            dt = tl.load(dt_ptr + bh).to(tl.float32)
            if HAS_DTB:
                dt += tl.load(dtb_ptr + i_h).to(tl.float32)
            dt = softplus(dt)
            t_x = tl.load(x_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
        n_u = dt * t_x
        n_a = A * dt
        if EARLY_GATES:
            g_d, g_z = _output_gates(i_h, bh, rows, m_r, D_ptr, z_ptr, R, HAS_D, HAS_Z)
        at = jj == W
        if FLUSH:
            t_a = tl.where(at, n_a, 0.0)
            t_u = tl.where(at[:, None], n_u[None, :], 0.0)
        else:
            t_a = tl.where(at, n_a, h_a)
            t_u = tl.where(at[:, None], n_u[None, :], h_u)
        if NVFP4_STATE_FIRST:  # the records are stored last (the end of the kernel)
            if FUSED:  # the new token's B, for its score
                n_b = tl.load(B_ptr + (i_b.to(tl.int64) * G + i_g) * C + cols, mask=m_c, other=0).to(tl.float32)
        elif not FOLD_NEW:  # an autoregressive flush folds its own token: no record is kept
            q = ((start + W) & (RING - 1)).to(tl.int64)
            tl.store(ru_ptr + slot * s_ru + (q * H + i_h) * R + rows, n_u, mask=m_r)
            tl.store(ra_ptr + slot * s_ra + q * H + i_h, n_a, mask=valid & (i_r == 0))
            if FUSED:
                # One launch: the group's new B record is written here, by one program per (group,
                # batch entry), at logical position W. No program of this launch reads it, so
                # programs running concurrently on a GPU cannot race on it: every program reads the
                # group's B records only at positions jj < W (the score tile below; a non-flush step
                # has no fold) and takes the new token's B from the inputs, and position W is a
                # different ring slot from all of them — (start + j) & (RING-1) is one-to-one on
                # 0 <= j < RING and W < L <= RING. (The interpreter runs programs one after another
                # and would hide a race; this argument is what rules it out on the GPU.)
                n_b = tl.load(B_ptr + (i_b.to(tl.int64) * G + i_g) * C + cols, mask=m_c, other=0).to(tl.float32)
                tl.store(rb_ptr + slot * s_rb + (q * G + i_g) * C + cols, n_b, mask=m_own)

    if FLUSH:
        b_s = load_state(u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C, UFMT, BR, BC, HW)
        h_b = tl.load(rb_ptr + slot * s_rb + (pos * G + i_g)[:, None] * C + cols[None, :],
                      mask=m_win[:, None] & m_c[None, :], other=0)
        if FOLD_NEW:
            # The autoregressive flush folds its own token as the window's record W (weight e^0 = 1;
            # W < L <= RING = BJ, so the position is free): one product for W + 1 records instead of
            # the product and then a conventional update of the whole tile (three operations per
            # element, a second pass over the tile). sm_90 compile of the fp32 flush: ~130 of its
            # ~1280 PTX instructions were that update.
            n_b = tl.load(B_ptr + (i_b.to(tl.int64) * G + i_g) * C + cols, mask=m_c, other=0).to(tl.float32)
            h_a = tl.where(at, n_a, h_a)
            h_u = tl.where(at[:, None], n_u[None, :], h_u)
            h_b = tl.where(at[:, None], n_b[None, :], h_b)
            m_win = m_win | (at & slot_ok)
        b_s = _fold_window(b_s, h_a, h_u, h_b, m_win, FOLD_PREC, HW, SPLIT, UFMT, RFMT, TILED_FMT)
        if T == 1:  # the output's S C, taken before the stores so that b_s is not needed after them
            b_c = tl.load(C_ptr + (i_b.to(tl.int64) * G + i_g) * C + cols, mask=m_c, other=0).to(tl.float32)
            s_c = tl.sum(b_s * b_c[None, :], 1)
        seq = tl.load(seq_ptr + i_b)
        ev = tl.load(ev_ptr + i_b)
        _store_flushed(b_s, u_d, u_sc, u_gs, su_d, su_sc, su_gs, r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,
                       slot, i_h, rows, m_r, R, C, seed, seq, ev, SPLIT, UFMT, USR, RFMT, RSR, BR, BC, HW)
        if FOLD_NEW:
            lo = W + 1
        else:
            lo = W
    elif T > 1:
        b_s = load_state(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, RFMT, BR, BC, HW)
    else:  # autoregressive non-flush: S_b C is all it needs, read straight from the codes
        if not (NVFP4_STATE_FIRST or FP32_LOADS_FIRST):
            c_ptr = C_ptr + (i_b.to(tl.int64) * G + i_g) * C
            s_c, _ = read_state_dot(r_d, r_sc, r_gs, slot, sr_d, sr_sc, sr_gs, i_h, rows, m_r, R, C, c_ptr,
                                    c_ptr, RFMT, BR, BC, HW, False, FP4)
        lo = W * 0

    if T > 1 and not FLUSH:
        # Speculative verify: the T outputs as one [BR, TP] tile from three small matrix products
        # instead of T passes over the state tile:
        #   Yᵀ = (S_b C_Tᵀ) ⊙ e^{c_p} + N_uᵀ Wnᵀ + U_histᵀ Whᵀ,
        # c: cumulative log decay over the output window (from 0), N_u [TP, BR] the drafts' u rows,
        # U_hist [BJ, BR] the history's, Wn/Wh = decay · score (score_tj = B_j·C_t from the
        # pre-kernel; Wn is causal: a draft sees only the drafts before it and itself).
        # Held transposed (state rows along axis 0, drafts along axis 1) so that the state's rows are
        # every product's M dimension: [BR, BC]×[BC, TP] compiles for sm_90 to warp-group MMAs with
        # the state tile as the register operand, where [TP, BC]×[BC, BR] (M = TP = 16) had each warp
        # hold the whole [TP, BC] C tile, hi and lo parts of the 3-pass split (255 registers and
        # 24 bytes of spill stack at 64 rows × 4 warps).
        bt = i_b.to(tl.int64) * T + tt                                   # [TP]
        m_rt = m_r[:, None] & m_t[None, :]
        dtv = tl.load(dt_ptr + bt * H + i_h, mask=m_t, other=0).to(tl.float32)
        if HAS_DTB:
            dtv += tl.load(dtb_ptr + i_h).to(tl.float32)
        dtv = softplus(dtv)
        x_t = tl.load(x_ptr + (bt * H + i_h)[None, :] * R + rows[:, None], mask=m_rt, other=0).to(tl.float32)
        n_u = tl.where(m_rt, dtv[None, :] * x_t, 0.0)                     # N_uᵀ [BR, TP]
        n_a = tl.where(m_t, A * dtv, 0.0)
        q = ((start + W + tt) & (RING - 1)).to(tl.int64)
        tl.store(ru_ptr + slot * s_ru + (q * H + i_h)[None, :] * R + rows[:, None], n_u, mask=m_rt)
        tl.store(ra_ptr + slot * s_ra + q * H + i_h, n_a, mask=m_t & ((tt * 0 + i_r) == 0))
        c_tt = tl.load(C_ptr + (bt * G + i_g)[None, :] * C + cols[:, None], mask=m_c[:, None] & m_t[None, :],
                       other=0).to(tl.float32)                           # C_Tᵀ [BC, TP]
        s_ct = dot_f32(b_s, c_tt, STATE_PREC, HW)                         # S_b C_Tᵀ [BR, TP]
        c_new = tl.sum(h_a, 0) + tl.cumsum(n_a, 0)                         # [TP] c at p_t = W + t
        sc_base = sc_ptr + (bt * G + i_g) * BJ                            # [TP] score rows
        causal = m_t[:, None] & m_t[None, :] & (tt[:, None] <= tt[None, :])   # [source j, target t]
        w_new = tl.load(sc_base[None, :] + (W + tt)[:, None], mask=causal, other=0)
        w_new = tl.where(causal, w_new * tl.exp(c_new[None, :] - c_new[:, None]), 0.0)
        m_h = m_win[:, None] & m_t[None, :]
        w_hist = tl.load(sc_base[None, :] + jj[:, None], mask=m_h, other=0)
        w_hist = tl.where(m_h, w_hist * tl.exp(c_new[None, :] - tl.cumsum(h_a, 0)[:, None]), 0.0)
        b_y = tl.exp(c_new)[None, :] * s_ct + dot_f32(n_u, w_new, VERIFY_PREC, HW) + \
            dot_f32(tl.trans(h_u), w_hist, VERIFY_PREC, HW)
        if HAS_D:
            b_y += tl.load(D_ptr + i_h).to(tl.float32) * x_t
        if HAS_Z:
            b_z = tl.load(z_ptr + (bt * H + i_h)[None, :] * R + rows[:, None], mask=m_rt, other=0).to(tl.float32)
            b_y = b_y * (b_z / (1.0 + tl.exp(-b_z)))
        tl.store(y_ptr + (bt * H + i_h)[None, :] * R + rows[:, None],
                 tl.where(valid, b_y, 0.0).to(y_ptr.dtype.element_ty), mask=(rows < R)[:, None] & (tt < T)[None, :])

    if T > 1 and FLUSH:  # the drafts, from the folded S (``_spec_flush_drafts``)
        _spec_flush_drafts(b_s, valid, i_b, i_h, i_g, i_r, slot, start, W, rows, m_r, cols, m_c, tt, m_t, A,
                           dt_ptr, dtb_ptr, x_ptr, C_ptr, D_ptr, z_ptr, y_ptr, ru_ptr, ra_ptr, s_ru, s_ra, sc_ptr,
                           H, G, R, C, RING, T, BJ, HAS_D, HAS_DTB, HAS_Z, STATE_PREC, VERIFY_PREC, HW)

    if T == 1:  # the output-only form over positions lo..W
        bg = i_b.to(tl.int64) * G + i_g
        if FOLD_NEW:
            b_y = s_c  # the window lo..W is empty: y = S C of the folded S
        else:
            m_w = (jj >= lo) & (jj <= W)
            w_a = tl.where(m_w, t_a, 0.0)
            tot = tl.sum(w_a, 0)
            decay = tl.where(m_w, tl.exp(tot - tl.cumsum(w_a, 0)), 0.0)
            if not FUSED:
                # PDL: the scores kernel may still be running; S_b C and the records are in flight already
                await_scores(PDL)
                score = tl.load(sc_ptr + bg * BJ + jj)
            else:
                # the scores kernel's scores, computed here (same helpers, same order): the window's B
                # records (jj < W) with the new token's B at position W, dotted with C_t
                if not FP32_LOADS_FIRST:
                    b_c = tl.load(C_ptr + bg * C + cols, mask=m_c, other=0).to(tl.float32)
                    t_b = _b_window(rb_ptr + slot * s_rb + i_g * C, start, jj, m_win, cols, m_c, G, C, RING)
                score = _scores(tl.where((jj == W)[:, None], n_b[None, :], t_b), b_c)
                if FP32_LOADS_FIRST:
                    s_c = tl.sum(b_sr * b_c[None, :], 1)
            b_y = tl.exp(tot) * s_c + tl.sum((decay * score)[:, None] * t_u, 0)
        if EARLY_GATES:
            _store_gated(b_y, t_x, g_d, g_z, valid, bh, rows, y_ptr, R, HAS_D, HAS_Z)
        else:
            b_x = tl.load(x_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
            _store_output(b_y, b_x, valid, i_h, bh, rows, m_r, D_ptr, z_ptr, y_ptr, R, HAS_D, HAS_Z)
        if NVFP4_STATE_FIRST:  # the new token's records, last (same stores as the T = 1 block above)
            q = ((start + W) & (RING - 1)).to(tl.int64)
            tl.store(ru_ptr + slot * s_ru + (q * H + i_h) * R + rows, n_u, mask=m_r)
            tl.store(ra_ptr + slot * s_ra + q * H + i_h, n_a, mask=valid & (i_r == 0))
            if FUSED:
                tl.store(rb_ptr + slot * s_rb + (q * G + i_g) * C + cols, n_b, mask=m_own)


@triton.jit
def _flush_tile_inputs(u_d, u_sc, u_gs, su_d, su_sc, su_gs, ru_ptr, ra_ptr, s_ru, s_ra, x_ptr, dt_ptr, A_ptr,
                       dtb_ptr, slot, start, W, i_b, t, live,
                       H: tl.constexpr, R: tl.constexpr, C: tl.constexpr, RING: tl.constexpr, UFMT: tl.constexpr,
                       HAS_DTB: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr,
                       HW: tl.constexpr, NEW: tl.constexpr):
    """What tile t of a multi-tile flush program reads for its own head and rows (tile t: rows
    block t % (R/BR) of head t // (R/BR)): the update checkpoint's rows as fp32 [BR, BC], the
    head's window records a [BJ] and u [BJ, BR], the head's A and, for the autoregressive flush
    (``NEW``), its new token's raw dt and x [BR] (0 otherwise: the speculative flush's drafts are
    loaded by ``_spec_flush_drafts``). ``live`` False (a prefetch past the program's last tile)
    loads nothing."""
    NRB: tl.constexpr = (R + BR - 1) // BR
    i_h = t // NRB
    rows = (t % NRB) * BR + tl.arange(0, BR)
    jj = tl.arange(0, BJ)
    m_r = (rows < R) & ((rows * 0 + slot) >= 0) & live
    m_win = (jj < W) & ((jj * 0 + slot) >= 0) & live
    slot = tl.maximum(slot, 0)
    b_s = load_state(u_d, u_sc, u_gs, slot, su_d, su_sc, su_gs, i_h, rows, m_r, R, C, UFMT, BR, BC, HW)
    pos = (start + jj) & (RING - 1)
    h_a = tl.load((ra_ptr + slot * s_ra) + (pos * H + i_h), mask=m_win, other=0)
    h_u = tl.load((ru_ptr + slot * s_ru) + ((pos * H + i_h)[:, None] * R + rows[None, :]),
                  mask=m_win[:, None] & m_r[None, :], other=0)
    if NEW:
        bh = i_b.to(tl.int64) * H + i_h
        dt = tl.load(dt_ptr + bh, mask=live, other=0).to(tl.float32)
        if HAS_DTB:
            dt += tl.load(dtb_ptr + i_h, mask=live, other=0).to(tl.float32)
        x = tl.load(x_ptr + bh * R + rows, mask=m_r, other=0).to(tl.float32)
    A = tl.load(A_ptr + i_h, mask=live, other=0).to(tl.float32)
    if not NEW:
        dt = A * 0
        x = A * 0
    return b_s, h_a, h_u, dt, x, A


@triton.jit
def mamba2_flush_kernel(
    u_d, u_sc, u_gs, su_d, su_sc, su_gs,          # update checkpoint
    r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,          # read copy
    ru_ptr, rb_ptr, ra_ptr, s_ru, s_rb, s_ra,     # records u, B, a (slot strides)
    slot_ptr, start_ptr, wlen_ptr, seq_ptr, ev_ptr, seed,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dtb_ptr, z_ptr, y_ptr, sc_ptr,
    H: tl.constexpr, G: tl.constexpr, R: tl.constexpr, C: tl.constexpr, RING: tl.constexpr, T: tl.constexpr,
    SPLIT: tl.constexpr, UFMT: tl.constexpr, USR: tl.constexpr, RFMT: tl.constexpr, RSR: tl.constexpr,
    HAS_D: tl.constexpr, HAS_DTB: tl.constexpr, HAS_Z: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, BJ: tl.constexpr, BW: tl.constexpr, TP: tl.constexpr, HW: tl.constexpr,
    FOLD_PREC: tl.constexpr, VERIFY_PREC: tl.constexpr, STATE_PREC: tl.constexpr,
    TILES: tl.constexpr, TILED_FMT: tl.constexpr,
):
    """A flush, several (row block, head) tiles per program; the same fold and stores as the replay
    kernel's one tile (``_fold_window``, ``_store_flushed``).
    * T = 1, the autoregressive flush: the window's W records and the new token folded into the update
      checkpoint (the new token is record W, weight e^0 = 1), y = S C + D x from that fp32 S. No record
      is kept and no scores are needed.
    * T > 1, the speculative flush: the W records folded, then the T drafts verified against the folded
      S (``_spec_flush_drafts``: their records and outputs), with the scores kernel's scores ``sc_ptr``.

    A program owns TILES consecutive (row block, head) tiles of one batch entry and one group
    (grid: (R/BR · H / TILES, batch)): the slot, the window pointers, the group's window of B records
    (and, T = 1, the new token's B and C) are read once, and each tile's own window inputs (checkpoint
    rows, u and a records; T = 1: x, dt) are loaded one tile ahead — issued before the current tile's
    fold product, so that their memory latency overlaps it instead of stalling the program
    (``_flush_tile_inputs``). The wrapper launches it with two or more tiles per program: one tile per
    program runs in the replay step kernel, whose straight-line form measured faster than this loop at
    one tile (FLUSH_TILES)."""
    NRB: tl.constexpr = (R + BR - 1) // BR
    tl.static_assert((NRB * (H // G)) % TILES == 0, "a program's tiles must lie in one group")
    FOLD_NEW: tl.constexpr = T == 1
    t0 = tl.program_id(0) * TILES
    i_b = tl.program_id(1)
    i_g = (t0 // NRB) // (H // G)
    slot = tl.load(slot_ptr + i_b).to(tl.int64)
    start = tl.load(start_ptr + i_b)
    W = tl.load(wlen_ptr + i_b)
    valid = slot >= 0
    cols = tl.arange(0, BC)
    jj = tl.arange(0, BW)  # the window's positions held as tiles (as in the replay kernel)
    m_c = cols < C
    slot_ok = (jj * 0 + slot) >= 0
    at = jj == W
    m_win = (jj < W) & slot_ok
    bg = i_b.to(tl.int64) * G + i_g
    # the group's window of B records (T = 1: with the new token's B as record W; W < L <= RING = BJ,
    # so the position is free)
    pos = ((start + jj) & (RING - 1)).to(tl.int64)
    h_b = tl.load(rb_ptr + tl.maximum(slot, 0) * s_rb + (pos * G + i_g)[:, None] * C + cols[None, :],
                  mask=m_win[:, None] & m_c[None, :], other=0)
    if FOLD_NEW:
        m_win = m_win | (at & slot_ok)
        n_b = tl.load(B_ptr + bg * C + cols, mask=m_c, other=0).to(tl.float32)
        h_b = tl.where(at[:, None], n_b[None, :], h_b)
        b_c = tl.load(C_ptr + bg * C + cols, mask=m_c, other=0).to(tl.float32)
    else:
        tt = tl.arange(0, TP)  # draft index
        m_t = (tt < T) & ((tt * 0 + slot) >= 0)
    seq = tl.load(seq_ptr + i_b)
    ev = tl.load(ev_ptr + i_b)
    nxt = _flush_tile_inputs(u_d, u_sc, u_gs, su_d, su_sc, su_gs, ru_ptr, ra_ptr, s_ru, s_ra, x_ptr, dt_ptr, A_ptr,
                             dtb_ptr, slot, start, W, i_b, t0, True, H, R, C, RING, UFMT, HAS_DTB, BR, BC, BW, HW,
                             FOLD_NEW)
    for k in range(TILES):
        b_s, h_a, h_u, dt, b_x, A = nxt
        if TILES > 1:  # the next tile's inputs, in flight during this tile's fold
            nxt = _flush_tile_inputs(u_d, u_sc, u_gs, su_d, su_sc, su_gs, ru_ptr, ra_ptr, s_ru, s_ra, x_ptr, dt_ptr,
                                     A_ptr, dtb_ptr, slot, start, W, i_b, t0 + k + 1, k + 1 < TILES,
                                     H, R, C, RING, UFMT, HAS_DTB, BR, BC, BW, HW, FOLD_NEW)
        t = t0 + k
        i_h = t // NRB
        rows = (t % NRB) * BR + tl.arange(0, BR)
        m_r = (rows < R) & ((rows * 0 + slot) >= 0)
        if FOLD_NEW:
            dt = softplus(dt)
            n_u = dt * b_x
            n_a = A * dt
            h_a = tl.where(at, n_a, h_a)
            h_u = tl.where(at[:, None], n_u[None, :], h_u)
        b_s = _fold_window(b_s, h_a, h_u, h_b, m_win, FOLD_PREC, HW, SPLIT, UFMT, RFMT, TILED_FMT)
        if FOLD_NEW:
            b_y = tl.sum(b_s * b_c[None, :], 1)  # S C of the folded S, before the stores
        _store_flushed(b_s, u_d, u_sc, u_gs, su_d, su_sc, su_gs, r_d, r_sc, r_gs, sr_d, sr_sc, sr_gs,
                       tl.maximum(slot, 0), i_h, rows, m_r, R, C, seed, seq, ev, SPLIT, UFMT, USR, RFMT, RSR, BR, BC,
                       HW)
        if FOLD_NEW:
            bh = i_b.to(tl.int64) * H + i_h
            _store_output(b_y, b_x, valid, i_h, bh, rows, m_r, D_ptr, z_ptr, y_ptr, R, HAS_D, HAS_Z)
        else:
            _spec_flush_drafts(b_s, valid, i_b, i_h, i_g, t % NRB, tl.maximum(slot, 0), start, W, rows, m_r, cols,
                               m_c, tt, m_t, A, dt_ptr, dtb_ptr, x_ptr, C_ptr, D_ptr, z_ptr, y_ptr, ru_ptr, ra_ptr,
                               s_ru, s_ra, sc_ptr, H, G, R, C, RING, T, BJ, HAS_D, HAS_DTB, HAS_Z, STATE_PREC,
                               VERIFY_PREC, HW)


# ---------------------------------------------------------------------------------------------
# Host wrappers
# ---------------------------------------------------------------------------------------------
def _block_rows(R: int, C: int, stored: tuple[int, ...], block_r: int | None) -> int:
    """Rows per program. ``stored``: the formats the launch writes. Reading NVFP4 works from any row
    block (scales are per row block of 16 and per head), but writing it needs the head's amax."""
    if any(f == FMT_NVFP4 for f in stored):
        return pow2(R)  # NVFP4's global scale is per matrix: one program must own the whole head
    if block_r is not None:
        return block_r
    return min(pow2(R), 64)


# Launch shapes measured fastest on the H200 (scripts/bench_kernels.py "tune" rows, batch 256,
# Nemotron-3-Super shape; reports/bench/bench_kernels.json and tune_explore.jsonl): the conventional
# step at 16 rows × 8 warps (547.2 µs; 555.4 at 32 × 8, 575.9 at 16 × 4); the flush at 32 rows × 4
# warps with the tf32x3 fold (1027.9 µs; 1028.8 at 16 × 4, 1339.9 at 32 × 8, 1252-1306 with the
# fp32-FMA fold in earlier runs); verify steps at 64 rows × 4 warps.
CONVENTIONAL_BLOCK_R = 16
CONVENTIONAL_NUM_WARPS = 8
FLUSH_BLOCK_R = 32
# At small batch (batch × heads ≤ SMALL_BATCH_HEAD_MATRICES, batch 16 of Nemotron-3-Super's 128 heads)
# the conventional step runs 4 rows × 1 warp (H200, reports/bench/tune_small_batch.json, batch 1 / 4 /
# 16: 4.96 / 11.22 / 36.07 µs against 5.37 / 11.36 / 37.31 at 16 × 8) and a flush that stores no NVFP4
# 32 rows × 4 warps, uncapped: since the flush folds its new token inside the fold product, 32 × 4
# is the fastest shape of the small-batch space at all three batches (reports/bench/
# tune_small_batch_round2n.json: fp32 flush 7.05 / 16.48 / 49.99 µs against 7.59 / 18.59 / 55.67 at
# the 16 × 1 this rule held before, and 7.13 / 17.98 / 53.72 at 16 × 2).
SMALL_BATCH_HEAD_MATRICES = 2048
# The one-launch one-token steps (small batches) request their output gates, D and z, with the
# token's x and dt and keep that x for D x, instead of loading D, z and x again at the output: there
# those loads were a memory round trip of their own (sm_90, batch 1: the output-only step from fp32
# rounds=3/21/9/3 → 3/21/11, the fp32 flush 5/10/7/1/9 → 5/19/7/1). H100, each row five times at batch
# 1 and three at 4 and 16, both forms in one process (reports/diagnostics/mamba2-early-gates-fd970ed.jsonl):
# batch 1 fp32 flush 7.47-7.53 µs against 7.77-7.86, fp16-SR/NVFP4 flush 10.98-11.03 against
# 11.21-11.30, output-only step from fp32 5.00-5.05 against 5.09-5.15 (4.77 in the first round), from
# NVFP4 4.94-5.03 against 5.00-5.13; batches 4 and 16 the same within their spread. The two-launch
# form (larger batches) keeps its order: its compile does not change.
EARLY_OUTPUT_GATES = True
# The one-launch output-only step from an fp32 read copy (small batches) requests its token's dt,
# dt_bias and x before its state tile (EARLY_TOKEN_DT). Where they came after C's layout change (the
# kernel's first barrier, which waits for C), the step waited a memory round trip for dt with the
# window's records not yet requested: Nsight Compute put 105 of the step's 485 warp samples on that
# wait (H100, batch 1, reports/diagnostics/ncu-batch1-2bd1ea1.json). H100, both forms in one process,
# four rounds each (reports/diagnostics/mamba2-early-dt-f0594c8.jsonl): batch 1, W = 7 4.40-4.82 µs
# against 5.03-5.04, W = 15 4.82-4.84 against 5.09-5.13, W = 0 4.66-4.72 against 4.82-4.90; batch 4
# W = 0 / 7 / 15 9.74-9.82 / 10.13-10.22 / 10.57-10.63 against 10.18-10.22 / 10.33-10.41 / 10.64-10.66.
# Requesting the head's A with them as well (the profile's next wait) made batch 4 4 % faster and
# batch 1 up to 2 % slower at W = 7 and 15 (mamba2-early-a-64976ae.jsonl), and was not kept.
EARLY_TOKEN_DT = True
# Warps of a scores-kernel program (one per group and batch entry: the window's scores B_j·C_t and the
# group's new B record). 1, 2 and 4 warps timed the same on the H200 at batch 256 (reports/diagnostics/
# scores-warps.jsonl: output-only steps from fp32 / NVFP4 read copies, verify and speculative flush at
# T = 8, every spread overlapping), so it keeps 4.
SCORES_NUM_WARPS = 4
SMALL_BATCH_CONVENTIONAL = (4, 1)
# Above the small-batch rule, a conventional step storing a 16-bit or FP8 state runs its own shape:
# the 16 × 8 programs of the fp32 rule hold 8 elements per thread, and with the SR draws and the
# encode beside them they issue more instructions than their few bytes need. H100 80GB HBM3, batch 256,
# every shape twice in one process (reports/diagnostics/conv-shapes.jsonl): bf16 381.4-382.0 µs at
# 32 × 8 against 404.3-406.7 at 16 × 8; fp16-SR 456.0-456.5 against 563.8-564.3; bf16-SR 416.7-416.8
# at 32 × 4 against 505.8-506.7; FP8-SR 455.9-456.3 at 32 × 4 against 624.8-625.4 (64 × 8:
# 452.7-453.8). fp32 keeps 16 × 8 (729.6-730.3; 32 × 8 719.2-720.0 there, 536.2 against 538.4 on the
# H200, within that run's spread). The benchmark tunes each stored format's conventional step over
# these shapes and its own rule before it uses it as a baseline.
CONVENTIONAL_FORMAT_SHAPES = {"bf16": (32, 8), "fp16-sr": (32, 8), "bf16-sr": (32, 4), "fp8e4m3-sr": (32, 4)}
SMALL_BATCH_FLUSH = (32, 4)
# Inside the small-batch rule, from SMALL_BATCH_TILED_MIN_HEAD_MATRICES (batch 4 of 128 heads) on, the
# autoregressive flush of FLUSH_TILED_FORMATS runs SMALL_BATCH_FLUSH_TILES tiles per program of that
# shape in the multi-tile kernel at FLUSH_TILED_MAX_REGISTERS. Those flushes add their fold product
# by one FMA in both kernels (``_fold_window``), which one tile per program, uncapped, ran slower at
# these batches than the fold accumulated inside the product did. H200, two timings each
# (reports/diagnostics/mamba2-flush-tiles.jsonl, run 6), fp32 flush at batch 1 / 4 / 16:
# one tile 7.3-7.4 / 20.2-20.5 / 69.6-69.8 µs (at 128 registers 7.4-7.5 / 17.5-17.7 / 58.4-58.9);
# 2 tiles 8.1-8.2 / 18.5-18.6 / 51.4-51.9; 4 tiles 11.4-11.5 / 15.6 / 50.0-50.2; 8 tiles 18.5 / 19.4-19.6
# / 54.5-54.9; the fold inside the product, one tile (the previous rule) 7.1-7.2 / 16.1-16.3 / 50.1-50.7.
# Batch 1 keeps one tile (its 256 programs do not fill the GPU even before tiling); batch 2 was not
# measured and keeps one tile too.
SMALL_BATCH_TILED_MIN_HEAD_MATRICES = 512
SMALL_BATCH_FLUSH_TILES = 4
# The autoregressive flush (T = 1) at the default shapes above the small-batch rule runs with a
# register cap (Triton's ``maxnreg``). Uncapped it held 158 registers at 32 rows × 4 warps (sm_90),
# 3 programs per SM, and waited with no eligible warp 60 % of cycles (Nsight Compute, reports/
# diagnostics/ncu-decode-99c947d.json): a latency-bound kernel, for which more resident warps beat
# a few spilled registers (reports/diagnostics/flush-register-cap.jsonl: fp32 809-812 µs at 16 × 2
# capped at 128 against 1000-1003 uncapped at 32 × 4). With the new token folded inside the fold
# product (no spill left at these caps in an sm_90 compile), H200, batch 256, W = 15, every row twice
# (reports/diagnostics/mamba2-fold-new.jsonl and fp8-hw-decode.jsonl):
# * a flush storing only fp32: 32 rows × 4 warps capped at 128, 705-714 µs (112: 723-733, 144:
#   798-800; 16 × 2 at 128: 745-769, at 144: 789-792; 32 × 2 at 128 / 168: 1057 / 714-721; 64 × 4 at
#   168: 788-793; 64 × 8 at 128: 1063-1064);
# * a flush storing NVFP4 (whole head, 4 warps) capped by its update format: fp32 at 168, 1167-1175
#   (144: 1360-1367); fp16-SR at 144, 1319-1334 (128: 1353-1367, 136: 1339-1349, 168: 1346-1359,
#   192: 1382-1389); FP8-SR at 128, 1390-1404 (112: 1436-1445, 144: 1439-1449, 168: 1441-1448);
# * others (an SR update copy with an FP8 read copy: 32 × 4) capped at 128.
# The NVFP4 caps held after the block scales were rounded by the GPU's conversion (H100, batch 256,
# W = 15, each twice in one process, reports/diagnostics/mamba2-nvfp4-flush-caps-65c30b0.jsonl):
# fp16-SR 1185-1210 µs at 144 against 1195-1217 at 152 or 168; FP8-SR 1251-1275 at 128 against
# 1289-1308 at 144 or 168; fp32 1224-1227 at 168 against 1261-1265 at 200.
# An explicit block_r, num_warps or max_registers replaces the rule.
FLUSH_FP32_SHAPE = (32, 4)
FLUSH_MAX_REGISTERS = 128
FLUSH_NVFP4_MAX_REGISTERS = 168
FLUSH_NVFP4_MAX_REGISTERS_BY_UPDATE = {FMT_FP16: 144, FMT_E4M3: 128}
# Above the small-batch rule, an autoregressive flush with an fp32 update copy and an fp32, E4M3 or BF16
# read copy (FLUSH_TILED_FORMATS; shared fp32 too) runs FLUSH_TILES (row block, head) tiles per program
# in ``mamba2_flush_kernel``, the next tile's inputs in flight during the current tile's fold: 32 rows
# × 4 warps capped at FLUSH_TILED_MAX_REGISTERS. H200, batch 256, W = 15, two timings each at commit
# 577b1a9 (reports/diagnostics/mamba2-flush-tiles.jsonl, run 2), against one tile per program in the
# replay kernel at the previous rule (32 × 4, 128 registers): fp32 shared 633 µs at 8 tiles, 666 at 4,
# 721-723 at 2, against 711-712 (4 tiles at 152 / 184 registers: 733-734 / 776); fp32/E4M3 808-810 at
# 4 tiles against 856-858; fp32/BF16 836-837 at 4 tiles against 940-942; split fp32/fp32 898-900
# against 902-903. In the first run (8bdbedc with the loop kernel also at one tile): 4 tiles uncapped
# or at 128 / 200 registers 765 / 858 / 769; 16-row tiles at 128 registers, 4 × 2 warps 840, 8 × 2
# warps 817, 4 × 4 warps 783. One tile per program stays in the replay kernel: the loop kernel at one
# tile measured 786 µs (fp32) and 1293 (fp32/NVFP4) there, against 707 and 1179 for the replay kernel
# in the thirteenth kernel run. A flush storing NVFP4 holds the whole head's [64, 128] tile, which
# prefetched spills 750-940 bytes per thread in an sm_90 compile (scripts/kernel_resources.py), so it
# is not tiled. Nor as two 32-row tiles per head with the second folded twice (once beside the first,
# for the head's amax): 1.18-1.51x the whole-head tile on an H100 at 2-8 tiles of 4 warps, capped or
# not (reports/diagnostics/mamba2-nvfp4-head-pairs-a4b3268.jsonl). (The tiled flushes themselves keep
# a small spill stack at 168 registers in that compile: 56 bytes per thread for fp32, 104 for
# fp32/E4M3; uncapped, 208 registers and none, measured slower.)
# Run 5 of that file, with the fold added by one FMA (``_fold_window``, FOLD_FMA): 8 tiles 615 µs,
# 16 tiles 619-620 (runs 4-5 without it: 16 tiles 624-632 against 633-635 at 8, 32 tiles 644).
FLUSH_TILES = 8
FLUSH_TILED_MAX_REGISTERS = 168
FLUSH_TILED_FORMATS = {(FMT_FP32, FMT_FP32), (FMT_FP32, FMT_E4M3), (FMT_FP32, FMT_BF16)}
# The multi-tile kernel prefetches each tile's whole ring of u records, and over a ring of more than 16
# records it lost to one tile per program. An autoregressive flush that stores only fp32 over a ring in
# FLUSH_ONE_TILE_REGISTERS_BY_RING runs one tile of FLUSH_FP32_SHAPE at that ring's cap instead. H200,
# batch 256, shared fp32, W = L - 1, each row twice in one run (reports/diagnostics/spec-flush-forms.jsonl,
# run 3): ring 32 1048-1058 µs at 128 against 1201-1209 for 8 tiles at 168 (one tile at 168: 1091-1093);
# ring 64 2140 at 168 against 2593-2604 (at 128: 2950-2952). Other rings and formats keep the rules above.
FLUSH_ONE_TILE_REGISTERS_BY_RING = {32: 128, 64: 168}
# The T = 1 output-only step (whole head, 64 rows; two-launch form): 2 warps from an fp32 read copy,
# 1 from a stored format. H200, batch 256 ("tune" rows of reports/bench/bench_kernels_round2c_quick.json):
# fp32 275.5 µs at 2 warps, 303.3 at 1, 278.8 at 4; NVFP4 109.1 at 1 warp, 117.2 at 2, 153.1 at 4;
# FP8 92.3 / 96.2 / 127.7; BF16 156.5 / 157.9 / 161.7.
NONFLUSH_NUM_WARPS = 2
NONFLUSH_NUM_WARPS_STORED = 1
# That step from an NVFP4 read copy, at that default shape, runs capped at 96 registers (Triton's
# maxnreg): with its state product first it holds 127 (sm_90), and the cap fits more one-warp programs
# per SM. H200, batch 256, W = 7, each row twice in one run (reports/diagnostics/nonflush-order.jsonl,
# run 5): 77.5-78.7 µs at 96 against 80.5-82.1 uncapped, 80.5-81.8 at 80, 120.9-121.4 at 64.
# The cap was measured with the default element decode (fp4_decode="fp16"). The other decodes run
# uncapped: under it they spill (sm_90 compile, scripts/kernel_resources.py --hw --fp4-decode: "ptx" 592
# bytes of stack per thread, "mma" 112), and "ptx" ran 303.7 µs capped against 95.4 uncapped (H200,
# batch 256, tuning rows of reports/bench/bench_kernels_round2v_quick.json).
NONFLUSH_NVFP4_MAX_REGISTERS = 96


def _nonflush_max_registers(T: int, flush: bool, fused: bool, read_code: int, explicit: tuple,
                            fp4_decode: str = "fp16") -> int | None:
    """The register cap the rule gives a launch (None: none): NONFLUSH_NVFP4_MAX_REGISTERS for the
    two-launch T = 1 output-only step from an NVFP4 read copy with the fp16 element decode when none of
    the ``explicit`` launch keywords (block_r, num_warps, max_registers) was given."""
    if (T == 1 and not flush and not fused and read_code == FMT_NVFP4 and fp4_decode == "fp16"
            and all(v is None for v in explicit)):
        return NONFLUSH_NVFP4_MAX_REGISTERS
    return None


# The verify block (T > 1, non-flush) held transposed (state rows as the products' M): at 64 rows ×
# 8 warps the compiled kernel made illegal memory accesses on the H200 (Triton 3.6; compute-sanitizer:
# a shared-memory read out of bounds in the small history/draft products, docs/pitfalls.md §14;
# 4 warps run clean and pass the checks), so the wrapper refuses more than 4 warps for it.
VERIFY_MAX_WARPS = 4
# The verify block at 4 warps runs capped at VERIFY_MAX_REGISTERS (Triton's maxnreg) when no cap is
# given: uncapped it held 202-246 registers (sm_90), two warps per scheduler, and Nsight Compute found
# it waiting on latency with no eligible warp (reports/diagnostics/ncu-targets-8cb208f.json). H200,
# batch 256, T = 8 drafts over W = 8, 64 rows × 4 warps, each row twice in one run (reports/
# diagnostics/verify-caps.jsonl): 603.3-604.8 µs at 168 against 722.2-725.9 uncapped and 686.3-690.9
# at 128.
# (Its records stored after the outputs instead of before, so that no store waits ahead of the later
# loads, timed the same: 598-611 µs against 602-605; reports/diagnostics/spec-flush-forms.jsonl.)
VERIFY_MAX_REGISTERS = 168
# The speculative flush (T > 1) that stores no NVFP4 runs capped at SPEC_FLUSH_MAX_REGISTERS when no
# launch shape or cap is given (uncapped: 209 registers at 32 rows × 4 warps in an sm_90 compile, no
# spill). H200, batch 256, T = 8 drafts, W = 16, ring 32, each row twice in one run (reports/diagnostics/
# spec-flush-forms.jsonl, run 3): shared fp32 1294-1299 µs at 168 against 1500-1506 uncapped (192:
# 1594-1602, 224: 1507-1516; 128: 1450-1473 in run 1 of reports/diagnostics/spec-flush-shapes.jsonl);
# split fp32/fp32 1437-1447 against 1697-1706. One that stores NVFP4 (the whole head per program) stays
# uncapped: fp32/NVFP4 2049-2063 at 168 against 1976-1992 (fp16-SR/NVFP4 2039-2053 against 2135-2151,
# a gain too small to carry a rule of its own).
SPEC_FLUSH_MAX_REGISTERS = 168
# Above the small-batch rule, a speculative flush of FLUSH_TILED_FORMATS (an fp32 update copy with an
# fp32, E4M3 or BF16 read copy; shared fp32 too) that holds its history as tiles narrower than the ring
# (``window_bound``, which the triton-decode engine passes) runs SPEC_FLUSH_TILES (row block, head)
# tiles per program in ``mamba2_flush_kernel`` at SPEC_FLUSH_TILED_MAX_REGISTERS. H100, batch 256, T = 8
# drafts, W = 16, ring 32, shared fp32 (tuning rows of reports/bench/bench_kernels_round2zc_quick_h100.json):
# 1170.3 µs at 8 tiles and 224 registers against 1303.2 for one tile at 168 with the same history tiles
# (4 tiles 1226.2, 2 tiles 1330.2; at 168 registers every tile count ran 1351-1380). Without
# window_bound the tiled forms lost (8 tiles at 224: 1477.2 against 1354.9). Per format, same machine,
# each row twice in one run (reports/diagnostics/spec-flush-tiles-rule.jsonl), 8 tiles at 224 against
# one tile at 168: shared fp32 1162-1163 against 1301-1304 µs; split fp32/fp32 1400-1402 against 1581;
# fp32/BF16 1332-1337 against 1455; fp32/E4M3 1341-1343 against 1413-1415; at batch 32 shared fp32
# 162.9 against 176-177. A 16-bit update copy gains nothing (fp16-SR/BF16 1620 against 1625-1628) and
# one that stores NVFP4 loses (fp16-SR/NVFP4 2344-2360 against 1827-1830): both keep one tile. Then 16
# tiles at 255 registers against those 8 at 224, same machine, each twice in one run
# (reports/diagnostics/spec-flush-tiles-16.jsonl): shared fp32 1110-1126 µs against 1160-1167, split
# fp32/fp32 1368-1375 against 1386-1392, fp32/BF16 1284-1293 against 1321-1332, fp32/E4M3 1300-1308
# against 1334-1339, shared fp32 at batch 32 153.8-154.5 against 161.3-161.9 (32 tiles: no better,
# 1114-1117 / 1389 / 1307-1309 / 1320-1323 / 153.8-154.4; 8 tiles at 255: between the two). 255 is
# the most registers a thread can hold on sm_90: in effect no cap.
SPEC_FLUSH_TILES = 16
SPEC_FLUSH_TILED_MAX_REGISTERS = 255


def _drafts_max_registers(T: int, flush: bool, stored: tuple[int, ...], explicit: tuple,
                          num_warps: int | None) -> int | None:
    """The register cap the rules give a T > 1 launch (None: none): VERIFY_MAX_REGISTERS for the verify
    block at 4 warps when no cap was given, SPEC_FLUSH_MAX_REGISTERS for the speculative flush that
    stores no NVFP4 (``stored``: its formats) when none of the ``explicit`` launch keywords (block_r,
    num_warps, max_registers) was given."""
    if T > 1 and not flush and explicit[2] is None and (num_warps or _replay_warps(T, flush)) == VERIFY_MAX_WARPS:
        return VERIFY_MAX_REGISTERS
    if T > 1 and flush and FMT_NVFP4 not in stored and all(v is None for v in explicit):
        return SPEC_FLUSH_MAX_REGISTERS
    return None


def _spec_flush_tiled(T: int, flush: bool, small_flush: bool, stored: tuple[int, ...], narrowed: bool,
                      explicit: tuple) -> bool:
    """Whether a speculative flush (T > 1) runs SPEC_FLUSH_TILES tiles per program: above the small-batch
    rule (not ``small_flush``), its (update, read) formats ``stored`` in FLUSH_TILED_FORMATS, with
    history tiles narrower than the ring (``narrowed``: ``window_bound`` made them so), and none of the
    ``explicit`` launch keywords (block_r, num_warps, max_registers, tiles_per_program) given."""
    return (T > 1 and flush and not small_flush and tuple(stored) in FLUSH_TILED_FORMATS and narrowed
            and all(v is None for v in explicit))


def _replay_warps(T: int, flush: bool, fused: bool = False, bj: int = 16, read_fp32: bool = True) -> int:
    """Warps of a replay program. (A flush that stores NVFP4 holds the whole head's [64, 128] tile and
    spills 48-104 bytes at 4 warps in an sm_90 compile, none at 8, but 8 warps measured no faster on
    the H200: 1566 against 1550 µs with an fp32 update copy, 4376 against 4353 with fp16-SR.)"""
    if T == 1 and not flush:
        if fused:
            return fused_nonflush_warps(bj)
        return NONFLUSH_NUM_WARPS if read_fp32 else NONFLUSH_NUM_WARPS_STORED
    return 4


def _tiled_format(stored: tuple[int, ...], fold_new: bool) -> bool:
    """An autoregressive flush (``fold_new``) of FLUSH_TILED_FORMATS: the flushes the multi-tile kernel
    runs by rule, and those whose fold adds its product by one FMA in either kernel (TILED_FMT)."""
    return bool(fold_new) and tuple(stored) in FLUSH_TILED_FORMATS


def _flush_launch(autoregressive_flush: bool, stored: tuple[int, ...], block_r: int | None,
                  num_warps: int | None, max_registers: int | None,
                  tiles_per_program: int | None = None, fold_new: bool = True,
                  ring: int = 16) -> tuple[int | None, int | None, int, int]:
    """(block_r, num_warps, max_registers, tiles per program) of a flush launch after the rules (the
    comments at FLUSH_MAX_REGISTERS and FLUSH_TILES): an autoregressive flush above the small-batch
    rule with no explicit shape, cap or tile count takes FLUSH_TILES tiles of FLUSH_FP32_SHAPE at
    FLUSH_TILED_MAX_REGISTERS when its (update, read) formats ``stored`` are in FLUSH_TILED_FORMATS
    and it folds its new token (``fold_new``: the only flush the rule tiles);
    otherwise one tile, FLUSH_FP32_SHAPE when it stores only fp32, and a cap of FLUSH_MAX_REGISTERS
    (when it stores NVFP4: FLUSH_NVFP4_MAX_REGISTERS_BY_UPDATE of its update format, ``stored[0]``, or
    FLUSH_NVFP4_MAX_REGISTERS), except that one storing only fp32 over a ``ring`` in
    FLUSH_ONE_TILE_REGISTERS_BY_RING takes one tile at that ring's cap. Every other launch keeps what it
    was given, one tile unless ``tiles_per_program`` says otherwise, uncapped unless max_registers says
    otherwise (0: no cap)."""
    explicit = (max_registers, block_r, num_warps, tiles_per_program)
    if not autoregressive_flush or any(v is not None for v in explicit):
        return block_r, num_warps, max_registers or 0, tiles_per_program or 1
    if all(f == FMT_FP32 for f in stored) and ring in FLUSH_ONE_TILE_REGISTERS_BY_RING:
        return (*FLUSH_FP32_SHAPE, FLUSH_ONE_TILE_REGISTERS_BY_RING[ring], 1)
    if _tiled_format(stored, fold_new):
        return (*FLUSH_FP32_SHAPE, FLUSH_TILED_MAX_REGISTERS, FLUSH_TILES)
    if FMT_NVFP4 in stored:
        return None, None, FLUSH_NVFP4_MAX_REGISTERS_BY_UPDATE.get(stored[0], FLUSH_NVFP4_MAX_REGISTERS), 1
    if all(f == FMT_FP32 for f in stored):
        return (*FLUSH_FP32_SHAPE, FLUSH_MAX_REGISTERS, 1)
    return None, None, FLUSH_MAX_REGISTERS, 1


def _small_batch_tiled(head_matrices: int, stored: tuple[int, ...], fold_new: bool, explicit: tuple) -> bool:
    """Whether a flush inside the small-batch rule (``head_matrices``: batch × heads, at most
    SMALL_BATCH_HEAD_MATRICES) runs SMALL_BATCH_FLUSH_TILES tiles per program: an autoregressive flush
    (``fold_new``) of FLUSH_TILED_FORMATS from SMALL_BATCH_TILED_MIN_HEAD_MATRICES on, when none of the
    ``explicit`` launch keywords (num_warps, max_registers, tiles_per_program) was given."""
    return (_tiled_format(stored, fold_new) and head_matrices >= SMALL_BATCH_TILED_MIN_HEAD_MATRICES
            and all(v is None for v in explicit))


def _conventional_launch(P: int, C: int, code: int, block_r: int | None, num_warps: int | None,
                         head_matrices: int, fmt: str | None = None) -> tuple[int, int]:
    """(rows, warps) of a conventional-step program (``C``: the padded column count; ``head_matrices``:
    batch × heads; ``fmt``: the stored format's name, for ``CONVENTIONAL_FORMAT_SHAPES``). An NVFP4
    state needs the whole head in one program (its global scale is per matrix), so the small-batch
    1-warp rule, measured on 4-row blocks, does not apply to it: it takes ``warps_for_tile`` (the GDN
    step's whole [128, 128] head at 1 warp spilled: 2.85 ms against 257 µs for fp32 at batch 256, H200)."""
    small = head_matrices <= SMALL_BATCH_HEAD_MATRICES
    default_br, default_nw = SMALL_BATCH_CONVENTIONAL if small else CONVENTIONAL_FORMAT_SHAPES.get(
        fmt, (CONVENTIONAL_BLOCK_R, CONVENTIONAL_NUM_WARPS))
    br = _block_rows(P, C, (code,), default_br if block_r is None else block_r)
    if num_warps is None:
        num_warps = default_nw if block_r is None and code != FMT_NVFP4 else warps_for_tile(br, C)
    return br, num_warps


def _opt(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return like if t is None else t.contiguous()


def mamba2_conventional_step(state: PackedState, slots: torch.Tensor, x: torch.Tensor, dt: torch.Tensor,
                             A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None,
                             dt_bias: torch.Tensor | None = None, z: torch.Tensor | None = None, *,
                             seq_ids: torch.Tensor | None = None, events: torch.Tensor | int = 1,
                             seed: int = 0, layer: int = 0, block_r: int | None = None,
                             num_warps: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One conventional decode step, state updated in place in ``state``'s format.

    state: PackedState pool [S, H, P, N]; slots: [B] int (-1 = skip); x [B, H, P]; dt [B, H] (raw);
    A [H]; B, C [B, G, N]; D, dt_bias [H]; z [B, H, P]; seq_ids [B] and events [B] (or scalars):
    the SR counters of this write. Returns y [B, H, P] in x's dtype.
    """
    Bsz, H, P = x.shape
    G, N = B.shape[-2:]
    if (state.R, state.C) != (P, N):
        raise ValueError(f"state pool holds [{state.R}, {state.C}] matrices, inputs need [{P}, {N}]")
    if H % G:
        raise ValueError(f"heads {H} must be a multiple of groups {G}")
    dev = x.device
    x = x.contiguous()
    y = torch.empty_like(x) if out is None else out
    seq_ids = torch.arange(Bsz, device=dev) if seq_ids is None else seq_ids
    bc = max(pow2(N), 16)
    br, num_warps = _conventional_launch(P, bc, state.code, block_r, num_warps, Bsz * H, state.fmt)
    grid = (triton.cdiv(P, br), H, Bsz)
    mamba2_conventional_step_kernel[grid](
        *state.kernel_args(), slots.to(torch.int32).contiguous(), as_i64(seq_ids, Bsz, dev),
        as_i64(events, Bsz, dev), sr_seed(seed, layer),
        x, dt.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(), _opt(D, A), _opt(dt_bias, A),
        _opt(z, x), y, H, G, P, N,
        FMT=state.code, SR=state.sr, HAS_D=D is not None, HAS_DTB=dt_bias is not None, HAS_Z=z is not None,
        BR=br, BC=bc, HW=x.is_cuda, num_warps=num_warps, enable_fp_fusion=False)
    return y


def mamba2_replay_step(update: PackedState, read: PackedState | None, records: Mamba2Records,
                       slots: torch.Tensor, start: torch.Tensor, wlen: torch.Tensor,
                       x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                       D: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
                       z: torch.Tensor | None = None, *, flush: bool = False, fold_new: bool = False,
                       seq_ids: torch.Tensor | None = None, events: torch.Tensor | int = 1,
                       seed: int = 0, layer: int = 0, block_r: int | None = None,
                       num_warps: int | None = None, fold_precision: str = "tf32x3",
                       verify_precision: str = "tf32x3", fused_scores: bool | None = None,
                       fp4_decode: str = "fp16", max_registers: int | None = None,
                       overlap_scores: bool | None = None, tiles_per_program: int | None = None,
                       window_bound: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """One ReplaySSM step for T = x.shape[1] tokens (T = 1: autoregressive; T > 1: speculative verify).

    update / read: PackedState pools [S, H, P, N] (read=None: shared mode, one copy, ``update``);
    records: the slots' ring buffers; start, wlen: [B] int32 window pointers (not advanced here: see
    ``precision_lab.engines.triton_decode.advance``); x [B, T, H, P]; dt [B, T, H]; B, C [B, T, G, N]; z [B, T, H, P].
    flush: fold the window into the update checkpoint and write both copies (SR event ``events``);
    fold_new: also fold the new token (autoregressive flush; needs T = 1).
    Returns y [B, T, H, P]. The non-flush step writes only y and the T records.
    block_r / num_warps override the launch shape; max_registers caps the registers per thread
    (Triton's ``maxnreg``; 0 = no cap; None = the rules, ``_flush_launch`` and
    ``_nonflush_max_registers``: the autoregressive flush at its default shapes and the two-launch
    output-only step from an NVFP4 read copy at its default shape with the fp16 decode are capped,
    and so are the T > 1 launches, ``_drafts_max_registers``).
    fold_precision / verify_precision: the matrix products of the flush's fold and of the T > 1
    verify block run on tensor cores with the 3-pass TF32 split by default ("tf32x3": each
    product's relative error ≤ ~2^-21 against 2^-24 for fp32 FMAs, far below any state format's
    rounding; inputs with ≤ 11 significant bits are exact); "ieee" runs them as fp32 FMAs (the
    flush is then ~25% slower on the H200).
    fused_scores: run a one-token step (non-flush, or flush with fold_new) as one launch, every
    program computing its scores B_j·C itself, instead of a scores kernel per group followed by the
    step kernel; None = the batch-size rule (``kernels/common/launch.py``, ``fused_scores_launch``,
    measured on the H200). Both forms give the same state codes and records bit for bit and
    the same outputs up to fp32 rounding. An autoregressive flush runs no scores kernel in either form.
    overlap_scores: in the two-launch form of the T = 1 non-flush step, launch the step kernel as a
    programmatic dependent launch of the scores kernel so that it streams its state while the scores
    are computed (``overlap_scores_launch`` in ``kernels/common/launch.py``: None = wherever the GPU
    has it; same results bit for bit either way).
    tiles_per_program: (row block, head) tiles each program of a flush folds, the next tile's inputs
    loaded during the current tile's fold (``mamba2_flush_kernel``; must divide a group's row blocks ×
    heads); None = the rule (``_flush_launch``: for the autoregressive flush, FLUSH_TILES for an fp32
    update copy with an fp32, E4M3 or BF16 read copy above the small-batch rule,
    SMALL_BATCH_FLUSH_TILES inside it from SMALL_BATCH_TILED_MIN_HEAD_MATRICES on, else 1; for the
    speculative flush, SPEC_FLUSH_TILES above the small-batch rule for FLUSH_TILED_FORMATS when
    ``window_bound`` narrows its history tiles, ``_spec_flush_tiled``, else 1). Same codes and records
    bit for bit; the same outputs bit for bit too, except a speculative flush's draft outputs with a
    16-bit update copy, which agree to fp32 rounding (the drafts' compiled tensor-core products round
    differently in the two kernels).
    fp4_decode: how the T = 1 non-flush step multiplies an NVFP4 read copy with C: "fp16" (E2M1
    values as fp16 bit patterns converted to fp32, fp32 products), "ptx" (the inline-PTX E4M3
    conversion instead; GPU only, the interpreter runs "fp16") or "mma" (one tensor-core product
    with fp16 operands: the E2M1 values times their block scales, exact in fp16, against C scaled by
    a power of two into fp16, an fp32 C in two fp16 parts; needs a row block of at least 16 rows,
    runs in the interpreter too); ``read_state_dot`` in ``kernels/common/state_io.py``. The outputs
    agree up to fp32-level rounding; which is fastest is a GPU measurement (the kernel benchmark's
    tuning rows).
    window_bound: for T > 1 (verify, speculative flush), an upper bound on every entry's window
    length W (``wlen``), known on the host (the ``triton-decode`` engine passes its window mirror).
    The history's records are then held as tiles of max(pow2(window_bound), 16) positions instead of
    the whole ring's: a round of T drafts needs a ring of at least the history block + T records,
    twice the history tile at T = 8 and a history block of 16. A bound below some entry's W drops
    that entry's oldest records beyond it: the caller must not understate it. None = the ring
    (always safe). Same outputs, records and codes as without it (the positions it leaves out hold
    no records). Ignored for T = 1.
    """
    for name, prec in (("fold_precision", fold_precision), ("verify_precision", verify_precision)):
        if prec not in ("tf32x3", "ieee"):
            raise ValueError(f"{name} must be 'tf32x3' or 'ieee', got {prec!r}")
    check_fp4_decode(fp4_decode)
    Bsz, T, H, P = x.shape
    G, N = B.shape[-2:]
    if fold_new and (T != 1 or not flush):
        raise ValueError("fold_new (autoregressive flush) needs flush=True and T = 1")
    if T > records.ring:
        raise ValueError(f"T = {T} tokens do not fit a ring of {records.ring} records")
    if window_bound is not None and not 0 <= window_bound <= records.ring:
        raise ValueError(f"window_bound must lie in [0, ring] = [0, {records.ring}] (a window holds at most the "
                         f"ring's records), got {window_bound}")
    shared = read is None
    read = update if shared else read
    for st in (update, read):
        if (st.R, st.C) != (P, N):
            raise ValueError(f"state pool holds [{st.R}, {st.C}] matrices, inputs need [{P}, {N}]")
    dev = x.device
    x = x.contiguous()
    y = torch.empty_like(x) if out is None else out
    seq_ids = torch.arange(Bsz, device=dev) if seq_ids is None else seq_ids
    fmts = (update.code, read.code) if flush else ()
    explicit_shape = (block_r, num_warps, max_registers)  # as given, before the rules below fill them
    small_flush = flush and Bsz * H <= SMALL_BATCH_HEAD_MATRICES and block_r is None and FMT_NVFP4 not in fmts
    # the autoregressive flushes of the multi-tile formats, in either kernel (``_fold_window``)
    tiled_fmt = flush and _tiled_format(fmts, fold_new)
    small_tiled = small_flush and _small_batch_tiled(Bsz * H, fmts, fold_new, (num_warps, max_registers,
                                                                               tiles_per_program))
    block_r, num_warps, max_registers, tiles = _flush_launch(flush and T == 1 and not small_flush, fmts, block_r,
                                                             num_warps, max_registers, tiles_per_program, fold_new,
                                                             records.ring)
    if small_tiled:
        max_registers, tiles = FLUSH_TILED_MAX_REGISTERS, SMALL_BATCH_FLUSH_TILES
    bj = max(records.ring, 16)
    bw = min(max(pow2(window_bound), 16), bj) if T > 1 and window_bound is not None else bj
    spec_tiled = _spec_flush_tiled(T, flush, small_flush, fmts, bw < bj, explicit_shape + (tiles_per_program,))
    if spec_tiled:
        max_registers, tiles = SPEC_FLUSH_TILED_MAX_REGISTERS, SPEC_FLUSH_TILES
    if tiles_per_program is not None and tiles_per_program < 1:
        raise ValueError(f"tiles_per_program must be at least 1, got {tiles_per_program}")
    if tiles > 1 and not (flush and (fold_new or T > 1)):
        raise ValueError("tiles_per_program > 1 needs a flush: the autoregressive one (flush=True, fold_new=True) "
                         "or a speculative one (flush=True, T > 1)")
    br = _block_rows(P, N, fmts, (SMALL_BATCH_FLUSH[0] if small_flush else FLUSH_BLOCK_R) if flush and block_r is None
                     else block_r)
    if small_flush and num_warps is None:
        num_warps = SMALL_BATCH_FLUSH[1]
    if T > 1:
        br = max(br, 16)  # the verify block's matrix products need 16 rows
    bc = max(pow2(N), 16)
    fused = fused_scores_launch("mamba2", Bsz, G, T, flush, fold_new, fused_scores, update.fmt,
                                None if shared else read.fmt)
    nonflush_cap = _nonflush_max_registers(T, flush, fused, read.code, explicit_shape, fp4_decode)
    if nonflush_cap is not None:
        max_registers = nonflush_cap
    drafts_cap = _drafts_max_registers(T, flush, fmts, explicit_shape, num_warps)
    if drafts_cap is not None and not spec_tiled:
        max_registers = drafts_cap
    if T > 1 and not flush and num_warps is not None and num_warps > VERIFY_MAX_WARPS:
        raise ValueError(f"the verify block (T > 1, non-flush) runs at most {VERIFY_MAX_WARPS} warps: at 8 "
                         "warps its compiled kernel made illegal memory accesses on the H200 (Triton 3.6; "
                         f"docs/pitfalls.md); got num_warps={num_warps}")
    slots32, start32, wlen32 = (t.to(torch.int32).contiguous() for t in (slots, start, wlen))
    B = B.contiguous()
    C = C.contiguous()
    # the output-only T = 1 step overlaps its scores kernel where it can (overlap_scores_launch)
    pdl = T == 1 and not flush and not fused and overlap_scores_launch(x.device, overlap_scores)
    nrb = triton.cdiv(P, br)
    if tiles > 1:  # a program's tiles lie in one group: the count must divide the group's tiles
        group_tiles = nrb * (H // G)
        if tiles_per_program is None:  # the rule's count, or its largest divisor of the group's tiles
            tiles = max(d for d in range(1, tiles + 1) if group_tiles % d == 0)
        elif group_tiles % tiles:
            raise ValueError(f"tiles_per_program must divide the {group_tiles} (row block, head) tiles of a "
                             f"group, got {tiles}")
    if fused or fold_new:
        scores = records.a  # not read: every program computes its scores, or (fold_new) needs none
    else:
        scores = torch.empty(Bsz, T, G, bj, dtype=torch.float32, device=dev)
        mamba2_replay_scores_kernel[(G, Bsz)](
            records.b, records.b.stride(0), slots32, start32, wlen32, B, C, scores, G, N, records.ring,
            T=T, FLUSH=flush, BC=bc, BJ=bj, PDL=pdl, num_warps=SCORES_NUM_WARPS)
    state_prec = state_product_precision(verify_precision, br, P, read.code)
    if tiles > 1:  # a flush, several tiles per program (T = 1: no record kept, no scores)
        mamba2_flush_kernel[(nrb * H // tiles, Bsz)](
            *update.kernel_args(), *read.kernel_args(),
            records.u, records.b, records.a, records.u.stride(0), records.b.stride(0), records.a.stride(0),
            slots32, start32, wlen32, as_i64(seq_ids, Bsz, dev), as_i64(events, Bsz, dev), sr_seed(seed, layer),
            x, dt.contiguous(), A.contiguous(), B, C, _opt(D, A), _opt(dt_bias, A), _opt(z, x), y, scores,
            H, G, P, N, records.ring, T,
            SPLIT=not shared, UFMT=update.code, USR=update.sr, RFMT=read.code, RSR=read.sr,
            HAS_D=D is not None, HAS_DTB=dt_bias is not None, HAS_Z=z is not None,
            BR=br, BC=bc, BJ=bj, BW=bw, TP=max(pow2(T), 16), HW=x.is_cuda, FOLD_PREC=fold_precision,
            VERIFY_PREC=verify_precision, STATE_PREC=state_prec, TILES=tiles, TILED_FMT=tiled_fmt,
            num_warps=num_warps or _replay_warps(T, flush), **({"maxnreg": max_registers} if max_registers else {}),
            enable_fp_fusion=False)  # a flush rounds state: no a*b+c fused into FMAs
        return y
    step_warps = num_warps or _replay_warps(T, flush, fused, bj, read.code == FMT_FP32)
    fp4_decode = resolve_fp4_decode(fp4_decode, read, br, step_warps)
    grid = (nrb, H, Bsz)
    mamba2_replay_step_kernel[grid](
        *update.kernel_args(), *read.kernel_args(),
        records.u, records.b, records.a, records.u.stride(0), records.b.stride(0), records.a.stride(0),
        slots32, start32, wlen32, as_i64(seq_ids, Bsz, dev), as_i64(events, Bsz, dev), sr_seed(seed, layer),
        x, dt.contiguous(), A.contiguous(), B, C, _opt(D, A), _opt(dt_bias, A), _opt(z, x), y, scores,
        H, G, P, N, records.ring,
        T=T, FLUSH=flush, FOLD_NEW=fold_new, SPLIT=not shared,
        UFMT=update.code, USR=update.sr, RFMT=read.code, RSR=read.sr,
        HAS_D=D is not None, HAS_DTB=dt_bias is not None, HAS_Z=z is not None,
        BR=br, BC=bc, BJ=bj, BW=bw, TP=max(pow2(T), 16), HW=x.is_cuda, FP4=fp4_decode,
        FOLD_PREC=fold_precision,
        VERIFY_PREC=verify_precision, STATE_PREC=state_prec,
        FUSED=fused, PDL=pdl, TILED_FMT=tiled_fmt, EARLY_GATES=EARLY_OUTPUT_GATES and fused, EARLY_DT=EARLY_TOKEN_DT, num_warps=step_warps,
        **({"maxnreg": max_registers} if max_registers else {}), **pdl_kwargs(pdl),
        # a step that stores no state may fuse a*b+c into FMAs (outputs are compared with a tolerance
        # and the records are single products); a flush rounds state and must not
        enable_fp_fusion=not flush)
    return y
