"""``run_layer(..., engine="triton")``: the teacher-forced Triton scans behind the layer API.

Called by ``precision_lab.layer.run_layer`` as ``run_layer_triton(inputs, policy, **kwargs)``; takes
and returns the same ``LayerState`` as the ``decode`` and ``scan`` engines, so a stream may be cut
into segments anywhere and each segment served by any engine.

How a segment is served (``stats.implementation`` lists the parts that ran):

* ``fp32``: the window scan with an identity format and ``FP32_CHUNK``-token chunks, each folded
  (``fold_partial``): the plain recurrence in chunked form.
* ``conventional:F``: the fused recurrent scan (state rounded to F after every token); F = fp32
  uses the chunked scan as above.
* ``shared`` / ``split``: the window scan over whole windows. A segment that starts inside a window
  (a state carried from a previous segment), a prefill, and the partial window at the end of the
  segment are run by the torch scan engine (``engines/torch_scan.py``): at most L - 1 tokens at each end,
  so the kernel carries all the weight.
* Anything the kernels do not implement (KDA, custom or block-scaled formats other than NVFP4,
  L > 64, states over 128×128, CPU without ``TRITON_INTERPRET=1``) runs on the torch engine, and
  ``stats.implementation`` starts with ``"torch fallback (<reason>)"``.

The kernels compute in fp32; float64 inputs are accepted (outputs and states come back in
float64) but computed in fp32, so agreement with a float64 decode run is to fp32 tolerance.
The scans return the stored copies as values, not codes: a state they wrote in NVFP4 continues on
the torch engines, not on ``triton-decode`` (see ``precision_lab.state``).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from precision_lab.kernels.common.formats import FMT_NVFP4, KERNEL_FORMATS
from precision_lab.kernels.gdn.scan import gdn_recurrent_scan, gdn_replay_scan
from precision_lab.kernels.mamba2.scan import mamba2_recurrent_scan, mamba2_replay_scan
from precision_lab.kernels.runtime import triton_unavailable_reason
from precision_lab.policy import StatePolicy

__all__ = ["run_layer_triton", "unsupported_reason"]

FP32_CHUNK = 16       # chunk of the fp32-mode scan (any size gives the same function; 16 spills least)
MAX_WINDOW = 64       # BLOCK_W of the window scan (the in-register triangular solve)
MAX_STATE = 128 * 128


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def _dims(inputs) -> tuple[int, int, int, int, int]:
    """(B, T, H, R, C) of the state [B, H, R, C], with shape validation."""
    if inputs.kind == "mamba2":
        x = inputs.x
        if x.dim() != 4:
            raise ValueError(f"Mamba-2 x must be [B, T, H, P], got {list(x.shape)}")
        Bsz, T, H, P = x.shape
        if tuple(inputs.dt.shape) != (Bsz, T, H) or tuple(inputs.A.shape) != (H,):
            raise ValueError(f"Mamba-2 dt must be [B, T, H] = {[Bsz, T, H]} and A [H] = [{H}]; got dt "
                             f"{list(inputs.dt.shape)}, A {list(inputs.A.shape)}")
        if inputs.B.dim() != 4 or tuple(inputs.B.shape[:2]) != (Bsz, T) or inputs.C.shape != inputs.B.shape:
            raise ValueError(f"Mamba-2 B and C must both be [B, T, G, N]; got {list(inputs.B.shape)}, "
                             f"{list(inputs.C.shape)}")
        if H % inputs.B.shape[2]:
            raise ValueError(f"Mamba-2 heads H = {H} must be a multiple of the groups G = {inputs.B.shape[2]}")
        for name, t in (("D", inputs.D), ("dt_bias", inputs.dt_bias)):
            if t is not None and tuple(t.shape) != (H,):
                raise ValueError(f"Mamba-2 {name} must be [H] = [{H}], got {list(t.shape)}")
        if inputs.z is not None and inputs.z.shape != x.shape:
            raise ValueError(f"Mamba-2 z must be [B, T, H, P] like x, got {list(inputs.z.shape)}")
        return Bsz, T, H, P, inputs.B.shape[3]
    q, k, v = inputs.q, inputs.k, inputs.v
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or tuple(v.shape[:2]) != tuple(q.shape[:2]):
        raise ValueError(f"{inputs.kind}: q, k must be [B, T, Hk, K] and v [B, T, Hv, V]; got q {list(q.shape)}, "
                         f"k {list(k.shape)}, v {list(v.shape)}")
    Bsz, T, HK, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % HK:
        raise ValueError(f"{inputs.kind}: value heads Hv = {HV} must be a multiple of key heads Hk = {HK}")
    g_shape = (Bsz, T, HV) if inputs.kind == "gdn" else (Bsz, T, HV, K)
    if tuple(inputs.g.shape) != g_shape or tuple(inputs.beta.shape) != (Bsz, T, HV):
        raise ValueError(f"{inputs.kind}: g must be {list(g_shape)} and beta [B, T, Hv]; got g "
                         f"{list(inputs.g.shape)}, beta {list(inputs.beta.shape)}")
    return Bsz, T, HV, V, K


def _slice(inputs, t0: int, t1: int):
    """The tokens t0..t1-1 of a layer's inputs (per-head parameters kept)."""
    names = ("x", "dt", "B", "C", "z") if inputs.kind == "mamba2" else ("q", "k", "v", "g", "beta")
    return replace(inputs, **{n: getattr(inputs, n)[:, t0:t1] for n in names if getattr(inputs, n) is not None})


