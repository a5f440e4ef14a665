"""The layer API (docs/design.md §4): one entry point for single-layer studies, tests and the simulator.

    from precision_lab import StatePolicy
    from precision_lab.layer import Mamba2Inputs, run_layer
    y, stats = run_layer(inputs, StatePolicy.parse("split:fp16-sr/nvfp4@L16"), engine="decode")

Engines (all serve the same semantics, docs/design.md §4; ``precision_lab.engines`` declares them): ``"decode"``
(the ground truth, token by token in torch), ``"scan"`` (window-parallel teacher forcing in torch),
``"triton"`` (the teacher-forced Triton scans), ``"triton-decode"`` (the Triton decode-step kernels,
token by token, state in the packed device layout). ``drafts=`` (speculative decoding) runs on
``decode`` and ``triton-decode``. Every engine takes and returns the same ``LayerState``
(``precision_lab.state``), so a stream can be cut anywhere and continued on another engine.

Shapes: B batch, T tokens, H heads (value heads for GDN/KDA), state [B, H, R, C] with
R = P (Mamba-2 head dim) or V, and C = N (Mamba-2 state dim) or K. The last axis C is contiguous
and is the axis reduced by S·q.

Compute dtype: float32 or float64 inputs are computed in their own dtype (float64 for references);
bf16/fp16 inputs are computed in float32 (docs/design.md §4: "updates in fp32"). ``y`` is returned in the
inputs' dtype. The state format named ``fp32`` stores the compute dtype unchanged (so a float64 run
of ``split:fp32/fp32`` is exact algebra); every other format rounds the fp32 value of the state and
stores its float32 result (``precision_lab.state.StateWriter``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .engines import ENGINES, check_engine, implementation
from .policy import StatePolicy
from .state import LayerState


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
@dataclass
class Mamba2Inputs:
    """Inputs of a Mamba-2 SSM layer (after the in-projection and the causal conv).

    x:       [B, T, H, P]  head inputs
    dt:      [B, T, H]     raw time step, before ``softplus(dt + dt_bias)``
    A:       [H]           negative decay rate (``A = -exp(A_log)``)
    B:       [B, T, G, N]  input projection, shared by the H/G heads of a group (head h uses group h // (H/G))
    C:       [B, T, G, N]  output projection, grouped like B
    D:       [H] | None    skip connection ``y += D x``
    dt_bias: [H] | None
    z:       [B, T, H, P] | None  gate: ``y *= silu(z)``
    State: [B, H, P, N].
    """

    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None = None
    dt_bias: torch.Tensor | None = None
    z: torch.Tensor | None = None

    kind = "mamba2"


@dataclass
class GDNInputs:
    """Inputs of a Gated DeltaNet layer (after projections and the causal conv).

    q:    [B, T, Hk, K]   queries (L2-normalised inside when ``qk_l2norm``)
    k:    [B, T, Hk, K]   keys
    v:    [B, T, Hv, V]   values; Hv is a multiple of Hk (GVA: value head h uses key head h // (Hv/Hk))
    g:    [B, T, Hv]      log decay (α = exp(g), g ≤ 0)
    beta: [B, T, Hv]      write strength
    scale: query scale, default K**-0.5
    State: [B, Hv, V, K].
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    scale: float | None = None
    qk_l2norm: bool = True

    kind = "gdn"


@dataclass
class KDAInputs:
    """Inputs of a Kimi Delta Attention layer: as ``GDNInputs`` but with a per-channel decay
    ``g: [B, T, Hv, K]`` (log decay along the key axis, ``S_{t-1} diag(exp(g_t))``).
    State: [B, Hv, V, K].
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    scale: float | None = None
    qk_l2norm: bool = True

    kind = "kda"


LayerInputs = Mamba2Inputs | GDNInputs | KDAInputs


# ---------------------------------------------------------------------------------------------
# Statistics (the state carried across segments is ``precision_lab.state.LayerState``)
# ---------------------------------------------------------------------------------------------
@dataclass
class LayerStats:
    """What a ``run_layer`` call did, measured by the code path that served it.

    state_writes:  state write events of one sequence (all heads) in this call: one per conventional
                   step, per flush, per prefill, per speculative snapshot. A split-mode flush writes
                   both copies from one fp32 result and counts once (``copy_writes`` counts copies).
                   The batch moves in lockstep, so the count is the same for every sequence.
    record_writes: token records written into the window ring, per sequence (drafts included; a
                   flush token is folded directly and writes no record)
    engine:        "decode" | "scan" | "triton" | "triton-decode"
    implementation: the code that served (e.g. "torch-reference:replay-decode")
    state:         LayerState to pass as ``state=`` to continue the stream
    copy_writes:   state copies written (split flush = 2)
    flushes:       flush steps (ReplaySSM modes)
    extra:         engine-specific details
    """

    state_writes: int
    record_writes: int
    engine: str
    implementation: str
    state: LayerState
    copy_writes: int = 0
    flushes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Drafts:
    """A speculative-decoding schedule for the token-by-token engines (``decode``, ``triton-decode``).

    n:        drafts per round; each round verifies T = 1 + n tokens
    accept:   accepted tokens per round, each in 1..T (the same for every sequence of the batch).
              Round r consumes the next ``accept[r]`` tokens of the input stream (the last round is
              cut at the end of the stream); a schedule that ends before the stream is an error.
    rejected: optional inputs of the same type whose token axis has ``rounds * T`` entries: the
              token verified in slot j of round r when j ≥ accept[r] is entry ``r*T + j``. Default:
              the true stream token at that position with its value input negated (x for
              Mamba-2, v for GDN/KDA), so a leaked rejected record changes the outputs.
    """

    n: int
    accept: Any
    rejected: LayerInputs | None = None


def random_inputs(kind: str, batch: int = 2, tokens: int = 64, heads: int = 4, rows: int = 8, cols: int = 16,
                  groups: int = 2, dtype: torch.dtype = torch.float64, seed: int = 0,
                  decay: tuple[float, float] = (0.5, 0.999)) -> LayerInputs:
    """Random but well-conditioned inputs for tests and demos (CPU).

    kind: "mamba2" (state [heads, rows=P, cols=N], ``groups`` B/C groups) | "gdn" | "kda" (state
    [heads=Hv, rows=V, cols=K], ``groups`` key heads). Per-step decays α = exp(a) are drawn log-uniformly
    in ``decay`` (per head, with per-token jitter), so long-memory heads (α near 1) are included.
    """
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    uni = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)
    lo, hi = (torch.log(torch.tensor(d, dtype=torch.float64)) for d in decay)
    B, T, H = batch, tokens, heads
    if heads % groups:
        raise ValueError(f"heads {heads} must be a multiple of groups {groups}")
    head_log_a = lo + (hi - lo) * uni(H)                       # per-head mean log decay, in [log lo, log hi]
    if kind == "mamba2":
        A = -torch.ones(H, dtype=torch.float64)
        # a = A·softplus(dt) should be ≈ head_log_a: choose dt ≈ softplus⁻¹(-head_log_a) with jitter
        target = (-head_log_a) * (1 + 0.2 * (uni(B, T, H) - 0.5))
        dt = torch.log(torch.expm1(target))
        inp = Mamba2Inputs(x=rnd(B, T, H, rows), dt=dt, A=A, B=rnd(B, T, groups, cols) / cols ** 0.5,
                           C=rnd(B, T, groups, cols), D=rnd(H), dt_bias=None, z=rnd(B, T, H, rows))
    elif kind in ("gdn", "kda"):
        Hk = groups
        shape_g = (B, T, H) if kind == "gdn" else (B, T, H, cols)
        jitter = 1 + 0.2 * (uni(*shape_g) - 0.5)
        ga = head_log_a.view(1, 1, H, *([1] if kind == "kda" else [])) * jitter
        cls = GDNInputs if kind == "gdn" else KDAInputs
        inp = cls(q=rnd(B, T, Hk, cols), k=rnd(B, T, Hk, cols), v=rnd(B, T, H, rows), g=ga,
                  beta=0.2 + 0.8 * uni(B, T, H))
    else:
        raise ValueError(f"unknown layer kind {kind!r}; expected mamba2, gdn or kda")
    for name, val in list(vars(inp).items()):
        if isinstance(val, torch.Tensor):
            setattr(inp, name, val.to(dtype))
    return inp


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def run_layer(inputs: LayerInputs, policy: StatePolicy | str, engine: str = "decode", *,
              initial_state: torch.Tensor | None = None, prefill_len: int = 0,
              state: LayerState | None = None, layer_index: int = 0,
              seq_ids: torch.Tensor | None = None,
              drafts: Drafts | dict | None = None) -> tuple[torch.Tensor, LayerStats]:
    """Run one SSM layer over T tokens under a state policy.

    inputs:        Mamba2Inputs | GDNInputs | KDAInputs (their dtype is the compute dtype)
    policy:        StatePolicy or policy string (``"split:fp16-sr/nvfp4@L16"``)
    engine:        "decode" (ground truth) | "scan" | "triton" | "triton-decode"
    initial_state: [B, H, R, C] float, the state before the first token (default zeros); cast into
                   the policy's formats at the start of the stream (SR event 0)
    prefill_len:   the first tokens are processed as a chunked prefill whose fp32 result is written
                   once into the checkpoint (one state write); decode windows start after it
    state:         LayerState from a previous segment: continue the stream from it (then
                   ``initial_state`` and ``prefill_len`` must be left out)
    layer_index:   SR key (quant/philox.py)
    seq_ids:       [B] global sequence ids for the SR counters (default arange(B))
    drafts:        Drafts (or dict with its fields) for a speculative run (token-by-token engines)

    Returns ``y`` [B, T, H, P] (Mamba-2) or [B, T, Hv, V] (GDN/KDA) in the inputs' dtype, and
    ``LayerStats``.
    """
    check_engine(engine, allow_auto=False)
    if not isinstance(inputs, (Mamba2Inputs, GDNInputs, KDAInputs)):
        raise TypeError(f"inputs must be Mamba2Inputs, GDNInputs or KDAInputs, got {type(inputs).__name__}")
    policy = StatePolicy.parse(policy)
    if isinstance(drafts, dict):
        drafts = Drafts(**drafts)
    if drafts is not None and engine not in ("decode", "triton-decode"):
        raise ValueError(f"speculative decoding (drafts=) runs token by token: engine 'decode' or 'triton-decode', "
                         f"not {engine!r}")
    if state is not None and (initial_state is not None or prefill_len):
        raise ValueError("state= continues a stream: initial_state and prefill_len belong to the start of a "
                         "stream and must be left out")
    if not isinstance(prefill_len, int) or prefill_len < 0:
        raise ValueError(f"prefill_len must be an integer >= 0, got {prefill_len!r}")

    kwargs = dict(initial_state=initial_state, prefill_len=prefill_len, state=state,
                  layer_index=layer_index, seq_ids=seq_ids)
    if drafts is not None:
        kwargs["drafts"] = drafts
    return implementation(engine)(inputs, policy, **kwargs)


__all__ = ["ENGINES", "Drafts", "GDNInputs", "KDAInputs", "LayerInputs", "LayerState", "LayerStats",
           "Mamba2Inputs", "random_inputs", "run_layer"]
