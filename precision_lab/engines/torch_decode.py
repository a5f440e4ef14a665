"""The ``decode`` engine of ``run_layer``: the ReplaySSM state machine token by token in torch
(docs/design.md §4).

Ground truth for every other engine. The state it reads and writes, the casts into the stored
formats and the flush schedule are ``precision_lab.state``'s. The math of the recurrences is in
``precision_lab.recurrences._core`` (step, output-only ``readout``, ``fold``, ``delta``); this
module fixes *which* state each quantity is computed from, when state is written, and which SR bits
each write draws.

State of one layer (per sequence, all heads, lockstep over the batch):
    U  update checkpoint [B,H,R,C], values representable in the update format H
    R  read copy          [B,H,R,C], values representable in the read format F (U itself unless split)
    ring of next_pow2(L) record slots, a base pointer and the window length W (records 0..W-1)
    writes (state write events so far), step (decode tokens so far)

Storage casts (``state.StateWriter``). Every write casts ONE result S (compute dtype) into the stored
copies: U = round_H(S) (SR copy 0) and, in split mode, R = round_F(S) (SR copy 1); single-copy modes
set R = U. SR bits: ``quant/philox.state_rbits(seed, layer, seq_id, head, event, (R, C), copy)``
with event 0 for the initial cast and ``1 + writes`` for every later write; only formats with
``stochastic=True`` draw bits. A lossy format receives the fp32 value of S (``S.float()``) and its
float32 output is stored in the compute dtype. **The format named "fp32" is the identity in every
compute dtype**: in float32 that is exact fp32 storage; in float64 it keeps float64, so float64
runs of ``fp32`` / ``shared:fp32`` / ``split:fp32/fp32`` test the state machine's algebra without
fp32 rounding (the equivalence tests rely on this). A non-finite stored state raises
``FloatingPointError`` naming layer, step, event and policy.

Decode modes (one token per step; W = records in the window before the step):
    fp32, conventional:  S_t = step(U, x_t) in the compute dtype; y_t = S_t q_t (from the unrounded
                         S_t); write S_t (one event per step). No records.
    shared, split, W < L-1 (non-flush): output-only. The record of x_t is appended at position W;
                         y_t = readout(R, records 0..W, q_t). No state write.
    shared, split, W = L-1 (flush): S = fold(U, records 0..L-2 and x_t's record) in the compute
                         dtype; y_t = S q_t; write S (U and R from the same S); W = 0. The flush
                         token's own record is folded directly and never written to the ring.

The delta rule (GDN/KDA): which state each d is computed from.
    non-flush step (both folds):  d_t = δ(R, buffered d_0..d_{W-1})   (read copy + buffer)
                                  and that d_t is the one buffered (and used in y_t).
    flush, gdn_fold="buffered":   S = fold(U, [buffered d_0..d_{L-2}, d_t]) with
                                  d_t = δ(U, buffered d_0..d_{L-2})  — read-copy error in the buffered
                                  d's enters the recurrence (what a single-copy kernel does).
    flush, gdn_fold="recompute":  d'_0..d'_{L-2} recomputed one by one, d'_j = δ(U, d'_0..d'_{j-1})
                                  (``_core.window_deltas``), d_t = δ(U, d'_0..d'_{L-2}),
                                  S = fold(U, [d'_0..d'_{L-2}, d_t]). Only U feeds the recurrence.
    Here δ(S₀, d_0..d_{j-1}) = β_j (v_j − readout(S₀, records 0..j-1, k_j)) (``_core.delta``), with the
    cumulative decays c_j = fl(c_{j-1} + a_j) of the window (``_core.cumulative``). In shared mode
    R = U and the recomputation is the same arithmetic, so both folds give identical bits.
    Prefill (any fold): the chunked form from U; its d's never enter the buffer.

Prefill: the first ``prefill_len`` tokens run the chunked form (``_core.chunked``, chunks of 64) from
U; outputs come from that unrounded computation; its final S is written once (U and R from the same
S). Decode windows start after it (W = 0).

Speculative decoding (``Drafts``): T = 1 + n tokens per round, logical window L = B + T with history
block B ≥ T (so L ≥ 2T), ring of next_pow2(L) slots. A round with pointer W:
    non-flush (W + 2T ≤ L): token j of the round (j = 0..T-1) gets its record at position W + j
        (d_j = δ(R, records 0..W+j-1) for GDN/KDA) and y_j = readout(R, records 0..W+j, q_j);
        then W += a (a ≥ 1 accepted). Records past W are left in place and overwritten later.
    flush (W + 2T > L): S = fold(U, committed records 0..W-1) (d's per ``gdn_fold`` as above), the
        ring base moves by W, token j gets its record at new position j (d_j = δ(S, drafts 0..j-1)),
        y_j = readout(S, drafts 0..j, q_j) from the unrounded S; write S; W = a. Nothing from a draft
        enters the checkpoint: after a flush it holds exactly the committed tokens.
    fp32 / conventional with drafts — the snapshot-per-draft baseline: token j steps from snapshot
        j-1 (the stored state for j = 0) and its result is written as snapshot j (T writes per
        round); the commit keeps snapshot a-1.
"""
from __future__ import annotations

