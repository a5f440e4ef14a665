"""The ``triton-decode`` engine: decode steps on the Triton decode-step kernels (docs/design.md §4, §7).

What generation runs on a GPU. The layer's state lives in the packed device layout
(``precision_lab.state.DeviceState``): stored copies as their format's codes, records in a ring,
window pointers and the SR event counter on the device. One token is one kernel step:

* ``fp32`` / ``conventional:F``: the conventional step (``*_conventional_step``): update in fp32,
  output from the fp32 result, store round_F(S) in place; one SR event.
* ``shared`` / ``split``: the ReplaySSM step (``*_replay_step``); the host decides flush or not from
  the window length it mirrors (``state.is_flush``: the batch moves in lockstep, so no device read
  is needed), and the window pointers and event counter advance on the device (``advance``). A
  step therefore launches the same kernels with the same arguments every time it takes the same
  branch: flush steps and non-flush steps are two fixed launch sequences, which is what lets a
  whole model's decode step be captured in a CUDA graph (``precision_lab.generation``).
* speculative rounds (``spec_round``, ``drafts=`` in ``run_layer``): T tokens verified in one
  launch, a flush first when ``W + 2T > L``; ``conventional`` with drafts (the snapshot baseline)
  runs on the torch engine.

Anything the kernels cannot hold (KDA, custom or MX formats, L > 64, states over 128×128, no GPU and
no interpreter) runs on the torch ``decode`` engine, and ``stats.implementation`` says
``"torch fallback (<reason>)"``.
"""
from __future__ import annotations

import torch

from precision_lab.policy import StatePolicy
from precision_lab.state import (
    DeviceState,
    LayerState,
    codes_missing_reason,
    commit_window,
    is_flush,
    is_spec_flush,
    records_read_the_state,
    spec_rounds,
    start_state,
)

__all__ = ["advance", "advance_device", "advance_host", "decode_tokens", "device_unsupported", "run_layer_triton_decode", "spec_round",
           "step_token", "to_device_state"]


def _groups(inputs) -> int:
    """Mamba-2 B/C groups or GDN key heads of a layer's inputs."""
    return inputs.B.shape[2] if inputs.kind == "mamba2" else inputs.q.shape[2]


def device_unsupported(kind: str, policy: StatePolicy, R: int, C: int, device) -> str | None:
    """Why the decode-step kernels cannot serve this layer on ``device`` (None if they can)."""
    from precision_lab.kernels.runtime import triton_unavailable_reason
    from precision_lab.state import device_unsupported_reason

    return device_unsupported_reason(kind, policy, R, C) or triton_unavailable_reason(device)


def to_device_state(state: LayerState | DeviceState, groups: int, device) -> DeviceState:
    """The state in the packed device layout (a DeviceState passes through)."""
    if isinstance(state, DeviceState):
        return state
    return DeviceState.from_layer_state(state, groups, device)


