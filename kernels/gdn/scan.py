"""Teacher-forced Triton scans for Gated DeltaNet (the KL engine's fast path; docs/design.md §3, §4, §8).

One program per (sequence, value head) carries that head's state [V, K] across the segment (one
launch per segment); the checkpoints stay in the output buffers (L2-resident) and are walked in
blocks of 32 value rows, which the delta rule keeps independent (the (I + A)⁻¹ below depends on k,
β, g only). NVFP4 copies are written in a second pass once the fold's amax over all rows is known.
q and k are L2-normalised in the kernel (``k · rsqrt(Σk² + eps)``), q is scaled. In-window
products run as 3xTF32 ``tl.dot`` (fp32-level error on the tensor cores).

``gdn_replay_scan_fwd_kernel`` (modes shared / split, and fp32 with an identity format). Inside a
window of L tokens starting from a checkpoint S₀, with ``c_j = Σ_{s≤j} g_s``, the delta rule
``d_j = β_j (v_j − α_j S_{j-1} k_j)`` unrolls to the unit lower-triangular system

    (I + A) D = β ⊙ (V − e^{c} ⊙ K S₀ᵀ),    A[j,s] = β_j e^{c_j−c_s} (k_j·k_s)   (s < j)

solved as ``D = (I + A)⁻¹ RHS`` with the inverse built by forward substitution on the W×W tile
(W ≤ 64). Then

    non-flush rows:  o_j = e^{c_j} (S₀ q_j) + Σ_{s≤j} e^{c_j−c_s} (k_s·q_j) d_s          (S₀ = read copy R)
    flush row L-1:   S = e^{c_{L-1}} U + Σ_s e^{c_{L-1}−c_s} d_s k_sᵀ,  o = S q_{L-1},
                     U ← round_H(S), R ← round_F(S)

where the flush folds the d's computed from the read copy (``gdn_fold="buffered"``; the flush
token's own d reads U: ``d_{L-1} = β (v − e^{c} U k − Σ_{s<L-1} e^{c_{L-1}−c_s}(k_s·k) d_s)``, as in
``precision_lab.engines.torch_decode``) or recomputes all of them from U (``"recompute"``: same (I + A)⁻¹,
right-hand side from U). In shared and fp32 modes R is U and both folds coincide.

``gdn_recurrent_scan_fwd_kernel`` (conventional): per token ``d = β (v − α S k)``,
``S ← α S + d kᵀ``, ``o = S q`` from the fp32 state, then ``S ← round_F(S)``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from precision_lab.kernels.common.formats import C_FP32, C_NVFP4, FMT_NVFP4
from precision_lab.kernels.common.launch import check_nvfp4_cols, replay_scan_buffers
from precision_lab.kernels.common.tiles import (
    checkpoint_ptrs,
    quantize_tile,
    seq_head_group,
    store_flush_block,
    store_late_nvfp4,
    to_output,
)
from precision_lab.quant.philox import layer_seed

__all__ = ["gdn_replay_scan", "gdn_recurrent_scan", "L2NORM_EPS"]

#: precision of the in-window products: 3xTF32 runs on the tensor cores with fp32-level error
#: (the FMA path of "ieee" holds whole K-long operand rows per thread and spills).
DOT_PRECISION = tl.constexpr("tf32x3")
#: value rows per block of the state walk (a [32, 128] fp32 tile is 16 registers a thread at 4 warps)
ROW_BLOCK = 32
#: eps of the q/k L2 normalisation, as in the HF/fla GDN layers: x · rsqrt(Σx² + eps)
L2NORM_EPS = 1e-6


@triton.jit
def _l2norm_rows(x, L2NORM: tl.constexpr, EPS: tl.constexpr):
    if L2NORM:
        x = x * tl.rsqrt(tl.sum(x * x, axis=len(x.shape) - 1, keep_dims=True) + EPS)
    return x


# Stream lengths, counters and head counts change from call to call (every segment of a KL run):
# not specialising on them keeps one compiled kernel per format configuration.
@triton.jit(do_not_specialize=["T", "HK", "HV", "L", "n_windows", "seed", "event0"])
def gdn_replay_scan_fwd_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr,
    u_ptr, r_ptr, seq_ptr,
    T, HK, HV, K, V, L, n_windows, scale,
    seed, event0,
    UPD_FMT: tl.constexpr, UPD_SR: tl.constexpr, READ_FMT: tl.constexpr, READ_SR: tl.constexpr,
    SPLIT: tl.constexpr, RECOMPUTE: tl.constexpr, L2NORM: tl.constexpr, EPS: tl.constexpr,
    FOLD_PARTIAL: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
    NUM_R: tl.constexpr,
):
    # One program per (sequence, value head). The checkpoints live in u_ptr / r_ptr (initialised by
    # the wrapper) and are walked in row blocks of BLOCK_R value rows: state rows are independent in
    # the delta rule, and a [128, 128] fp32 matrix (two in split mode) does not fit in registers.
    i_bh = tl.program_id(0)
    i_b, i_h, i_hk, i_b64 = seq_head_group(i_bh, HV, HK)

    o_w = tl.arange(0, BLOCK_W)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    strict = o_w[None, :] < o_w[:, None]    # [j, s]: s < j
    causal = o_w[None, :] <= o_w[:, None]   # [j, s]: s ≤ j
    eye = tl.where(o_w[:, None] == o_w[None, :], 1.0, 0.0)
    p_head = i_bh.to(tl.int64) * V * K
    seq = tl.load(seq_ptr + i_b).to(tl.int64)
    # NVFP4 copies need the amax of the whole matrix: the fp32 result is parked in a buffer of an
    # NVFP4 copy during the row-block pass and rounded in a second pass.
    UPD_LATE: tl.constexpr = UPD_FMT == C_NVFP4
    READ_LATE: tl.constexpr = SPLIT and READ_FMT == C_NVFP4
    park_ptr, rd_ptr = checkpoint_ptrs(u_ptr, r_ptr, SPLIT, READ_LATE)

    for i_w in range(n_windows):
        t = i_w * L + o_w
        m_t = (o_w < L) & (t < T)
        t64 = t.to(tl.int64)
        p_bth = (i_b64 * T + t64) * HV + i_h
        p_btk = ((i_b64 * T + t64) * HK + i_hk)[:, None] * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_g = tl.load(g_ptr + p_bth, mask=m_t, other=0.0).to(tl.float32)
        b_beta = tl.load(beta_ptr + p_bth, mask=m_t, other=0.0).to(tl.float32)
        b_k = _l2norm_rows(tl.load(k_ptr + p_btk, mask=m_tk, other=0.0).to(tl.float32), L2NORM, EPS)
        b_q = _l2norm_rows(tl.load(q_ptr + p_btk, mask=m_tk, other=0.0).to(tl.float32), L2NORM, EPS) * scale

        b_c = tl.cumsum(b_g, 0)
        b_ec = tl.exp(b_c)
        b_dec = tl.exp(b_c[:, None] - b_c[None, :])   # only read where s ≤ j (finite there)
        # (I + A)⁻¹ by forward substitution: row i = e_i − Σ_{s<i} A[i,s] · row s.
        b_a = tl.where(strict, tl.dot(b_k, tl.trans(b_k), input_precision=DOT_PRECISION) * b_dec * b_beta[:, None], 0.0)
        b_ti = eye
        for i in range(1, L):
            a_i = tl.sum(tl.where(o_w[:, None] == i, b_a, 0.0), 0)
            b_ti = tl.where(o_w[:, None] == i, b_ti - tl.sum(a_i[:, None] * b_ti, 0)[None, :], b_ti)
        b_qk = tl.where(causal, tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION) * b_dec, 0.0)

        # A flush needs a full window; fp32 mode (FOLD_PARTIAL) also folds the stream's last chunk.
        n_in = tl.minimum(T - i_w * L, L)
        if FOLD_PARTIAL:
            n_fold = n_in
        else:
            n_fold = L
        flush = n_in == n_fold
        is_last = o_w == n_fold - 1
        c_last = tl.sum(b_g, 0)
        b_wk = tl.exp(c_last - b_c)                                   # decay to the window's end
        b_ql = tl.sum(tl.where(is_last[:, None], b_q, 0.0), 0)        # q of the flush token [K]
        b_kl = tl.sum(tl.where(is_last[:, None], b_k, 0.0), 0)        # k of the flush token [K]
        beta_l = tl.sum(tl.where(is_last, b_beta, 0.0), 0)
        event = (event0 + i_w).to(tl.int64)
        amax = tl.zeros([], dtype=tl.int32)

        for i_r in range(NUM_R):
            o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
            m_r = o_r < V
            m_rk = m_r[:, None] & m_k[None, :]
            p_st = p_head + o_r[:, None] * K + o_k[None, :]
            m_tr = m_t[:, None] & m_r[None, :]
            b_v = tl.load(v_ptr + p_bth[:, None] * V + o_r[None, :], mask=m_tr, other=0.0).to(tl.float32)
            b_rd = tl.load(rd_ptr + p_st, mask=m_rk, other=0.0)                                 # [R, K]
            # d's from the read copy (the buffer a non-flush step builds) and the outputs
            b_kr = tl.dot(b_k, tl.trans(b_rd), input_precision=DOT_PRECISION)                            # [W, R]
            b_d = tl.dot(b_ti, b_beta[:, None] * (b_v - b_ec[:, None] * b_kr), input_precision=DOT_PRECISION)
            b_o = b_ec[:, None] * tl.dot(b_q, tl.trans(b_rd), input_precision=DOT_PRECISION) \
                + tl.dot(b_qk, b_d, input_precision=DOT_PRECISION)
            if flush:
                if SPLIT:
                    b_up = tl.load(u_ptr + p_st, mask=m_rk, other=0.0)
                    if RECOMPUTE:
                        b_ku = tl.dot(b_k, tl.trans(b_up), input_precision=DOT_PRECISION)
                        b_d = tl.dot(b_ti, b_beta[:, None] * (b_v - b_ec[:, None] * b_ku), input_precision=DOT_PRECISION)
                    else:
                        # buffered fold: the flush token's own d reads U (with the buffered d's):
                        # its row of the solve with S₀ k swapped from R k to U k.
                        b_rkl = tl.sum(tl.where(is_last[:, None], b_kr, 0.0), 0)
                        b_fix = beta_l * tl.exp(c_last) * (b_rkl - tl.sum(b_up * b_kl[None, :], 1))
                        b_d = tl.where(is_last[:, None], b_d + b_fix[None, :], b_d)
                else:
                    b_up = b_rd
                b_s = b_up * tl.exp(c_last) + tl.dot(tl.trans(b_d * b_wk[:, None]), b_k, input_precision=DOT_PRECISION)
                b_o = tl.where(is_last[:, None], tl.sum(b_s * b_ql[None, :], 1)[None, :], b_o)
                amax = store_flush_block(b_s, m_rk, amax, u_ptr, r_ptr, park_ptr, p_st, seed, seq, i_h, event, o_r, K,
                                         UPD_FMT, UPD_SR, READ_FMT, READ_SR, SPLIT, UPD_LATE, READ_LATE,
                                         BLOCK_R, BLOCK_K)
            tl.store(o_ptr + p_bth[:, None] * V + o_r[None, :], to_output(b_o, o_ptr.dtype.element_ty), mask=m_tr)

        if UPD_LATE or READ_LATE:
            if flush:
                store_late_nvfp4(park_ptr, u_ptr, r_ptr, amax, p_head, V, K, o_k, m_k, seed, seq, i_h, event,
                                 UPD_SR, READ_SR, UPD_LATE, READ_LATE, BLOCK_R, BLOCK_K, NUM_R)
        tl.debug_barrier()


@triton.jit(do_not_specialize=["T", "HK", "HV", "seed", "event0"])
def gdn_recurrent_scan_fwd_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, s0_ptr, s_ptr, seq_ptr,
    T, HK, HV, K, V, scale, seed, event0,
    FMT: tl.constexpr, SR: tl.constexpr, L2NORM: tl.constexpr, EPS: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    # Program (sequence·head, row block): rows of the state are independent, so element formats
    # split a head over programs; NVFP4 (one scale per matrix) gets BLOCK_R = V, one program per head.
    i_bh = tl.program_id(0)
    i_rb = tl.program_id(1)
    i_b, i_h, i_hk, i_b64 = seq_head_group(i_bh, HV, HK)
    o_k = tl.arange(0, BLOCK_K)
    o_r = i_rb * BLOCK_R + tl.arange(0, BLOCK_R)
    m_k = o_k < K
    m_r = o_r < V
    m_rk = m_r[:, None] & m_k[None, :]
    p_state = i_bh.to(tl.int64) * V * K + o_r[:, None] * K + o_k[None, :]
    b_s = tl.load(s0_ptr + p_state, mask=m_rk, other=0.0)
    seq = tl.load(seq_ptr + i_b).to(tl.int64)

    for t in range(T):
        p_bth = (i_b64 * T + t) * HV + i_h
        p_btk = ((i_b64 * T + t) * HK + i_hk) * K + o_k
        b_g = tl.load(g_ptr + p_bth).to(tl.float32)
        b_beta = tl.load(beta_ptr + p_bth).to(tl.float32)
        b_k = _l2norm_rows(tl.load(k_ptr + p_btk, mask=m_k, other=0.0).to(tl.float32), L2NORM, EPS)
        b_q = _l2norm_rows(tl.load(q_ptr + p_btk, mask=m_k, other=0.0).to(tl.float32), L2NORM, EPS) * scale
        b_v = tl.load(v_ptr + p_bth * V + o_r, mask=m_r, other=0.0).to(tl.float32)
        b_alpha = tl.exp(b_g)
        b_d = b_beta * (b_v - b_alpha * tl.sum(b_s * b_k[None, :], 1))
        b_s = b_alpha * b_s + b_d[:, None] * b_k[None, :]
        b_o = tl.sum(b_s * b_q[None, :], 1)
        tl.store(o_ptr + p_bth * V + o_r, to_output(b_o, o_ptr.dtype.element_ty), mask=m_r)
        if FMT != C_FP32:
            b_s = quantize_tile(b_s, m_rk, seed, seq, i_h, (event0 + t).to(tl.int64), o_r, K, 0, FMT, SR, BLOCK_R, BLOCK_K)

    tl.store(s_ptr + p_state, b_s, mask=m_rk)


def _prep(q, k, v, g, beta, scale):
    Bsz, T, HK, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % HK:
        raise ValueError(f"GDN: {HV} value heads are not a multiple of {HK} key heads")
    scale = K ** -0.5 if scale is None else float(scale)
    return ([t.contiguous() for t in (q, k, v, g, beta)], (Bsz, T, HK, HV, K, V), scale)


def gdn_replay_scan(q, k, v, g, beta, u0, r0, *, scale: float | None, qk_l2norm: bool, L: int,
                    seq_ids: torch.Tensor, seed: int, layer: int, event0: int, upd_fmt: int, upd_sr: bool,
                    read_fmt: int, read_sr: bool, split: bool, recompute: bool, fold_partial: bool = False,
                    out=None):
    """Window-parallel ReplaySSM scan of one GDN segment starting on a window boundary.

    q, k [B,T,Hk,K]; v [B,T,Hv,V]; g, beta [B,T,Hv]; u0, r0 [B,Hv,V,K] fp32 (r0 read only if
    ``split``); seq_ids [B]; (seed, layer): SR key; event0: SR event of the first flush.
    out: optional (o, u, r) buffers to write into.
    Returns (o [B,T,Hv,V] in v's dtype, u, r [B,Hv,V,K] fp32; r is u unless ``split``).
    """
    (q, k, v, g, beta), (Bsz, T, HK, HV, K, V), scale = _prep(q, k, v, g, beta, scale)
    check_nvfp4_cols(K, upd_fmt, read_fmt)
    o, u, r = replay_scan_buffers(out, v, (Bsz, HV, V, K), u0, r0, split=split, L=L)
    block_r = min(ROW_BLOCK, max(16, triton.next_power_of_2(V)))
    gdn_replay_scan_fwd_kernel[(Bsz * HV,)](
        q, k, v, g, beta, o, u, r, seq_ids.to(device=v.device, dtype=torch.int64).contiguous(),
        T, HK, HV, K, V, L, triton.cdiv(T, L), scale, layer_seed(seed, layer), event0,
        UPD_FMT=upd_fmt, UPD_SR=upd_sr, READ_FMT=read_fmt, READ_SR=read_sr, SPLIT=split,
        RECOMPUTE=recompute, L2NORM=qk_l2norm, EPS=L2NORM_EPS, FOLD_PARTIAL=fold_partial,
        BLOCK_W=max(16, triton.next_power_of_2(L)), BLOCK_K=max(16, triton.next_power_of_2(K)),
        BLOCK_R=block_r, NUM_R=triton.cdiv(V, block_r),
        num_warps=8,  # fewest spills for K = V = 128 (ptxas -v, sm_90)
    )
    return o, u, r


def gdn_recurrent_scan(q, k, v, g, beta, s0, *, scale: float | None, qk_l2norm: bool, seq_ids: torch.Tensor,
                       seed: int, layer: int, event0: int, fmt: int, sr: bool, out=None):
    """Conventional decode over a GDN segment, state rounded to ``fmt`` after every token.

    Shapes as ``gdn_replay_scan``; s0 [B,Hv,V,K] fp32; out: optional (o, s) buffers.
    Returns (o [B,T,Hv,V], s [B,Hv,V,K] fp32).
    """
    (q, k, v, g, beta), (Bsz, T, HK, HV, K, V), scale = _prep(q, k, v, g, beta, scale)
    check_nvfp4_cols(K, fmt)
    if out is not None:
        o, s = out
    else:
        o = torch.empty_like(v)
        s = torch.empty(Bsz, HV, V, K, device=v.device, dtype=torch.float32)
    block_r = triton.next_power_of_2(V) if fmt == FMT_NVFP4 else min(ROW_BLOCK, triton.next_power_of_2(V))
    gdn_recurrent_scan_fwd_kernel[(Bsz * HV, triton.cdiv(V, block_r))](
        q, k, v, g, beta, o, s0.float().contiguous(), s, seq_ids.to(device=v.device, dtype=torch.int64).contiguous(),
        T, HK, HV, K, V, scale, layer_seed(seed, layer), event0,
        FMT=fmt, SR=sr, L2NORM=qk_l2norm, EPS=L2NORM_EPS,
        BLOCK_K=max(16, triton.next_power_of_2(K)), BLOCK_R=block_r,
        num_warps=4 if block_r * K <= 64 * 64 else 8,
    )
    return o, s
