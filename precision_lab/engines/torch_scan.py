"""The ``scan`` engine of ``run_layer``: window-parallel teacher forcing in torch (docs/design.md §8).

Under teacher forcing the whole token stream of a layer is known, so the ReplaySSM decode of
docs/design.md §4 can be evaluated a window at a time instead of a token at a time. The semantics are
exactly those of the ``decode`` engine (``precision_lab.engines.torch_decode``, the ground truth): which state
each quantity comes from, when state is written, which SR bits each write draws. Only the
arithmetic order of the *outputs* (and of the delta rule's d's) differs, so the two engines agree
to the rounding of the compute dtype. This module is the reference of the Triton scan kernel and
what the KL engine runs on CPU.

One window, in the notation of ``recurrences/_core.py`` (records j = 0..n-1 of the window,
cumulative log decay c_j from the window start, checkpoint S₀):

    y_j = S₀ (e^{c_j} ⊙ q_j) + Σ_{i≤j} u_i ((e^{c_j − c_i} ⊙ k_i)·q_j)         (output-only form)

which for all positions at once is the matrix form ``Y = S₀ (e^{c} ⊙ Q) + U (M ⊙ KᵀQ)`` with the
causal decay mask M[j, i] = e^{c_j − c_i} (i ≤ j; per channel for KDA). Non-flush positions take S₀ =
the read copy R; the flush position (j = L-1) takes the fp32 fold ``S = fold(U, window)`` of the
update checkpoint U and outputs ``S q``; then ``U = round_H(S)``, ``R = round_F(S)`` (one SR event).

The delta rule (GDN, KDA) makes u_j = d_j depend on the state. Over a window the d's are the unit
lower-triangular system

    (I + A) d = β ⊙ (v − S₀ (e^{c} ⊙ k)),      A[j, i] = β_j (e^{c_j − c_i} ⊙ k_i)·k_j  (i < j)

solved once per window (the inverse (I + A)^{-1} depends only on the inputs, so it is computed for a
whole block of windows at once). Which S₀ the d's come from follows ``engines/torch_decode.py``:
    non-flush d's (both folds):  from R (read copy + the window's earlier d's);
    flush, gdn_fold="buffered":  the flush token's d from U with the buffered (R-based) d's;
                                 the fold uses those buffered d's;
    flush, gdn_fold="recompute": every d of the window re-solved from U; the fold uses those.
In shared mode R = U, so both folds are the same and the buffered d's are used.

Where the state is exactly the decode engine's. The fold is ``_core.fold`` called on the same
records with the same shapes as the decode engine, and the cumulative decays are ``_core.cumulative``
(the same sequential sums), so for Mamba-2 — whose records do not depend on the state — every
ReplaySSM checkpoint (shared, split) equals the decode engine's bit for bit, in every format, SR
included; so does every conventional step with a lossy format (same step code).
For GDN/KDA the d's come from the triangular solve instead of the decode engine's one-by-one
readouts, so they differ in the last bits. Lossless storage keeps that at rounding level. A lossy
cast, though, occasionally lands on the other side of a rounding boundary (in float64 this never
happens in practice: the tests see identical stored bits); in float32 it does, and from then on the
two engines are two different samples of the same stochastic process — over thousands of tokens
their outputs can separate by the size of the format's error (tests/test_scan.py checks float64
exactly and float32 for lossless policies; the simulator's window means from the two engines
agree to about three digits).

Conventional modes (``fp32``, ``conventional:F``): with the identity format (``fp32``, stored as is
in the compute dtype, see ``state.StateWriter``) the stream is one unquantized recurrence and runs
in the chunked form (KDA: the plain recurrence); a lossy F writes every step, so it runs the decode
step token by token (the same code as the decode engine).
"""
from __future__ import annotations

import torch

from precision_lab.layer import LayerInputs, LayerStats
from precision_lab.policy import StatePolicy
from precision_lab.recurrences import _core
from precision_lab.recurrences import prepare as prepare_inputs
from precision_lab.state import LayerState, StateWriter, start_state

IMPLEMENTATION = "torch-scan"

