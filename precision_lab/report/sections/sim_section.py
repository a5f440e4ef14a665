"""Section for ``kind: "sim"`` (``precision_lab/sim.py``, read through ``precision_lab/sim_schema.py``):
error vs step (log-log) and the window table; the ``--mode equivalence`` result as a table."""
from __future__ import annotations

from ..common import fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, ResultError, is_equivalence
from ..style import new_figure
from . import Context


def render(results: list[Result], ctx: Context) -> list:
    if is_equivalence(results[0]):
        return _equivalence(results[0])
    first = results[0].typed
    s = first.settings
    ends = first.window_ends
    for r in results[1:]:
        if r.typed.window_ends != ends:
            raise ResultError(f"{r.path}: window ends {r.typed.window_ends} differ from {results[0].path} "
                              f"({ends}) although the settings match")
    runs = {}
    for r in results:
        runs.update(r.typed.results)
    names = list(runs)
    blocks: list = [
        Heading(f"Single-layer simulation: {s.arch}, {s.steps:,} steps, seed {s.seed}", 3),
        Paragraph(f"One synthetic {s.arch} layer with random inputs: {s.heads} heads of {s.rows}×{s.cols} "
                  f"state, batch {s.batch}, per-step decay {s.decay[0]}–{s.decay[1]} (memory "
                  f"1/(1−α) log-spaced over the heads), jitter {s.jitter}, input scale {s.input_scale}. "
                  "Every policy computes in float32 on the scan engine (exact decode semantics); the reference "
                  "is the same inputs in float64 with no state rounding. Error per step: "
                  "‖y_t − y_ref,t‖ / ‖y_ref,t‖ over heads and rows, averaged over the batch."),
    ]
    fig, ax = new_figure()
    for i, name in enumerate(names):
        c = runs[name].curve
        pts = [(x, y) for x, y in zip(c.step, c.mean_rel_error) if y > 0]
        if pts:
            ax.loglog(*zip(*pts), label=name, color=ctx.colors(name), ls=ctx.colors.style(name), lw=1.5,
                      zorder=3 + len(names) - i)  # earlier policies on top: coinciding curves stay visible
    for e in ends:
        ax.axvline(e, color="0.6", ls=":", lw=0.8)
    ax.set_xlabel("decode step t (tokens)")
    ax.set_ylabel("relative output error vs float64 (dimensionless)")
    ax.set_title(f"{s.arch}: mean relative output error vs step, seed {s.seed}", fontsize=9)
    ax.legend(fontsize=8, title="policy", title_fontsize=8)
    path = ctx.figure(fig, f"sim-{s.arch}-{s.steps}")
    blocks.append(Figure(path, f"Relative output error vs decode step (log-log; per-step errors averaged in "
                               f"log-spaced bins), {s.arch}, {s.steps:,} steps. Dotted lines: window ends "
                               "of the table."))
    head = ["policy"] + [f"t = {e}" for e in ends] + ["state writes"]
    rows = [[n] + [fmt(v) for v in runs[n].mean_rel_error_last] + [fmt(runs[n].state_writes)] for n in names]
    blocks.append(Table(head, rows, caption=f"Mean relative output error over the {s.avg} steps ending at step t "
                                            f"({s.arch}, {s.steps:,} steps)"))
    blocks.append(Note(provenance_line(results, names)))
    return blocks


def _equivalence(r: Result) -> list:
    rows = []
    for arch, part in r.typed.results.items():
        dec, sp = part.decode, part.speculative
        rows += [
            [arch, "ReplaySSM vs conventional decode", f"{dec.steps} steps, L = {dec.L}",
             fmt(dec.max_rel_diff), fmt(dec.replay_state_writes), fmt(dec.conventional_state_writes)],
            [arch, "speculative decoding vs token by token", f"{sp.rounds} rounds of {sp.drafts} drafts, L = {sp.L}",
             fmt(sp.max_rel_diff), fmt(sp.replay_state_writes), fmt(sp.snapshot_state_writes)],
        ]
    return [Heading("ReplaySSM algebra in float64", 3),
            Paragraph("With identity (float64) storage only the algebra differs between ReplaySSM and conventional "
                      "decode, so the outputs must agree to float64 rounding; the write counts show what ReplaySSM "
                      "saves (baseline: one write per conventional step, or one snapshot per draft)."),
            Table(["architecture", "comparison", "setting", "max relative difference", "ReplaySSM state writes",
                   "baseline state writes"], rows, caption="float64 equivalence and state writes"),
            Note(provenance_line([r]))]