import torch

from precision_lab.layer import Drafts, LayerInputs, LayerStats
from precision_lab.policy import StatePolicy
from precision_lab.recurrences import _core
from precision_lab.recurrences import prepare as prepare_inputs
from precision_lab.state import (
    LayerState,
    StateWriter,
    commit_window,
    is_flush,
    is_spec_flush,
    next_pow2,
    spec_rounds,
    start_state,
)

IMPLEMENTATION = "torch-reference"


# ---------------------------------------------------------------------------------------------
# The record ring
# ---------------------------------------------------------------------------------------------
class RecordRing:
    """next_pow2(L) slots of token records, addressed by logical position (base + pos) mod slots.

    Fields per record (without the slot axis): a [B,H,Ca], k [B,H,C], u [B,H,R] (+ v [B,H,R],
    beta [B,H] for the delta rule). ``writes`` counts records written (the measured record writes).
    """

    def __init__(self, L: int, template: dict[str, torch.Tensor]):
        self.slots = next_pow2(L)
        self.L = L
        self.buf = {name: t.new_zeros(t.shape[0], self.slots, *t.shape[1:]) for name, t in template.items()}
        self.base = 0
        self.window = 0
        self.writes = 0

    def write(self, pos: int, rec: dict[str, torch.Tensor]) -> None:
        if not 0 <= pos < self.L:
            raise RuntimeError(f"record position {pos} outside the logical window L = {self.L}")
        slot = (self.base + pos) % self.slots
        for name, buf in self.buf.items():
            buf[:, slot] = rec[name]
        self.writes += 1

    def read(self, n: int) -> dict[str, torch.Tensor]:
        """Records at logical positions 0..n-1, each [B, n, ...] (contiguous)."""
        idx = (self.base + torch.arange(n)) % self.slots
        return {name: buf[:, idx] for name, buf in self.buf.items()}

    def advance(self, m: int) -> None:
        """Drop the first m logical positions (they were folded into the checkpoint)."""
        self.base = (self.base + m) % self.slots