# Full windows whose input-only quantities (decay masks, KᵀQ, triangular inverses) are computed in
# one batch. Bounded so that KDA's per-channel masks [B, nW, L, L, H, C] stay a few tens of MB.
_BLOCK_ELEMENTS = 1 << 23
# Chunk of the unquantized (identity-storage) conventional path; 16 was fastest on CPU (T = 4096).
_CHUNK = 16


# ---------------------------------------------------------------------------------------------
# Input-only window quantities (no state involved)
# ---------------------------------------------------------------------------------------------
def _pair_weights(c: torch.Tensor, q: torch.Tensor, k: torch.Tensor, delta: bool):
    """Decay-weighted products of a window, for every window of a block:

        KQ[j, i] = (e^{c_j − c_i} ⊙ k_i)·q_j  for i ≤ j,      KK[j, i] = (e^{c_j − c_i} ⊙ k_i)·k_j  for i < j,

    zero elsewhere. c [B,W,n,H,Ca], q/k [B,W,n,H,C]. Returns (KQ, KK or None), each [B,W,H,n,n] (rows j).
    The decays are exponentials of differences (≤ 0 on the causal part), never ratios, so strongly
    decaying channels cannot overflow.
    """
    n = c.shape[2]
    causal = torch.ones(n, n, dtype=torch.bool, device=c.device).tril()
    strict = causal.tril(-1)
    diff = c.unsqueeze(3) - c.unsqueeze(2)                               # [B,W,j,i,H,Ca] = c_j − c_i
    decay = diff.masked_fill(~causal[:, :, None, None], float("-inf")).exp()
    if c.shape[-1] == 1:  # one decay per head: the dot products factor out of the mask
        dec = decay[..., 0].permute(0, 1, 4, 2, 3)                       # [B,W,H,j,i]
        kq = torch.einsum("bwjhc,bwihc->bwhji", q, k) * dec
        kk = torch.einsum("bwjhc,bwihc->bwhji", k, k) * (dec * strict) if delta else None
        return kq, kk
    dk = decay * k.unsqueeze(2)                                          # e^{c_j − c_i} ⊙ k_i
    kq = torch.einsum("bwjihc,bwjhc->bwhji", dk, q)
    kk = torch.einsum("bwjihc,bwjhc->bwhji", dk, k) * strict if delta else None
    return kq, kk


class _Block:
    """Records of nW windows of n positions each, with the quantities that need no state.

    Tensors carry a window axis: a [B,nW,n,H,Ca], k/q [B,nW,n,H,C], u/v [B,nW,n,H,R], beta [B,nW,n,H].
    The first ``n0`` positions of every window are already-buffered records (known u / d, no query).
    """

    def __init__(self, a, k, q, u, v, beta, n0: int):
        self.a, self.k, self.q, self.u, self.v, self.beta, self.n0 = a, k, q, u, v, beta, n0
        self.delta = v is not None
        self.c = _core.cumulative(a, dim=2)                                 # same sums as decode
        self.ec = self.c.exp()
        self.kq, kk = _pair_weights(self.c, q, k, self.delta)               # [B,W,H,n,n]
        self.ecq = self.ec * q                                              # e^{c_j} ⊙ q_j
        # per-window records in the decode engine's layout [B, n, H, ...], contiguous (window-major)
        names = ("a", "k", "c") + (("v", "beta") if self.delta else ("u",))
        self.rec = {name: getattr(self, name).transpose(0, 1).contiguous() for name in names}
        if not self.delta:  # Mamba-2: the in-window part of every output needs no state
            self.intra = self.kq @ u.permute(0, 1, 3, 2, 4)                 # [B,W,H,n,R]
        if self.delta:
            self.A = kk * beta.permute(0, 1, 3, 2).unsqueeze(-1)            # A[j, i] = β_j (…)
            self.eck = self.ec * k                                          # e^{c_j} ⊙ k_j
            n = k.shape[2]
            eye = torch.eye(n - n0, dtype=k.dtype, device=k.device)
            # d's of the new positions given the known prefix: (I + A_nn) d_n = rhs_n − A_no d_o
            self.inv_new = torch.linalg.solve_triangular(eye + self.A[..., n0:, n0:], eye.expand_as(
                self.A[..., n0:, n0:]), upper=False, unitriangular=True)
            self._inv_all = None

    @property
    def inv_all(self) -> torch.Tensor:
        """(I + A)^{-1} over all positions (the recompute fold re-solves the buffered d's too)."""
        if self.n0 == 0:
            return self.inv_new
        if self._inv_all is None:
            n = self.k.shape[2]
            eye = torch.eye(n, dtype=self.k.dtype, device=self.k.device)
            self._inv_all = torch.linalg.solve_triangular(eye + self.A, eye.expand_as(self.A), upper=False,
                                                          unitriangular=True)
        return self._inv_all

    def window(self, w: int) -> dict[str, torch.Tensor]:
        """Records of window w in the decode engine's layout [B, n, H, ...], contiguous."""
        return {name: t[w] for name, t in self.rec.items()}