# ---------------------------------------------------------------------------------------------
# One step
# ---------------------------------------------------------------------------------------------
def _launch(ds: DeviceState, inputs, t0: int, T: int, *, flush: bool, fold_new: bool,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the kernel step for tokens t0..t0+T-1 of ``inputs`` (T = 1 conventional or replay;
    T > 1 a speculative verify). Returns y [B, T, H, R]."""
    from precision_lab.kernels.gdn.decode import gdn_conventional_step, gdn_replay_step
    from precision_lab.kernels.mamba2.decode import mamba2_conventional_step, mamba2_replay_step

    pol = ds.policy
    common = dict(seq_ids=ds.seq_ids, events=ds.events, seed=pol.seed, layer=ds.layer_index)
    sl = slice(t0, t0 + T)
    read = ds.read if pol.mode == "split" else None
    if inputs.kind == "mamba2":
        z = None if inputs.z is None else inputs.z[:, sl]
        if not pol.is_replay:
            y = mamba2_conventional_step(ds.update, ds.slots, inputs.x[:, t0], inputs.dt[:, t0], inputs.A,
                                         inputs.B[:, t0], inputs.C[:, t0], inputs.D, inputs.dt_bias,
                                         None if z is None else z[:, 0], **common)
            return y.unsqueeze(1)
        # a speculative round's history tiles need only the window the host mirrors, not the whole
        # ring (window_bound: the batch moves in lockstep, so every entry's W is ds.window)
        return mamba2_replay_step(ds.update, read, ds.records, ds.slots, ds.start, ds.wlen, inputs.x[:, sl],
                                  inputs.dt[:, sl], inputs.A, inputs.B[:, sl], inputs.C[:, sl], inputs.D,
                                  inputs.dt_bias, z, flush=flush, fold_new=fold_new,
                                  window_bound=ds.window if T > 1 else None, **common)
    gkw = dict(scale=inputs.scale, qk_l2norm=inputs.qk_l2norm)
    if not pol.is_replay:
        o = gdn_conventional_step(ds.update, ds.slots, inputs.q[:, t0], inputs.k[:, t0], inputs.v[:, t0],
                                  inputs.g[:, t0], inputs.beta[:, t0], **gkw, **common)
        return o.unsqueeze(1)
    # The fold choice matters at a flush only; other steps store v and beta with the records
    # (RECOMPUTE) whatever the policy, so the packed records convert to a full LayerState.
    recompute = pol.gdn_fold == "recompute" or not flush
    return gdn_replay_step(ds.update, read, ds.records, ds.slots, ds.start, ds.wlen, inputs.q[:, sl],
                           inputs.k[:, sl], inputs.v[:, sl], inputs.g[:, sl], inputs.beta[:, sl], flush=flush,
                           fold_new=fold_new, recompute=recompute, window_from_update=ds.window_from_update, **gkw,
                           **common)


def advance(ds: DeviceState, *, tokens: int, accepted: int, flushed: bool) -> None:
    """Advance the state after a step that verified ``tokens`` and kept ``accepted`` of them (an
    autoregressive flush keeps none: its token is folded, not buffered): the device pointers and
    SR event counter in place (``advance_device``: capturable in a CUDA graph), then the host
    mirrors (``advance_host``)."""
    advance_device(ds, tokens=tokens, accepted=accepted, flushed=flushed)
    advance_host(ds, tokens=tokens, accepted=accepted, flushed=flushed)


def advance_device(ds: DeviceState, *, tokens: int, accepted: int, flushed: bool) -> None:
    """The device half of ``advance``: window pointers and the SR event counter, in place."""
    if not ds.policy.is_replay:
        ds.events.add_(tokens)
    elif flushed:
        ds.start.add_(ds.wlen).bitwise_and_(ds.ring - 1)
        ds.wlen.fill_(accepted)
        ds.events.add_(1)
    else:
        ds.wlen.add_(accepted)


def advance_host(ds: DeviceState, *, tokens: int, accepted: int, flushed: bool) -> None:
    """The host half of ``advance``: the mirrors of the window, the step and the counters."""
    if not ds.policy.is_replay:
        ds.writes += tokens
        ds.step += tokens if accepted == 0 else accepted
        return
    if flushed:
        ds.writes += 1
        ds.flushes += 1
        # an autoregressive flush empties the window; a speculative flush round commits records whose
        # d's came from the unrounded fold, not from the stored checkpoint (gdn_replay_step)
        ds.window_from_update = tokens == 1 or not records_read_the_state(ds.kind)
    ds.record_writes += 0 if (flushed and tokens == 1) else tokens
    ds.window = commit_window(ds.window, accepted, flushed)
    ds.step += 1 if (flushed and tokens == 1) else accepted


def step_token(ds: DeviceState, inputs, t: int = 0) -> torch.Tensor:
    """One autoregressive decode step of token t of ``inputs`` (kernel-form inputs of a layer, see
    ``precision_lab.layer``): launches, then advances the state. Returns y [B, H, R]."""
    flush = ds.policy.is_replay and is_flush(ds.window, ds.policy.buffer_len)
    y = _launch(ds, inputs, t, 1, flush=flush, fold_new=flush)
    advance(ds, tokens=1, accepted=0 if flush else 1, flushed=flush)
    return y[:, 0]


def decode_tokens(ds: DeviceState, inputs) -> torch.Tensor:
    """Every token of ``inputs`` as an autoregressive decode step. Returns y [B, T, H, R]."""
    T = (inputs.x if inputs.kind == "mamba2" else inputs.v).shape[1]
    if T == 1:
        return step_token(ds, inputs, 0).unsqueeze(1)
    return torch.stack([step_token(ds, inputs, t) for t in range(T)], 1)


def spec_round(ds: DeviceState, inputs, t0: int, T: int, accept: int) -> torch.Tensor:
    """One speculative round: verify tokens t0..t0+T-1 of ``inputs`` (drafts included), keep
    ``accept``. Returns y [B, T, H, R] (only the first ``accept`` are meaningful)."""
    pol = ds.policy
    if not pol.is_replay:
        raise ValueError("the snapshot-per-draft baseline (conventional modes with drafts) runs on the torch "
                         "decode engine")
    if not 1 <= accept <= T:
        raise ValueError(f"accepted tokens per round must be in 1..T = 1..{T}, got {accept}")
    flush = is_spec_flush(ds.window, T, pol.buffer_len)
    y = _launch(ds, inputs, t0, T, flush=flush, fold_new=False)
    advance(ds, tokens=T, accepted=accept, flushed=flush)
    return y


# ---------------------------------------------------------------------------------------------
# The run_layer entry point
# ---------------------------------------------------------------------------------------------
def _cat_inputs(a, b):
    """Inputs a followed by b along the token axis (per-head parameters from a)."""
    from dataclasses import replace

    names = ("x", "dt", "B", "C", "z") if a.kind == "mamba2" else ("q", "k", "v", "g", "beta")
    return replace(a, **{n: torch.cat([getattr(a, n), getattr(b, n)], 1) for n in names if getattr(a, n) is not None})


def run_layer_triton_decode(inputs, policy: StatePolicy | str, *, initial_state: torch.Tensor | None = None,
                            prefill_len: int = 0, state: LayerState | DeviceState | None = None,
                            layer_index: int = 0, seq_ids: torch.Tensor | None = None, drafts=None):
    """``run_layer(..., engine="triton-decode")`` (same arguments and results; see
    ``precision_lab.layer.run_layer``). A prefill runs on the torch decode engine (one chunked
    pass, one write) and the stream moves to the device layout after it; ``stats.state`` is the
    LayerState of the result (converted losslessly), ``stats.extra["device_state"]`` the packed one."""
    from precision_lab.engines.torch_decode import run_decode
    from precision_lab.engines.triton_scan import _dims, _slice
    from precision_lab.layer import LayerStats
    from precision_lab.recurrences import prepare as prepare_inputs

    policy = StatePolicy.parse(policy)
    Bsz, T, H, R, C = _dims(inputs)
    vt = inputs.x if inputs.kind == "mamba2" else inputs.v
    reason = device_unsupported(inputs.kind, policy, R, C, vt.device) or codes_missing_reason(state)
    if reason is None and drafts is not None and not policy.is_replay:
        reason = "the snapshot-per-draft baseline (conventional modes with drafts) has no kernel"
    if reason is not None:
        if isinstance(state, DeviceState):
            state = state.to_layer_state(prepare_inputs(_slice(inputs, 0, 0)).dtype)
        y, st = run_decode(inputs, policy, drafts=drafts, initial_state=initial_state, prefill_len=prefill_len,
                           state=state, layer_index=layer_index, seq_ids=seq_ids)
        st.engine = "triton-decode"
        st.implementation = f"torch fallback ({reason}): torch-decode [{st.implementation}]"
        return y, st
    if state is not None and (initial_state is not None or prefill_len):
        raise ValueError("state= continues a stream: initial_state and prefill_len must be left out")
    if not isinstance(prefill_len, int) or not 0 <= prefill_len <= T:
        raise ValueError(f"prefill_len must be an integer in [0, T = {T}], got {prefill_len!r}")
    n_drafts = 0 if drafts is None else drafts.n
    if drafts is not None and (not isinstance(n_drafts, int) or n_drafts < 0):
        raise ValueError(f"Drafts.n must be an integer >= 0, got {n_drafts!r}")
    if policy.is_replay and drafts is not None and policy.buffer_len < 2 * (1 + n_drafts):
        raise ValueError(f"speculative decoding with {n_drafts} drafts needs L >= 2T = {2 * (1 + n_drafts)}; "
                         f"got L = {policy.buffer_len}")
    policy.validate()
    cdtype = prepare_inputs(_slice(inputs, 0, 0)).dtype
    parts: list[torch.Tensor] = []
    prefill_impl = ""
    if isinstance(state, DeviceState):
        if state.policy != policy or state.kind != inputs.kind or state.layer_index != layer_index:
            raise ValueError(f"device state of a {state.kind} layer {state.layer_index} under "
                             f"{state.policy.short_str()!r} cannot continue {inputs.kind} layer {layer_index} under "
                             f"{policy.short_str()!r}")
        ds = state.clone()
    else:
        if state is None and prefill_len:
            y0, st0 = run_decode(_slice(inputs, 0, prefill_len), policy, initial_state=initial_state,
                                 prefill_len=prefill_len, layer_index=layer_index, seq_ids=seq_ids)
            parts.append(y0)
            state = st0.state
            prefill_impl = f"torch-decode(prefill {prefill_len}) + "
        else:
            state = start_state(prepare_inputs(_slice(inputs, 0, 0)), policy, initial_state=initial_state,
                                state=state, layer_index=layer_index, seq_ids=seq_ids)
        ds = DeviceState.from_layer_state(state, _groups(inputs), vt.device)
    w0, f0, r0 = ds.writes, ds.flushes, ds.record_writes
    rest = _slice(inputs, prefill_len, T)
    Td = T - prefill_len
    extra: dict = {"mode": policy.mode}
    if drafts is None:
        if Td:
            parts.append(decode_tokens(ds, rest).to(vt.dtype))
        what = "replay" if policy.is_replay else "conventional"
        impl = f"{prefill_impl}triton:{inputs.kind}_{what}_step({Td} steps)"
    else:
        Tr = 1 + n_drafts
        rej = drafts.rejected
        ys, r = [], -1
        for r, pos, a in spec_rounds(drafts.accept, Tr, 0, Td):
            # the round's T tokens: a true ones, then the rejected drafts of this round
            block = _slice(rest, pos, pos + a)
            if a < Tr:
                block = _cat_inputs(block, _rejected_inputs(rest, rej, r, a, Tr, pos))
            ys.append(spec_round(ds, block, 0, Tr, a)[:, :a])
        r += 1
        if ys:
            parts.append(torch.cat(ys, 1).to(vt.dtype))
        extra.update(rounds=r, tokens_per_round=Tr)
        impl = f"{prefill_impl}triton:{inputs.kind}_replay_step(verify T = {Tr}, {r} rounds)"
    y = torch.cat(parts, 1) if parts else torch.empty_like(vt)
    st_out = ds.to_layer_state(cdtype)
    pre_writes = 1 if prefill_impl else 0
    stats = LayerStats(state_writes=ds.writes - w0 + pre_writes, record_writes=ds.record_writes - r0,
                       engine="triton-decode", implementation=impl, state=st_out,
                       copy_writes=(ds.writes - w0 + pre_writes) * (2 if policy.mode == "split" else 1),
                       flushes=ds.flushes - f0, extra={**extra, "device_state": ds})
    return y, stats


def _rejected_inputs(rest, rej, r: int, a: int, Tr: int, pos: int):
    """Inputs of the rejected drafts of round r (slots a..Tr-1), as the decode engine builds them:
    ``Drafts.rejected`` entries ``r*T + j`` or, by default, the true stream token at that position
    with its value input negated (a leaked rejected record then changes the outputs)."""
    from dataclasses import replace

    from precision_lab.engines.triton_scan import _slice

    T_all = (rest.x if rest.kind == "mamba2" else rest.v).shape[1]
    pieces = []
    for j in range(a, Tr):
        if rej is not None:
            idx = r * Tr + j
            n_rej = (rej.x if rej.kind == "mamba2" else rej.v).shape[1]
            if idx >= n_rej:
                raise ValueError(f"Drafts.rejected has {n_rej} tokens; round {r} slot {j} needs index {idx}")
            pieces.append(_slice(rej, idx, idx + 1))
        else:
            t = min(pos + j, T_all - 1)
            tok = _slice(rest, t, t + 1)
            key = "x" if tok.kind == "mamba2" else "v"
            pieces.append(replace(tok, **{key: -getattr(tok, key)}))
    out = pieces[0]
    for p in pieces[1:]:
        out = _cat_inputs(out, p)
    return out