def _cat(hist: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([hist, x.unsqueeze(1)], 1)


# ---------------------------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------------------------
class ReplaySSM:
    """One layer's decode state under a policy; ``decode(tok)`` and ``spec_round(toks, a)``.

    Tokens are dicts from ``Prepared.token(t)``. Counters: ``state_writes``, ``copy_writes``,
    ``flushes`` (incremented where the state is written), ``ring.writes`` (records).
    ``trace``: optional list receiving (tokens in the checkpoint incl. prefill, U clone) after every
    flush/prefill write — tests compare these checkpoints with the conventional state.
    """

    def __init__(self, state: LayerState, delta: bool, trace: list | None = None):
        self.policy = state.policy
        self.kind = state.kind
        self.delta = delta
        self.U, self.R = state.update, state.read
        self.writes = state.writes
        self.step = state.step
        self.prefill_tokens = state.prefill_tokens
        self.layer_index = state.layer_index
        self.seq_ids = state.seq_ids
        self.writer = StateWriter(self.policy, state.layer_index, state.seq_ids)
        self.codes = (state.update_codes, state.read_codes)
        self.L = self.policy.buffer_len
        self.replay = self.policy.is_replay
        self.trace = trace
        self.state_writes = self.copy_writes = self.flushes = 0
        B, H, R, C = self.U.shape
        Ca = C if self.kind == "kda" else 1
        z = self.U.new_zeros
        template = {"a": z(B, H, Ca), "k": z(B, H, C), "u": z(B, H, R)}
        if delta:
            template.update(v=z(B, H, R), beta=z(B, H))
        self.ring = RecordRing(self.L, template)
        W = state.window
        if W:
            if not self.replay:
                raise ValueError("a conventional-mode LayerState cannot hold window records")
            for j in range(W):
                self.ring.write(j, {name: t[:, j] for name, t in state.records.items()})
            self.ring.window = W
        self.ring.writes = 0  # restoring a segment's buffer is not a record write of this call

    # -- writes ------------------------------------------------------------------------------
    def _write(self, S: torch.Tensor, where: str) -> None:
        event = self.writes + 1
        self.U, self.R = self.writer.write(S, event, where)
        self.codes = self.writer.last_codes
        self.writes += 1
        self.state_writes += 1
        self.copy_writes += self.writer.copies

    def _record(self, tok: dict[str, torch.Tensor], u: torch.Tensor) -> dict[str, torch.Tensor]:
        rec = {"a": tok["a"], "k": tok["k"], "u": u}
        if self.delta:
            rec.update(v=tok["v"], beta=tok["beta"])
        return rec

    def _fold_history(self, S0: torch.Tensor, hist: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The u's of committed history records as the flush folds them (gdn_fold), and their c."""
        c = _core.cumulative(hist["a"])
        if self.delta and self.policy.gdn_fold == "recompute":
            return _core.window_deltas(S0, hist["a"], hist["k"], hist["v"], hist["beta"]), c
        return hist["u"], c

    # -- prefill -------------------------------------------------------------------------------
    def prefill(self, p: _core.Prepared) -> torch.Tensor:
        y, S = _core.chunked(p, self.U, 64)
        T = p.k.shape[1]
        self._write(S, f"prefill of {T} tokens")
        self.prefill_tokens += T
        if self.trace is not None:
            self.trace.append((self.prefill_tokens, self.U.clone()))
        return y

    # -- one decode token ----------------------------------------------------------------------
    def decode(self, tok: dict[str, torch.Tensor]) -> torch.Tensor:
        where = f"decode step {self.step}"
        if not self.replay:
            S, y, _ = _core.step(self.U, tok)
            self._write(S, where)
            self.step += 1
            return y
        W = self.ring.window
        hist = self.ring.read(W)
        if is_flush(W, self.L):  # fold the window and this token into U, output from the result
            u_hist, c_hist = self._fold_history(self.U, hist)
            c_tok = tok["a"] if W == 0 else c_hist[:, -1] + tok["a"]
            u_tok = _core.delta(self.U, hist["k"], u_hist, c_hist, tok, c_tok) if self.delta else tok["u"]
            S = _core.fold(self.U, _cat(hist["k"], tok["k"]), _cat(u_hist, u_tok), _cat(c_hist, c_tok))
            y = _core._matvec(S, tok["q"])
            self._write(S, where + " (flush)")
            self.flushes += 1
            self.ring.advance(W)
            self.ring.window = 0
            self.step += 1
            if self.trace is not None:
                self.trace.append((self.prefill_tokens + self.step, self.U.clone()))
            return y
        # non-flush: output-only from the read copy
        c_hist = _core.cumulative(hist["a"])
        c_tok = tok["a"] if W == 0 else c_hist[:, -1] + tok["a"]
        u_tok = _core.delta(self.R, hist["k"], hist["u"], c_hist, tok, c_tok) if self.delta else tok["u"]
        self.ring.write(W, self._record(tok, u_tok))
        self.ring.window = W + 1
        y = _core.readout(self.R, _cat(hist["k"], tok["k"]), _cat(hist["u"], u_tok), _cat(c_hist, c_tok),
                          c_tok, tok["q"])
        self.step += 1
        return y

    # -- one speculative round -----------------------------------------------------------------
    def spec_round(self, toks: list[dict[str, torch.Tensor]], accept: int) -> list[torch.Tensor]:
        """Verify T = len(toks) tokens (slot j ≥ accept holds a rejected draft), commit ``accept``.
        Returns the T outputs [B,H,R] (only the first ``accept`` are meaningful)."""
        T = len(toks)
        if not 1 <= accept <= T:
            raise ValueError(f"accepted tokens per round must be in 1..T = 1..{T}, got {accept}")
        where = f"speculative round at decode step {self.step}"
        if not self.replay:  # snapshot-per-draft baseline
            S_prev, snaps, ys = self.U, [], []
            for j, tok in enumerate(toks):
                S, y, _ = _core.step(S_prev, tok)
                self._write(S, f"{where}, snapshot {j}")
                snaps.append((self.U, self.R, self.codes))
                S_prev = self.U
                ys.append(y)
            self.U, self.R, self.codes = snaps[accept - 1]
            self.step += accept
            return ys
        W = self.ring.window
        flush = is_spec_flush(W, T, self.L)
        if flush:
            hist = self.ring.read(W)
            u_hist, c_hist = self._fold_history(self.U, hist)
            S0 = _core.fold(self.U, hist["k"], u_hist, c_hist)   # committed history only, unrounded
            self.ring.advance(W)
            start = 0
        else:
            S0 = self.R
            start = W
        if start + T > self.L:
            raise RuntimeError(f"speculative round needs positions {start}..{start + T - 1} beyond L = {self.L}")
        prev = self.ring.read(start)
        ks, us, cs = prev["k"], prev["u"], _core.cumulative(prev["a"])
        ys = []
        for j, tok in enumerate(toks):
            c_tok = tok["a"] if cs.shape[1] == 0 else cs[:, -1] + tok["a"]
            u_tok = _core.delta(S0, ks, us, cs, tok, c_tok) if self.delta else tok["u"]
            self.ring.write(start + j, self._record(tok, u_tok))
            ks, us, cs = _cat(ks, tok["k"]), _cat(us, u_tok), _cat(cs, c_tok)
            ys.append(_core.readout(S0, ks, us, cs, c_tok, tok["q"]))
        if flush:
            self._write(S0, where + " (flush)")
            self.flushes += 1
            if self.trace is not None:
                self.trace.append((self.prefill_tokens + self.step, self.U.clone()))
        self.ring.window = commit_window(W, accept, flush)
        self.step += accept
        return ys

    # -- export ------------------------------------------------------------------------------------
    def to_state(self) -> LayerState:
        W = self.ring.window
        recs = {name: t.clone() for name, t in self.ring.read(W).items()} if self.replay else {}
        return LayerState(self.kind, self.policy, self.U, self.R, recs, W, self.step, self.writes,
                          self.seq_ids, self.layer_index, self.prefill_tokens, *self.codes)


def _rejected_token(p: _core.Prepared, rej: _core.Prepared | None, r: int, j: int, T: int,
                    pos: int) -> dict[str, torch.Tensor]:
    if rej is not None:
        idx = r * T + j
        if idx >= rej.k.shape[1]:
            raise ValueError(f"Drafts.rejected has {rej.k.shape[1]} tokens; round {r} slot {j} needs index {idx}")
        return rej.token(idx)
    tok = dict(p.token(min(pos, p.k.shape[1] - 1)))
    key = "v" if p.delta else "u"
    tok[key] = -tok[key]
    return tok


def run_decode(inputs: LayerInputs, policy: StatePolicy, *, drafts: Drafts | None = None,
               initial_state: torch.Tensor | None = None, prefill_len: int = 0,
               state: LayerState | None = None, layer_index: int = 0, seq_ids: torch.Tensor | None = None,
               trace: list | None = None) -> tuple[torch.Tensor, LayerStats]:
    """The ``decode`` engine of ``run_layer`` (same arguments; see ``precision_lab.layer.run_layer``).

    ``trace`` (tests): list receiving (tokens in the checkpoint, update checkpoint) after each write
    of a flush or prefill.
    """
    p = prepare_inputs(inputs)
    n_drafts = 0 if drafts is None else drafts.n
    if drafts is not None and (not isinstance(drafts.n, int) or drafts.n < 0):
        raise ValueError(f"Drafts.n must be an integer >= 0, got {drafts.n!r}")
    # (StatePolicy.validate's probe passes no SR bits, which SR formats refuse; StateWriter probes
    # every format with bits instead, so only the window check is done here.)
    if policy.is_replay and policy.buffer_len < 1 + n_drafts:
        raise ValueError(f"buffer length L={policy.buffer_len} is smaller than 1 + drafts = {1 + n_drafts}; "
                         "speculative decoding needs L >= T = 1 + drafts")
    if drafts is not None and policy.is_replay and policy.buffer_len < 2 * (1 + n_drafts):
        T = 1 + n_drafts
        raise ValueError(f"speculative decoding with {n_drafts} drafts verifies T = {T} tokens per round and needs "
                         f"L = B + T with a history block B >= T, i.e. L >= 2T = {2 * T}; got L = {policy.buffer_len}")
    T_all = p.k.shape[1]
    if prefill_len > T_all:
        raise ValueError(f"prefill_len {prefill_len} exceeds the {T_all} input tokens")
    st = start_state(p, policy, initial_state=initial_state, state=state, layer_index=layer_index, seq_ids=seq_ids)
    m = ReplaySSM(st, p.delta, trace)
    B, _, H, R, _ = p.shape
    y = p.k.new_zeros(B, T_all, H, R)
    if prefill_len:
        y[:, :prefill_len] = m.prefill(p.slice(0, prefill_len))
    extra: dict = {"mode": policy.mode}
    if drafts is None:
        for t in range(prefill_len, T_all):
            y[:, t] = m.decode(p.token(t))
        impl = f"{IMPLEMENTATION}:{'replay' if policy.is_replay else 'conventional'}-decode"
    else:
        T = 1 + n_drafts
        rej = None if drafts.rejected is None else prepare_inputs(drafts.rejected)
        r = -1
        for r, pos, a in spec_rounds(drafts.accept, T, prefill_len, T_all):
            toks = [p.token(pos + j) if j < a else _rejected_token(p, rej, r, j, T, pos + j) for j in range(T)]
            ys = m.spec_round(toks, a)
            y[:, pos:pos + a] = torch.stack(ys[:a], 1)
        extra.update(rounds=r + 1, tokens_per_round=T)
        impl = f"{IMPLEMENTATION}:{'replay' if policy.is_replay else 'snapshot'}-speculative"
    stats = LayerStats(state_writes=m.state_writes, record_writes=m.ring.writes, engine="decode",
                       implementation=impl, state=m.to_state(), copy_writes=m.copy_writes, flushes=m.flushes,
                       extra=extra)
    return p.finish(y), stats


__all__ = ["RecordRing", "ReplaySSM", "run_decode"]