def _state_q(S0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """S₀ x_j for every position: S0 [B,H,R,C], x [B,n,H,C] → [B,H,n,R]."""
    return torch.einsum("bhrc,bnhc->bhnr", S0, x)


def _deltas(blk: _Block, w: int, S0: torch.Tensor, d_old: torch.Tensor | None) -> torch.Tensor:
    """d's of window w's new positions from checkpoint S0, given the prefix d_old [B,H,n0,R]: [B,H,n-n0,R]."""
    n0 = blk.n0
    beta = blk.beta[:, w].permute(0, 2, 1).unsqueeze(-1)                     # [B,H,n,1]
    rhs = beta * (blk.v[:, w].permute(0, 2, 1, 3) - _state_q(S0, blk.eck[:, w]))
    rhs = rhs[:, :, n0:]
    if n0:
        rhs = rhs - blk.A[:, w, :, n0:, :n0] @ d_old
    return blk.inv_new[:, w] @ rhs


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------
class _Scan:
    """The running state of one ``run_layer_scan`` call (mirrors ``engines.decode.ReplaySSM``'s counters)."""

    def __init__(self, st: LayerState, delta: bool):
        self.policy = st.policy
        self.st = st
        self.delta = delta
        self.U, self.R = st.update, st.read
        self.writes = st.writes
        self.step = st.step
        self.prefill_tokens = st.prefill_tokens
        self.writer = StateWriter(self.policy, st.layer_index, st.seq_ids)
        self.codes = (st.update_codes, st.read_codes)
        self.L = self.policy.buffer_len
        self.records = dict(st.records)
        self.window_len = st.window
        self.state_writes = self.copy_writes = self.flushes = self.record_writes = 0

    def _write(self, S: torch.Tensor, where: str) -> None:
        self.U, self.R = self.writer.write(S, self.writes + 1, where)
        self.codes = self.writer.last_codes
        self.writes += 1
        self.state_writes += 1
        self.copy_writes += self.writer.copies

    # -- prefill and the conventional modes ----------------------------------------------------
    def prefill(self, p: _core.Prepared) -> torch.Tensor:
        y, S = _core.chunked(p, self.U, 64)  # the decode engine's prefill, call for call
        self._write(S, f"prefill of {p.k.shape[1]} tokens")
        self.prefill_tokens += p.k.shape[1]
        return y

    def conventional(self, p: _core.Prepared) -> tuple[torch.Tensor, str]:
        T = p.k.shape[1]
        if self.policy.mode == "fp32":
            # identity storage: every step stores its unrounded result, so the stream is one
            # unquantized recurrence; count the T writes it stands for. Scalar decays run chunked;
            # KDA's per-channel decay makes chunk masks [n, n, K] cost more than the plain recurrence
            # (which is the decode engine's arithmetic exactly).
            if p.a.shape[-1] == 1:
                y, S = _core.chunked(p, self.U, _CHUNK)
            else:
                y, S = _core.recurrent(p, self.U)
            self.U = self.R = S
            self.writes += T
            self.state_writes += T
            self.copy_writes += T
            self.step += T
            return y, "conventional-chunked"
        B, _, H, R, _ = p.shape
        y = p.k.new_empty(B, T, H, R)  # one buffer: a list of T small outputs fragments the heap
        for t in range(T):
            S, y[:, t], _ = _core.step(self.U, p.token(t))
            self._write(S, f"decode step {self.step}")
            self.step += 1
        return y, "conventional-loop"

    # -- ReplaySSM windows -----------------------------------------------------------------------
    def _block(self, p: _core.Prepared, t0: int, nW: int, n: int, old: dict | None) -> _Block:
        """nW windows of n new tokens starting at token t0 (old: buffered records before them, nW = 1)."""
        B, _, H, R, C = p.shape

        def win(x: torch.Tensor | None, name: str) -> torch.Tensor | None:
            if x is None:
                return None
            x = x[:, t0:t0 + nW * n]
            x = x.reshape(B, nW, n, *x.shape[2:])
            if old is not None and name in old:
                x = torch.cat([old[name].unsqueeze(1), x], 2)
            return x

        q = win(p.q, "q")
        n0 = 0 if old is None else old["k"].shape[1]
        if n0:  # buffered records have no query (no output is due for them)
            q = torch.cat([q.new_zeros(B, 1, n0, H, C), q], 2)
        return _Block(win(p.a, "a"), win(p.k, "k"), q, win(p.u, "u"), win(p.v, "v"), win(p.beta, "beta"), n0)

    def run_window(self, blk: _Block, w: int, flush: bool, d_old: torch.Tensor | None) -> torch.Tensor:
        """Window w of the block; returns the outputs of its new positions [B, n-n0, H, R]."""
        n0, n = blk.n0, blk.k.shape[2]
        rec = blk.window(w)
        split = self.policy.mode == "split"
        last = n - 1 if flush else n                                       # non-flush positions n0..last-1
        # outputs (and d's) of the non-flush positions, from the read copy
        if self.delta:
            d_new = _deltas(blk, w, self.R, d_old)                          # [B,H,n-n0,R]
            d_all = d_new if not n0 else torch.cat([d_old, d_new], 2)       # [B,H,n,R]
            y = _state_q(self.R, blk.ecq[:, w]) + blk.kq[:, w] @ d_all      # [B,H,n,R]
        else:
            y = _state_q(self.R, blk.ecq[:, w]) + blk.intra[:, w]
        y = y[:, :, n0:last]
        if flush:
            if not self.delta:
                u = rec["u"]
            elif not split or self.policy.gdn_fold == "buffered":
                if split:  # the flush token's own d from U, over the buffered (read-based) d's
                    eck = blk.eck[:, w, n - 1]                               # [B,H,C]
                    s0k = (self.U @ eck.unsqueeze(-1)).squeeze(-1)          # [B,H,R]
                    a_row = blk.A[:, w, :, n - 1, :n - 1].unsqueeze(-2)      # [B,H,1,n-1]
                    hist = (a_row @ d_all[:, :, :n - 1]).squeeze(-2)
                    d_last = rec["beta"][:, n - 1].unsqueeze(-1) * (rec["v"][:, n - 1] - s0k) - hist
                    d_all = torch.cat([d_all[:, :, :n - 1], d_last.unsqueeze(2)], 2)
                u = d_all.permute(0, 2, 1, 3)
            else:  # recompute: every d of the window from the update checkpoint
                beta = blk.beta[:, w].permute(0, 2, 1).unsqueeze(-1)
                rhs = beta * (blk.v[:, w].permute(0, 2, 1, 3) - _state_q(self.U, blk.eck[:, w]))
                u = (blk.inv_all[:, w] @ rhs).permute(0, 2, 1, 3)
            S = _core.fold(self.U, rec["k"], u.contiguous(), rec["c"])
            y_flush = (S @ blk.q[:, w, n - 1].unsqueeze(-1)).squeeze(-1)     # output from the fp32 result
            self._write(S, f"decode step {self.step + n - n0 - 1} (flush)")
            self.flushes += 1
            y = torch.cat([y, y_flush.unsqueeze(2)], 2)
            self.records = {}
            self.window_len = 0
        else:
            keep = dict(rec)
            keep.pop("c")
            if self.delta:  # the buffered d's are the read-copy ones (engines/torch_decode.py)
                keep["u"] = d_all.permute(0, 2, 1, 3).contiguous()
            self.records = keep
            self.window_len = n
        self.record_writes += last - n0
        self.step += n - n0
        return y.permute(0, 2, 1, 3)

    def replay(self, p: _core.Prepared) -> torch.Tensor:
        B, T, H, R, C = p.shape
        ys: list[torch.Tensor] = []
        t = 0
        L = self.L
        if self.window_len and T:  # finish the window a previous segment left open
            n = min(L - self.window_len, T)
            old = {name: self.records[name] for name in ("a", "k", "u", "v", "beta") if name in self.records}
            blk = self._block(p, 0, 1, n, old)
            d_old = old["u"].permute(0, 2, 1, 3) if self.delta else None
            ys.append(self.run_window(blk, 0, self.window_len + n == L, d_old))
            t = n
        Ca = p.a.shape[-1]
        per_window = B * L * L * H * Ca + B * L * H * (R + C)
        block = max(1, _BLOCK_ELEMENTS // per_window)
        while T - t >= L:  # full windows, a block at a time
            nW = min(block, (T - t) // L)
            blk = self._block(p, t, nW, L, None)
            for w in range(nW):
                ys.append(self.run_window(blk, w, True, None))
            t += nW * L
        if t < T:  # a partial window left open for the next segment
            blk = self._block(p, t, 1, T - t, None)
            ys.append(self.run_window(blk, 0, False, None))
        return torch.cat(ys, 1) if ys else p.k.new_zeros(B, 0, H, R)

    def to_state(self) -> LayerState:
        st = self.st
        recs = {name: t.clone() for name, t in self.records.items()} if self.policy.is_replay else {}
        if self.policy.is_replay and not recs:  # an empty window keeps the record layout
            recs = {name: t[:, :0].clone() for name, t in st.records.items()}
        return LayerState(st.kind, self.policy, self.U, self.R, recs, self.window_len, self.step, self.writes,
                          st.seq_ids, st.layer_index, self.prefill_tokens, *self.codes)


def run_layer_scan(inputs: LayerInputs, policy: StatePolicy, *, initial_state: torch.Tensor | None = None,
                   prefill_len: int = 0, state: LayerState | None = None, layer_index: int = 0,
                   seq_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, LayerStats]:
    """The ``scan`` engine of ``run_layer`` (same arguments and results; see
    ``precision_lab.layer.run_layer``). Outputs y [B,T,H,R] in the inputs' dtype; the returned
    ``stats.state`` continues the stream under any engine."""
    policy = StatePolicy.parse(policy)
    p = prepare_inputs(inputs)
    T_all = p.k.shape[1]
    if not isinstance(prefill_len, int) or prefill_len < 0:
        raise ValueError(f"prefill_len must be an integer >= 0, got {prefill_len!r}")
    if prefill_len > T_all:
        raise ValueError(f"prefill_len {prefill_len} exceeds the {T_all} input tokens")
    st = start_state(p, policy, initial_state=initial_state, state=state, layer_index=layer_index, seq_ids=seq_ids)
    m = _Scan(st, p.delta)
    parts = []
    if prefill_len:
        parts.append(m.prefill(p.slice(0, prefill_len)))
    rest = p.slice(prefill_len, T_all)
    if policy.is_replay:
        parts.append(m.replay(rest))
        path = "replay-window"
    else:
        y, path = m.conventional(rest)
        parts.append(y)
    y = torch.cat(parts, 1)
    stats = LayerStats(state_writes=m.state_writes, record_writes=m.record_writes, engine="scan",
                       implementation=f"{IMPLEMENTATION}:{path}", state=m.to_state(), copy_writes=m.copy_writes,
                       flushes=m.flushes, extra={"mode": policy.mode})
    return p.finish(y), stats


__all__ = ["run_layer_scan"]