def _value_tensor(inputs) -> torch.Tensor:
    return inputs.x if inputs.kind == "mamba2" else inputs.v


def unsupported_reason(inputs, policy: StatePolicy) -> str | None:
    """Why the Triton scans cannot serve this call (None if they can)."""
    if inputs.kind not in ("mamba2", "gdn"):
        return f"no Triton scan for {inputs.kind}"
    for role, spec in (("update", policy.update), ("read", policy.read)):
        if not isinstance(spec, str) or spec not in KERNEL_FORMATS:
            return f"{role} format {spec!r} has no Triton codec"
    if policy.is_replay and policy.buffer_len > MAX_WINDOW:
        return f"L = {policy.buffer_len} > {MAX_WINDOW}"
    _, _, _, R, C = _dims(inputs)
    if R * C > MAX_STATE:
        return f"state {R}x{C} larger than the {MAX_STATE}-element register tile"
    if FMT_NVFP4 in (KERNEL_FORMATS[policy.update][0], KERNEL_FORMATS[policy.read][0]) and C % 16:
        return f"NVFP4 needs the last state axis to be a multiple of 16, got {C}"
    return triton_unavailable_reason(_value_tensor(inputs).device)


# ---------------------------------------------------------------------------------------------
# The torch engine used for fallbacks and segment edges
# ---------------------------------------------------------------------------------------------
def _run_torch(inputs, policy, **kwargs):
    from precision_lab.engines.torch_scan import run_layer_scan

    y, stats = run_layer_scan(inputs, policy, **kwargs)
    return y, stats, "torch-scan"


# ---------------------------------------------------------------------------------------------
# LayerState helpers
# ---------------------------------------------------------------------------------------------
class _Tally:
    """Sums the LayerStats of the parts of one call."""

    def __init__(self):
        self.state_writes = self.record_writes = self.copy_writes = self.flushes = 0
        self.parts: list[str] = []

    def add_stats(self, st, name: str) -> None:
        self.state_writes += st.state_writes
        self.record_writes += st.record_writes
        self.copy_writes += st.copy_writes
        self.flushes += st.flushes
        self.parts.append(name)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def run_layer_triton(inputs, policy: StatePolicy | str, *, initial_state: torch.Tensor | None = None,
                     prefill_len: int = 0, state=None, layer_index: int = 0,
                     seq_ids: torch.Tensor | None = None):
    """Teacher-forced run of one SSM layer on the Triton scans (see the module docstring).

    inputs: Mamba2Inputs | GDNInputs | KDAInputs; policy: StatePolicy or string; the keywords are
    ``run_layer``'s. Returns (y [B, T, H, R] in the inputs' dtype, LayerStats).
    """
    from precision_lab.layer import LayerStats

    policy = StatePolicy.parse(policy)
    dims = _dims(inputs)
    Bsz, T, H, R, C = dims
    vt = _value_tensor(inputs)
    kwargs = dict(initial_state=initial_state, prefill_len=prefill_len, state=state, layer_index=layer_index,
                  seq_ids=seq_ids)

    reason = unsupported_reason(inputs, policy)
    if reason is not None:
        y, st, name = _run_torch(inputs, policy, **kwargs)
        st.engine = "triton"
        st.implementation = f"torch fallback ({reason}): {name} [{st.implementation}]"
        return y, st

    from precision_lab.recurrences import prepare as prepare_inputs
    from precision_lab.state import start_state

    if state is not None and (initial_state is not None or prefill_len):
        raise ValueError("state= continues a stream: initial_state and prefill_len must be left out")
    if not isinstance(prefill_len, int) or not 0 <= prefill_len <= T:
        raise ValueError(f"prefill_len must be an integer in [0, T = {T}], got {prefill_len!r}")
    policy.validate()
    # The decode engine's own start: validation of state=, or the initial cast (SR event 0) of a new
    # stream, so that every engine starts from the same bits. Zero tokens keep it cheap.
    p0 = prepare_inputs(_slice(inputs, 0, 0))
    if not (state is None and prefill_len):
        state = start_state(p0, policy, initial_state=initial_state, state=state, layer_index=layer_index,
                            seq_ids=seq_ids)
    seq_ids = state.seq_ids if state is not None else seq_ids

    tally = _Tally()
    ys: list[torch.Tensor] = []
    t = 0
    if state is None and prefill_len:
        # The prefill (one chunked pass, one write) runs on the torch engine.
        y0, st0, name = _run_torch(_slice(inputs, 0, prefill_len), policy, initial_state=initial_state,
                                   prefill_len=prefill_len, layer_index=layer_index, seq_ids=seq_ids)
        ys.append(y0)
        tally.add_stats(st0, f"{name}(prefill {prefill_len})")
        state, t = st0.state, prefill_len

    L = policy.buffer_len
    if policy.is_replay and state.window and t < T:
        # finish the window the previous segment left open
        n = min(T - t, L - state.window)
        y1, st1, name = _run_torch(_slice(inputs, t, t + n), policy, state=state, layer_index=layer_index)
        ys.append(y1)
        tally.add_stats(st1, f"{name}(window head {n})")
        state, t = st1.state, t + n

    n_kernel = (T - t) // L * L if policy.is_replay else T - t
    if n_kernel:
        yk, state = _kernel_part(_slice(inputs, t, t + n_kernel), policy, state, tally)
        ys.append(yk)
        t += n_kernel

    if t < T:
        # the partial window at the end of the segment: its records go into the LayerState buffer
        y2, st2, name = _run_torch(_slice(inputs, t, T), policy, state=state, layer_index=layer_index)
        ys.append(y2)
        tally.add_stats(st2, f"{name}(window tail {T - t})")
        state = st2.state

    y = torch.cat(ys, dim=1) if ys else torch.empty_like(vt)
    stats = LayerStats(state_writes=tally.state_writes, record_writes=tally.record_writes, engine="triton",
                       implementation=" + ".join(tally.parts) or "none (T = 0)", state=state,
                       copy_writes=tally.copy_writes, flushes=tally.flushes,
                       extra={"kernel_tokens": n_kernel})
    return y.to(vt.dtype), stats


