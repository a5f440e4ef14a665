"""The precision simulator (``precision-lab sim``): one synthetic SSM layer, many state policies.

It answers the first question a researcher asks — how much output error does a state policy
cause, and does it grow with length? — in seconds on a CPU, without a model.

Inputs (``make_inputs``; every setting is recorded in the result JSON):
- Mamba-2 (default), GDN or KDA; B sequences, H heads, state [R, C] per head (default 64 × 128).
- Per-step decays α_h spread log-uniformly in the memory time τ = 1/(1 − α) across the heads,
  from ``decay[0]`` to ``decay[1]`` (default 0.9 … 0.9999: τ = 10 … 10,000 steps, so the last head
  remembers for the whole default run), with ±10 % per-token jitter.
- Mamba-2: A = −1 and dt = −log α (so α_t = exp(A·dt_t)); x ~ N(0, input_scale²) scaled per head by
  1/√dt̄_h, B ~ N(0, 1/N), C ~ N(0, 1), no D skip and no z gate. The 1/√dt̄ factor gives every head
  the same stationary state RMS (Var S ≈ dt²σ²/(1 − α²) ≈ dtσ²/2); without it a head's output scales
  with √dt and the short-memory heads would own the output norm, hiding what happens to the
  long-memory heads. D·x and the gate would add error-free terms and dilute the relative error.
- GDN/KDA: q, k ~ N(0, 1) (L2-normalised inside), v ~ N(0, input_scale²), β ~ U(0.2, 1),
  g = log α (KDA: per channel, jittered).

Runs: every policy runs with float32 compute (the float32 inputs) on the ``scan`` engine, which
applies the exact decode semantics of docs/design.md §4 (it equals the token-by-token decode engine; see
tests/test_scan.py); ``engine="decode"`` runs the token-by-token engine itself. The reference is
the same float32 inputs cast to float64 and run through the unquantized recurrence in float64
(``recurrences._core.chunked``, no state rounding at all). The first L-1 steps of a ReplaySSM run
read the initial (zero) checkpoint plus the buffer, so they carry no quantization error; errors
appear from the first flush on (visible at step 16 in the plot).

Error metric: per step t and sequence b, e_t = ‖y_t − y_ref,t‖ / ‖y_ref,t‖ over all heads and rows
(the whole layer output of that token), averaged over the batch. The table reports, for each
window end E (256, 1024, 4096, 16384, … ×4, and the last step), the mean of e_t over the ``avg``
(default 256) steps ending at E — docs/reference.md §3: "mean relative output error of the previous 256
steps". The JSON also holds the mean over the whole window (previous end + 1 … E) and the per-step
curve averaged in log-spaced bins (for the log-log plot).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

DEFAULT_POLICIES = ("fp32", "conventional:nvfp4-sr", "shared:nvfp4-sr", "split:fp32/nvfp4", "split:fp16-sr/nvfp4")
ARCHS = ("mamba2", "gdn", "kda")


@dataclass
class SimConfig:
    """Settings of one simulation (all recorded in the result JSON).

    arch:        "mamba2" | "gdn" | "kda"
    steps:       tokens per sequence (all decode steps; no prefill)
    batch:       sequences
    heads:       heads (value heads for GDN/KDA)
    rows, cols:  state shape per head [R, C] (Mamba-2 P × N; GDN/KDA V × K)
    groups:      B/C groups (Mamba-2) or key heads (GDN/KDA); divides heads
    decay:       (α_min, α_max) per-step decay range over the heads (memory τ = 1/(1-α) log-spaced)
    jitter:      relative per-token jitter of the log decay (uniform ±jitter/2)
    input_scale: standard deviation of x (Mamba-2) / v (GDN, KDA)
    seed:        seed of the random inputs
    sr_seed:     seed of the stochastic-rounding bit stream (the policies' seed)
    policies:    policy strings
    avg:         steps averaged at each window end
    bins:        log-spaced bins of the stored per-step curve
    engine:      "scan" (default, window-parallel) or "decode" (token by token; same semantics, slower)
    """

    arch: str = "mamba2"
    steps: int = 4096
    batch: int = 1
    heads: int = 4
    rows: int = 64
    cols: int = 128
    groups: int = 1
    decay: tuple[float, float] = (0.9, 0.9999)
    jitter: float = 0.2
    input_scale: float = 1.0
    seed: int = 0
    sr_seed: int = 0
    policies: tuple[str, ...] = DEFAULT_POLICIES
    avg: int = 256
    bins: int = 96
    engine: str = "scan"

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"unknown architecture {self.arch!r}; expected one of {', '.join(ARCHS)}")
        for name in ("steps", "batch", "heads", "rows", "cols", "groups", "avg", "bins"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.heads % self.groups:
            raise ValueError(f"heads ({self.heads}) must be a multiple of groups ({self.groups})")
        lo, hi = self.decay
        if not 0.0 < lo <= hi < 1.0:
            raise ValueError(f"decay range must satisfy 0 < min <= max < 1, got {self.decay}")
        if not 0.0 <= self.jitter < 2.0:
            raise ValueError(f"jitter must be in [0, 2), got {self.jitter}")
        if not (self.input_scale > 0 and math.isfinite(self.input_scale)):
            raise ValueError(f"input_scale must be a positive finite number, got {self.input_scale}")
        if not self.policies:
            raise ValueError("no policies given")
        if self.engine not in ("scan", "decode"):
            raise ValueError(f"engine must be 'scan' or 'decode', got {self.engine!r}")


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def head_decays(cfg: SimConfig) -> torch.Tensor:
    """Per-head mean decay α_h [H] (float64): memory τ = 1/(1-α) log-spaced from decay[0] to decay[1]."""
    tau_lo, tau_hi = (1.0 / (1.0 - d) for d in cfg.decay)
    if cfg.heads == 1:
        taus = torch.tensor([tau_hi], dtype=torch.float64)
    else:
        taus = torch.logspace(math.log10(tau_lo), math.log10(tau_hi), cfg.heads, dtype=torch.float64)
    return 1.0 - 1.0 / taus


def make_inputs(cfg: SimConfig):
    """Random float32 inputs of ``cfg.arch`` (see the module docstring for the distributions)."""
    from .layer import GDNInputs, KDAInputs, Mamba2Inputs

    g = torch.Generator().manual_seed(cfg.seed)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    uni = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64)
    B, T, H, R, C, G = cfg.batch, cfg.steps, cfg.heads, cfg.rows, cfg.cols, cfg.groups
    log_a = torch.log(head_decays(cfg))                                      # [H], < 0
    if cfg.arch == "mamba2":
        dt = (-log_a) * (1 + cfg.jitter * (uni(B, T, H) - 0.5))               # a_t = A·dt_t with A = -1
        dt_raw = torch.log(torch.expm1(dt))                                  # softplus⁻¹
        x = rnd(B, T, H, R) * cfg.input_scale / (-log_a).sqrt().view(1, 1, H, 1)
        inp = Mamba2Inputs(x=x, dt=dt_raw, A=-torch.ones(H, dtype=torch.float64),
                           B=rnd(B, T, G, C) / math.sqrt(C), C=rnd(B, T, G, C))
    else:
        shape_g = (B, T, H) if cfg.arch == "gdn" else (B, T, H, C)
        view = (1, 1, H) if cfg.arch == "gdn" else (1, 1, H, 1)
        gl = log_a.view(view) * (1 + cfg.jitter * (uni(*shape_g) - 0.5))
        cls = GDNInputs if cfg.arch == "gdn" else KDAInputs
        inp = cls(q=rnd(B, T, G, C), k=rnd(B, T, G, C), v=rnd(B, T, H, R) * cfg.input_scale, g=gl,
                  beta=0.2 + 0.8 * uni(B, T, H))
    return cast_inputs(inp, torch.float32)


def cast_inputs(inp, dtype: torch.dtype):
    """A copy of ``inp`` with every tensor cast to ``dtype``."""
    from dataclasses import replace

    return replace(inp, **{k: v.to(dtype) for k, v in vars(inp).items() if isinstance(v, torch.Tensor)})


# ---------------------------------------------------------------------------------------------
# Error statistics
# ---------------------------------------------------------------------------------------------
def window_ends(steps: int) -> list[int]:
    """256, 1024, 4096, … (×4) up to ``steps``, then ``steps`` itself."""
    ends, e = [], 256
    while e < steps:
        ends.append(e)
        e *= 4
    ends.append(steps)
    return ends


def step_errors(y: torch.Tensor, y_ref: torch.Tensor) -> torch.Tensor:
    """e_t = ‖y_t − y_ref,t‖ / ‖y_ref,t‖ over heads and rows, averaged over the batch: [T] float64.

    y, y_ref: [B, T, H, R].
    """
    d = (y.double() - y_ref).flatten(2).norm(dim=-1)
    n = y_ref.flatten(2).norm(dim=-1)
    return (d / n.clamp_min(torch.finfo(torch.float64).tiny)).mean(0)


def summarize(err: torch.Tensor, ends: list[int], avg: int, bins: int) -> dict:
    """Window means and the log-binned curve of a per-step error [T] (step t = index + 1)."""
    last, whole, prev = [], [], 0
    for e in ends:
        last.append(float(err[max(0, e - avg):e].mean()))
        whole.append(float(err[prev:e].mean()))
        prev = e
    T = err.shape[0]
    edges = sorted({int(round(v)) for v in torch.logspace(0, math.log10(T), bins + 1).tolist()} | {T})
    steps, means, lo = [], [], 0
    for hi in edges:
        if hi > lo:
            steps.append(hi)
            means.append(float(err[lo:hi].mean()))
            lo = hi
    return {"window_ends": list(ends), "mean_rel_error_last": last, "mean_rel_error_window": whole,
            "curve": {"step": steps, "mean_rel_error": means}}


# ---------------------------------------------------------------------------------------------
# The simulation
# ---------------------------------------------------------------------------------------------
def reference_outputs(inp) -> torch.Tensor:
    """Float64 unquantized outputs of the layer (chunked form), [B, T, H, R] float64."""
    from .recurrences import _core, prepare

    p = prepare(cast_inputs(inp, torch.float64))
    y, _ = _core.chunked(p, _core.zeros_state(p), 64)
    return p.finish(y)


def parse_policies(cfg: SimConfig) -> list:
    """The StatePolicy of every policy string of ``cfg``, with every format resolved now, so a typo
    in the last policy fails before any work. Errors name the policy; duplicates are refused."""
    from .policy import StatePolicy

    policies = []
    for text in cfg.policies:
        pol = StatePolicy.parse(text, seed=cfg.sr_seed)
        try:
            pol.quantizers()
        except (ValueError, ImportError, TypeError) as e:
            raise ValueError(f"policy {text!r}: {e}") from e
        policies.append(pol)
    names = [p.short_str() for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate policies: {names}")
    return policies


def run_sim(cfg: SimConfig, log=print) -> dict:
    """Run every policy of ``cfg`` and return the result as its JSON object (kind "sim", class
    ``sim_schema.SimResult``; see the module docstring)."""
    from .bench.schema import Device, read_as
    from .layer import run_layer
    from .provenance import provenance
    from .sim_schema import (
        ErrorCurve,
        PolicyErrors,
        SimMetric,
        SimProvenance,
        SimResult,
        SimSettings,
        to_json,
    )

    policies = parse_policies(cfg)
    names = [p.short_str() for p in policies]
    t0 = time.perf_counter()
    inp = make_inputs(cfg)
    y_ref = reference_outputs(inp)
    ends = window_ends(cfg.steps)
    results = {}
    # A progress bar over policies (stderr, interactive terminals only): at 32K steps the every-step
    # conventional policies take minutes, and the user should see which one is running.
    bar = tqdm(total=len(policies), desc="policies", unit="policy", leave=False, disable=not sys.stderr.isatty())
    for pol, name in zip(policies, names):
        bar.set_postfix_str(name)
        t = time.perf_counter()
        y, stats = run_layer(inp, pol, engine=cfg.engine)
        bar.update()
        err = step_errors(y, y_ref)
        if not torch.isfinite(err).all():
            raise FloatingPointError(f"policy {name}: non-finite outputs")
        s = summarize(err, ends, cfg.avg, cfg.bins)
        res = PolicyErrors(
            window_ends=s["window_ends"], mean_rel_error_last=s["mean_rel_error_last"],
            mean_rel_error_window=s["mean_rel_error_window"], curve=ErrorCurve(**s["curve"]),
            state_writes=stats.state_writes, record_writes=stats.record_writes, copy_writes=stats.copy_writes,
            engine=stats.engine, implementation=stats.implementation, seconds=round(time.perf_counter() - t, 3),
            policy=pol.short_str(), mode=pol.mode, update=pol.update, read=pol.read, buffer_len=pol.buffer_len,
            gdn_fold=pol.gdn_fold)
        results[name] = res
        with bar.external_write_mode():  # keep the log line and the bar from overwriting each other
            log(f"  {name:<28s} {res.seconds:7.2f} s   {stats.state_writes} state writes")
    bar.close()
    settings = SimSettings(
        arch=cfg.arch, steps=cfg.steps, batch=cfg.batch, heads=cfg.heads, rows=cfg.rows, cols=cfg.cols,
        groups=cfg.groups, decay=list(cfg.decay), jitter=cfg.jitter, input_scale=cfg.input_scale, seed=cfg.seed,
        sr_seed=cfg.sr_seed, policies=names, avg=cfg.avg, bins=cfg.bins, engine=cfg.engine,
        head_decays=head_decays(cfg).tolist())
    p = provenance()
    result = SimResult(
        provenance=SimProvenance(created=p["created"], command=p["command"], git=p["git"], versions=p["versions"],
                                 device=read_as(Device, p["device"], "provenance.device"),
                                 settings=settings, policies=names, seed=cfg.seed, sr_seed=cfg.sr_seed),
        settings=settings,
        metric=SimMetric(
            error="per step: ||y_t - y_ref_t|| / ||y_ref_t|| over heads and rows, mean over the batch",
            window_stat=f"mean over the {cfg.avg} steps ending at each window end (mean_rel_error_last); "
                        "mean over the whole window (mean_rel_error_window)",
            reference="same float32 inputs in float64, unquantized recurrence (chunked form), no state rounding",
            compute_dtype="float32", engine=cfg.engine),
        window_ends=ends, seconds=round(time.perf_counter() - t0, 3), results=results)
    return to_json(result)


def format_table(result: dict) -> str:
    """The table of mean relative output errors (rows: policies, columns: window ends)."""
    ends = result["window_ends"]
    avg = result["settings"]["avg"]
    head = ["policy"] + [f"1–{ends[0]:,}" if i == 0 else f"to {e:,}" for i, e in enumerate(ends)]
    rows = [[name] + [f"{v:.3g}" for v in r["mean_rel_error_last"]] for name, r in result["results"].items()]
    width = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, width))) + " |"
    sep = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(width)) + "|"
    title = (f"Mean relative output error vs float64 (mean of the {avg} steps ending at each column's step), "
             f"{result['settings']['arch']}, {result['settings']['steps']:,} steps")
    return "\n".join([title, "", fmt(head), sep, *map(fmt, rows)])


def plot(result: dict, path) -> None:
    """Log-log PNG of the binned per-step error of every policy."""
    from .report.style import PolicyColors, new_figure, save

    colors = PolicyColors(list(result["results"]))
    fig, ax = new_figure()
    styles = ("-", "--", "-.", ":")  # policies that track each other (split FP32 / FP16-SR) stay visible
    for i, (name, r) in enumerate(result["results"].items()):
        c = r["curve"]
        ax.loglog(c["step"], c["mean_rel_error"], label=name, color=colors(name), lw=1.5,
                  ls=styles[i % len(styles)], zorder=3 + len(result["results"]) - i)
    s = result["settings"]
    ax.set_xlabel("decode step")
    ax.set_ylabel("relative output error vs float64")
    ax.set_title(f"{s['arch']} layer, {s['heads']} heads × {s['rows']}×{s['cols']}, "
                 f"decay {s['decay'][0]}–{s['decay'][1]}, seed {s['seed']}", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, path)


# ---------------------------------------------------------------------------------------------
# --mode equivalence: the float64 algebra of ReplaySSM and its write counts
# ---------------------------------------------------------------------------------------------
def run_equivalence(arch: str = "mamba2", steps: int = 1000, rows: int = 64, cols: int = 128, L: int = 16,
                    drafts: int = 4, rounds: int = 300, seed: int = 0, log=print) -> dict:
    """ReplaySSM vs conventional decode in float64 on the decode engine (token by token), one head.

    1. ``steps`` decode steps, state [rows, cols], buffer L: max relative output difference of
       ``shared:fp32@L<L>`` (identity storage in float64, so only the algebra differs) against
       ``fp32``, and the state writes of each (ReplaySSM: ⌊steps/L⌋ flushes; conventional: one per step).
    2. Speculative decoding, ``drafts`` drafts (T = 1 + drafts tokens per round), random acceptance
       1..T per round, ``rounds`` rounds, window max(L, 2T): the accepted outputs against
       token-by-token decode of the accepted stream, and state writes against the snapshot-per-draft
       baseline (T snapshots per round).
    Returns {"decode": {...}, "speculative": {...}} with the measured numbers.
    """
    from .layer import Drafts, random_inputs, run_layer

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())

    inp = random_inputs(arch, batch=1, tokens=steps, heads=1, rows=rows, cols=cols, groups=1,
                        dtype=torch.float64, seed=seed)
    y_conv, s_conv = run_layer(inp, "fp32", engine="decode")
    y_rep, s_rep = run_layer(inp, f"shared:fp32@L{L}", engine="decode")
    dec = {"steps": steps, "L": L, "state": [rows, cols], "max_rel_diff": rel(y_rep, y_conv),
           "replay_state_writes": s_rep.state_writes, "conventional_state_writes": s_conv.state_writes,
           "replay_record_writes": s_rep.record_writes}
    log(f"{arch}: decode in float64, one head {rows}x{cols}, L = {L}, {steps} steps")
    log(f"  ReplaySSM vs conventional: max relative output difference {dec['max_rel_diff']:.2e}")
    log(f"  state writes: ReplaySSM {s_rep.state_writes} (+ {s_rep.record_writes} token records), "
        f"conventional {s_conv.state_writes}")

    T = 1 + drafts
    L_spec = max(L, 2 * T)
    g = torch.Generator().manual_seed(seed + 1)
    accept = torch.randint(1, T + 1, (rounds,), generator=g).tolist()
    n_tok = sum(accept)
    sp = random_inputs(arch, batch=1, tokens=n_tok, heads=1, rows=rows, cols=cols, groups=1,
                       dtype=torch.float64, seed=seed + 2)
    y_tok, _ = run_layer(sp, "fp32", engine="decode")
    y_spec, s_spec = run_layer(sp, f"shared:fp32@L{L_spec}", engine="decode", drafts=Drafts(drafts, accept))
    y_snap, s_snap = run_layer(sp, "fp32", engine="decode", drafts=Drafts(drafts, accept))
    spec = {"drafts": drafts, "tokens_per_round": T, "rounds": rounds, "L": L_spec, "accepted_tokens": n_tok,
            "max_rel_diff": rel(y_spec, y_tok), "snapshot_max_rel_diff": rel(y_snap, y_tok),
            "replay_state_writes": s_spec.state_writes, "snapshot_state_writes": s_snap.state_writes,
            "replay_record_writes": s_spec.record_writes}
    log(f"{arch}: speculative decoding in float64, {drafts} drafts (T = {T}), acceptance uniform in 1..{T}, "
        f"{rounds} rounds, L = {L_spec}")
    log(f"  {n_tok} accepted tokens match token-by-token decode to {spec['max_rel_diff']:.2e} (max relative)")
    log(f"  state writes: ReplaySSM {s_spec.state_writes} (+ {s_spec.record_writes} token records), "
        f"snapshot-per-draft baseline {s_snap.state_writes}")
    return {"decode": dec, "speculative": spec}


def equivalence_result(archs=ARCHS, seed: int = 0, log=print, **kwargs) -> dict:
    """``run_equivalence`` for each architecture, as the JSON object of a result (kind "sim", mode
    "equivalence", class ``sim_schema.SimEquivalenceResult``)."""
    from .bench.schema import Device, read_as
    from .provenance import provenance
    from .sim_schema import (
        EQUIVALENCE,
        ArchEquivalence,
        DecodeEquivalence,
        EquivalenceProvenance,
        SimEquivalenceResult,
        SpeculativeEquivalence,
        to_json,
    )

    results = {}
    for arch in archs:
        part = run_equivalence(arch, seed=seed, log=log, **kwargs)
        results[arch] = ArchEquivalence(decode=DecodeEquivalence(**part["decode"]),
                                        speculative=SpeculativeEquivalence(**part["speculative"]))
    p = provenance()
    prov = EquivalenceProvenance(created=p["created"], command=p["command"], git=p["git"], versions=p["versions"],
                                 device=read_as(Device, p["device"], "provenance.device"), mode=EQUIVALENCE,
                                 archs=list(archs), seed=seed, settings=dict(kwargs))
    return to_json(SimEquivalenceResult(provenance=prov, mode=EQUIVALENCE, results=results))


__all__ = ["ARCHS", "DEFAULT_POLICIES", "SimConfig", "format_table", "make_inputs", "plot", "run_equivalence", "equivalence_result", "run_sim",
           "window_ends"]
