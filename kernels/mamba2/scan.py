"""Teacher-forced Triton scans for Mamba-2 (the KL engine's fast path; docs/design.md §4, §7, §8).

Two kernels over the token stream of one segment (one launch per segment):

* ``mamba2_replay_scan_fwd_kernel`` — ReplaySSM (modes ``shared`` / ``split``, and ``fp32`` with an
  identity format). Window w holds tokens ``w·L .. w·L+L-1`` (the launch starts on a window
  boundary). With ``c_j = Σ_{s≤j} A·dt_s`` (cumulative log-decay inside the window) and
  ``u_s = dt_s x_s``:

      non-flush row j < L-1:  y_j = e^{c_j} (R C_j) + Σ_{s≤j} e^{c_j-c_s} (B_s·C_j) u_s      (read copy R)
      flush row j = L-1:      S   = e^{c_{L-1}} U + Σ_s e^{c_{L-1}-c_s} u_s B_sᵀ             (update ckpt U, fp32)
                              y   = S C_{L-1};  U ← round_H(S);  R ← round_F(S)

  then ``y += D x`` and ``y *= silu(z)``. A final partial window only produces outputs (its
  records stay in the caller's buffer), unless ``fold_partial`` (fp32 mode, where the window is
  just a chunk size: the last chunk is folded too and the kernel returns the state after T).
  Each flush is write event ``event0 + w`` of the SR counter layout (quant/philox.py), read copy
  with copy bit 1.

  One program per (sequence, head) carries the head across all windows. Its two checkpoints stay
  in the output buffers (L2-resident) and are walked in blocks of 32 head-dim rows, which are
  independent of each other: a [64, 128] fp32 state, two in split mode, does not fit in registers
  next to the window's tiles. NVFP4's per-matrix global scale needs the amax of the whole fold, so
  an NVFP4 copy is written in a second pass over the row blocks (fp32 fold parked in its buffer).
  The in-window products run as 3xTF32 ``tl.dot`` (fp32-level error on the tensor cores).

* ``mamba2_recurrent_scan_fwd_kernel`` — ``conventional`` mode: per token
  ``S ← e^{A dt} S + u Bᵀ``, ``y = S C`` from the fp32 state, then ``S ← round_F(S)`` (event
  ``event0 + t``). Programs = (sequence·head, row block) with the block in registers; NVFP4 takes
  the whole matrix per program (its scale is per matrix).

The torch references in ``scan_reference.py`` follow the same arithmetic order.
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

__all__ = ["mamba2_replay_scan", "mamba2_recurrent_scan"]

#: precision of the in-window products: 3xTF32 runs on the tensor cores with fp32-level error
#: (the FMA path of "ieee" holds whole K-long operand rows per thread and spills).
DOT_PRECISION = tl.constexpr("tf32x3")
#: head-dim rows per block of the state walk
ROW_BLOCK = 32


# Stream lengths, counters and head counts change from call to call (every segment of a KL run):
# not specialising on them keeps one compiled kernel per format configuration.
@triton.jit(do_not_specialize=["T", "H", "G", "L", "n_windows", "seed", "event0"])
def mamba2_replay_scan_fwd_kernel(
    x_ptr, dt_ptr, la_ptr, b_ptr, c_ptr, d_ptr, z_ptr, y_ptr,
    u_ptr, r_ptr, seq_ptr,
    T, H, G, P, N, L, n_windows,
    seed, event0,
    UPD_FMT: tl.constexpr, UPD_SR: tl.constexpr, READ_FMT: tl.constexpr, READ_SR: tl.constexpr,
    SPLIT: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
    FOLD_PARTIAL: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_R: tl.constexpr,
):
    # One program per (sequence, head). The checkpoints live in u_ptr / r_ptr (initialised by the
    # wrapper) and are walked in blocks of BLOCK_R head-dim rows, which are independent; the
    # window's B/C products are shared by all row blocks.
    i_bh = tl.program_id(0)
    i_b, i_h, i_g, i_b64 = seq_head_group(i_bh, H, G)

    o_w = tl.arange(0, BLOCK_W)
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < N
    causal = o_w[None, :] <= o_w[:, None]  # [j, s]: s ≤ j
    p_head = i_bh.to(tl.int64) * P * N
    if HAS_D:
        b_dd = tl.load(d_ptr + i_h).to(tl.float32)
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
        p_bth = (i_b64 * T + t64) * H + i_h
        b_dt = tl.load(dt_ptr + p_bth, mask=m_t, other=0.0)
        b_la = tl.load(la_ptr + p_bth, mask=m_t, other=0.0)
        p_btg = ((i_b64 * T + t64) * G + i_g)[:, None] * N + o_n[None, :]
        m_tn = m_t[:, None] & m_n[None, :]
        b_B = tl.load(b_ptr + p_btg, mask=m_tn, other=0.0).to(tl.float32)
        b_C = tl.load(c_ptr + p_btg, mask=m_tn, other=0.0).to(tl.float32)

        b_c = tl.cumsum(b_la, 0)                      # [W] log-decay from the window start
        b_ec = tl.exp(b_c)
        # intra-window weights e^{c_j-c_s} (B_s·C_j), s ≤ j
        b_cb = tl.dot(b_C, tl.trans(b_B), input_precision=DOT_PRECISION)
        b_cb = tl.where(causal, b_cb * tl.exp(b_c[:, None] - b_c[None, :]), 0.0)

        # A flush needs a full window; fp32 mode (FOLD_PARTIAL) also folds the stream's last chunk.
        n_in = tl.minimum(T - i_w * L, L)
        if FOLD_PARTIAL:
            n_fold = n_in
        else:
            n_fold = L
        flush = n_in == n_fold
        is_last = o_w == n_fold - 1
        c_last = tl.sum(b_la, 0)
        b_wk = b_dt * tl.exp(c_last - b_c)                       # dt_s e^{c_last - c_s}
        b_cl = tl.sum(tl.where(is_last[:, None], b_C, 0.0), 0)   # C of the flush token [N]
        event = (event0 + i_w).to(tl.int64)
        amax = tl.zeros([], dtype=tl.int32)

        for i_r in range(NUM_R):
            o_r = i_r * BLOCK_R + tl.arange(0, BLOCK_R)
            m_r = o_r < P
            m_rn = m_r[:, None] & m_n[None, :]
            m_tr = m_t[:, None] & m_r[None, :]
            p_st = p_head + o_r[:, None] * N + o_n[None, :]
            b_x = tl.load(x_ptr + p_bth[:, None] * P + o_r[None, :], mask=m_tr, other=0.0).to(tl.float32)
            b_rd = tl.load(rd_ptr + p_st, mask=m_rn, other=0.0)                                     # [R, N]
            b_y = tl.dot(b_cb, b_x * b_dt[:, None], input_precision=DOT_PRECISION) \
                + tl.dot(b_C, tl.trans(b_rd), input_precision=DOT_PRECISION) * b_ec[:, None]
            if flush:
                if SPLIT:
                    b_up = tl.load(u_ptr + p_st, mask=m_rn, other=0.0)
                else:
                    b_up = b_rd
                b_s = b_up * tl.exp(c_last) + tl.dot(tl.trans(b_x * b_wk[:, None]), b_B, input_precision=DOT_PRECISION)
                b_y = tl.where(is_last[:, None], tl.sum(b_s * b_cl[None, :], 1)[None, :], b_y)
                amax = store_flush_block(b_s, m_rn, amax, u_ptr, r_ptr, park_ptr, p_st, seed, seq, i_h, event, o_r, N,
                                         UPD_FMT, UPD_SR, READ_FMT, READ_SR, SPLIT, UPD_LATE, READ_LATE,
                                         BLOCK_R, BLOCK_N)
            if HAS_D:
                b_y += b_dd * b_x
            if HAS_Z:
                b_z = tl.load(z_ptr + p_bth[:, None] * P + o_r[None, :], mask=m_tr, other=0.0).to(tl.float32)
                b_y = b_y * (b_z * tl.sigmoid(b_z))
            tl.store(y_ptr + p_bth[:, None] * P + o_r[None, :], to_output(b_y, y_ptr.dtype.element_ty), mask=m_tr)

        if UPD_LATE or READ_LATE:
            if flush:
                store_late_nvfp4(park_ptr, u_ptr, r_ptr, amax, p_head, P, N, o_n, m_n, seed, seq, i_h, event,
                                 UPD_SR, READ_SR, UPD_LATE, READ_LATE, BLOCK_R, BLOCK_N, NUM_R)
        tl.debug_barrier()


@triton.jit(do_not_specialize=["T", "H", "G", "seed", "event0"])
def mamba2_recurrent_scan_fwd_kernel(
    x_ptr, dt_ptr, la_ptr, b_ptr, c_ptr, d_ptr, z_ptr, y_ptr,
    s0_ptr, s_ptr, seq_ptr,
    T, H, G, P, N,
    seed, event0,
    FMT: tl.constexpr, SR: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Program (sequence·head, row block): rows are independent, so element formats split a head
    # over programs; NVFP4 (one scale per matrix) gets BLOCK_R = P, one program per head.
    i_bh = tl.program_id(0)
    i_rb = tl.program_id(1)
    i_b, i_h, i_g, i_b64 = seq_head_group(i_bh, H, G)
    o_r = i_rb * BLOCK_R + tl.arange(0, BLOCK_R)
    o_n = tl.arange(0, BLOCK_N)
    m_r = o_r < P
    m_n = o_n < N
    m_rn = m_r[:, None] & m_n[None, :]
    p_state = i_bh.to(tl.int64) * P * N + o_r[:, None] * N + o_n[None, :]
    b_s = tl.load(s0_ptr + p_state, mask=m_rn, other=0.0)
    if HAS_D:
        b_dd = tl.load(d_ptr + i_h).to(tl.float32)
    seq = tl.load(seq_ptr + i_b).to(tl.int64)

    for t in range(T):
        p_bth = (i_b64 * T + t) * H + i_h
        b_dt = tl.load(dt_ptr + p_bth)
        b_la = tl.load(la_ptr + p_bth)
        b_x = tl.load(x_ptr + p_bth * P + o_r, mask=m_r, other=0.0).to(tl.float32)
        p_btg = ((i_b64 * T + t) * G + i_g) * N + o_n
        b_B = tl.load(b_ptr + p_btg, mask=m_n, other=0.0).to(tl.float32)
        b_C = tl.load(c_ptr + p_btg, mask=m_n, other=0.0).to(tl.float32)
        b_s = b_s * tl.exp(b_la) + (b_x * b_dt)[:, None] * b_B[None, :]
        b_y = tl.sum(b_s * b_C[None, :], 1)
        if HAS_D:
            b_y += b_dd * b_x
        if HAS_Z:
            b_z = tl.load(z_ptr + p_bth * P + o_r, mask=m_r, other=0.0).to(tl.float32)
            b_y = b_y * (b_z * tl.sigmoid(b_z))
        tl.store(y_ptr + p_bth * P + o_r, to_output(b_y, y_ptr.dtype.element_ty), mask=m_r)
        if FMT != C_FP32:
            b_s = quantize_tile(b_s, m_rn, seed, seq, i_h, (event0 + t).to(tl.int64), o_r, N, 0, FMT, SR, BLOCK_R, BLOCK_N)

    tl.store(s_ptr + p_state, b_s, mask=m_rn)


def _prep(x, dt, A, B, C, D, dt_bias, z):
    """Shared argument preparation: contiguous inputs, fp32 dt = softplus(dt + bias) and A·dt."""
    Bsz, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if H % G:
        raise ValueError(f"Mamba-2: {H} heads are not a multiple of {G} groups")
    dtf = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)
    dtf = torch.nn.functional.softplus(dtf).contiguous()
    la = (dtf * A.float()).contiguous()
    return (x.contiguous(), dtf, la, B.contiguous(), C.contiguous(),
            D.contiguous() if D is not None else None, z.contiguous() if z is not None else None, (Bsz, T, H, P, G, N))


def mamba2_replay_scan(x, dt, A, B, C, D, dt_bias, z, u0, r0, *, L: int, seq_ids: torch.Tensor,
                       seed: int, layer: int, event0: int, upd_fmt: int, upd_sr: bool, read_fmt: int, read_sr: bool,
                       split: bool, fold_partial: bool = False, out=None):
    """Window-parallel ReplaySSM scan of one segment that starts on a window boundary.

    x [B,T,H,P], dt [B,T,H] raw, A [H], B/C [B,T,G,N], D [H]|None, dt_bias [H]|None, z [B,T,H,P]|None;
    u0, r0: update checkpoint / read copy [B,H,P,N] fp32 (r0 ignored unless ``split``);
    seq_ids [B] int64 (SR counters); seed, layer: the SR key (quant/philox.py ``layer_seed``);
    event0: SR write event of the first flush; out: optional (y, u, r) buffers to write into.
    Returns (y [B,T,H,P] in x's dtype, u, r [B,H,P,N] fp32; r is u unless ``split``).
    """
    x, dtf, la, B, C, D, z, (Bsz, T, H, P, G, N) = _prep(x, dt, A, B, C, D, dt_bias, z)
    check_nvfp4_cols(N, upd_fmt, read_fmt)
    y, u, r = replay_scan_buffers(out, x, (Bsz, H, P, N), u0, r0, split=split, L=L)
    block_r = min(ROW_BLOCK, max(16, triton.next_power_of_2(P)))
    mamba2_replay_scan_fwd_kernel[(Bsz * H,)](
        x, dtf, la, B, C, D if D is not None else x, z if z is not None else x, y,
        u, r, seq_ids.to(device=x.device, dtype=torch.int64).contiguous(),
        T, H, G, P, N, L, triton.cdiv(T, L), layer_seed(seed, layer), event0,
        UPD_FMT=upd_fmt, UPD_SR=upd_sr, READ_FMT=read_fmt, READ_SR=read_sr, SPLIT=split,
        HAS_D=D is not None, HAS_Z=z is not None, FOLD_PARTIAL=fold_partial,
        BLOCK_W=max(16, triton.next_power_of_2(L)), BLOCK_R=block_r, BLOCK_N=max(16, triton.next_power_of_2(N)),
        NUM_R=triton.cdiv(P, block_r),
        num_warps=8,
    )
    return y, u, r


def mamba2_recurrent_scan(x, dt, A, B, C, D, dt_bias, z, s0, *, seq_ids: torch.Tensor, seed: int, layer: int,
                          event0: int, fmt: int, sr: bool, out=None):
    """Conventional decode over a segment: the state is rounded to ``fmt`` after every token.

    Shapes as ``mamba2_replay_scan``; s0 [B,H,P,N] fp32; event0: SR event of the first token's write;
    out: optional (y, s) buffers. Returns (y [B,T,H,P], s [B,H,P,N] fp32).
    """
    x, dtf, la, B, C, D, z, (Bsz, T, H, P, G, N) = _prep(x, dt, A, B, C, D, dt_bias, z)
    check_nvfp4_cols(N, fmt)
    if out is not None:
        y, s = out
    else:
        y = torch.empty_like(x)
        s = torch.empty(Bsz, H, P, N, device=x.device, dtype=torch.float32)
    block_r = triton.next_power_of_2(P) if fmt == FMT_NVFP4 else min(ROW_BLOCK, triton.next_power_of_2(P))
    mamba2_recurrent_scan_fwd_kernel[(Bsz * H, triton.cdiv(P, block_r))](
        x, dtf, la, B, C, D if D is not None else x, z if z is not None else x, y,
        s0.float().contiguous(), s, seq_ids.to(device=x.device, dtype=torch.int64).contiguous(),
        T, H, G, P, N, layer_seed(seed, layer), event0,
        FMT=fmt, SR=sr, HAS_D=D is not None, HAS_Z=z is not None,
        BLOCK_R=block_r, BLOCK_N=max(16, triton.next_power_of_2(N)),
        num_warps=4 if block_r * N <= 64 * 64 else 8,
    )
    return y, s