def _kernel_part(inputs, policy: StatePolicy, state, tally: _Tally):
    """Run the Triton scan over a segment that starts on a window boundary (whole windows for the
    ReplaySSM modes). Returns (y, the LayerState after it)."""
    cdtype = state.update.dtype
    T = _value_tensor(inputs).shape[1]
    upd_fmt, upd_sr = KERNEL_FORMATS[policy.update]
    read_fmt, read_sr = KERNEL_FORMATS[policy.read]
    split = policy.mode == "split"
    common = dict(seq_ids=state.seq_ids, seed=policy.seed, layer=state.layer_index, event0=state.writes + 1)
    u0 = state.update.float()
    r0 = state.read.float()
    is_m2 = inputs.kind == "mamba2"
    if is_m2:
        args = (inputs.x, inputs.dt, inputs.A, inputs.B, inputs.C, inputs.D, inputs.dt_bias, inputs.z)
    else:
        args = (inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta)
        gkw = dict(scale=inputs.scale, qk_l2norm=inputs.qk_l2norm)

    # conventional:F with any F (fp32 included) runs the per-token recurrent scan: conventional:fp32
    # is the matched reference of the lossy conventional rows, so it must run their arithmetic
    recurrent = policy.mode == "conventional"
    if recurrent:
        if is_m2:
            y, s = mamba2_recurrent_scan(*args, u0, fmt=upd_fmt, sr=upd_sr, **common)
        else:
            y, s = gdn_recurrent_scan(*args, u0, fmt=upd_fmt, sr=upd_sr, **gkw, **common)
        u, r = s, s
        name = f"triton:{inputs.kind}_recurrent_scan"
    else:
        replay = policy.is_replay
        L = policy.buffer_len if replay else FP32_CHUNK
        kw = dict(L=L, upd_fmt=upd_fmt, upd_sr=upd_sr, read_fmt=read_fmt, read_sr=read_sr, split=split,
                  fold_partial=not replay, **common)
        if is_m2:
            y, u, r = mamba2_replay_scan(*args, u0, r0, **kw)
        else:
            y, u, r = gdn_replay_scan(*args, u0, r0, recompute=policy.gdn_fold == "recompute", **gkw, **kw)
        name = f"triton:{inputs.kind}_replay_scan" if replay else f"triton:{inputs.kind}_replay_scan(fp32, chunk {L})"

    for what, t in (("update checkpoint", u), ("read copy", r)):
        if not torch.isfinite(t).all():
            raise FloatingPointError(
                f"non-finite {what} after the Triton scan: layer {state.layer_index}, decode steps "
                f"{state.step}..{state.step + T - 1}, policy {policy.short_str()!r}")
    if policy.is_replay:
        # one flush per window; the flush token's record is folded directly, never buffered
        n_writes = T // policy.buffer_len
        tally.flushes += n_writes
        tally.record_writes += n_writes * (policy.buffer_len - 1)
        tally.copy_writes += n_writes * (2 if split else 1)
    else:
        n_writes = T
        tally.copy_writes += T
    tally.state_writes += n_writes
    tally.parts.append(f"{name}({T} tokens)")

    u = u.to(cdtype)
    r = u if not split else r.to(cdtype)
    new_state = state.with_values(u, r, step=state.step + T, writes=state.writes + n_writes)
    return y, new_state
