"""Section for the generation benchmark (kind ``bench-generate``, ``scripts/bench_generate.py``, read
through ``precision_lab.bench.generate_schema``): ms per decode step of whole models, plain
transformers against each state policy on the fast decode path, per preset and batch.

Per file: the GPU correctness check (fast path against the torch decode engine) and its outcome;
per preset a figure (ms/step vs batch, each lossy policy ÷ fp32, fp32 ÷ plain transformers) and two
tables (ms/step with both ratios per batch; prefill, tokens/s and the implementation that served the
SSM layers); then the targets (each lossy policy ≤ 1.15× fp32 at every batch, fp32 ≤ 0.25× plain
transformers at batch 8) marked met or missed with the measured ratio. Only the presets, batches
and rows the file holds are shown; a target whose rows were not timed says so.

A run whose check was skipped or failed is labelled in every caption, figure and verdict it
appears in: skipped, its timings and ratios are unverified; failed, its ratios are not reported and
no target counts as met (the same rule as the file's own ``met`` flags).
"""
from __future__ import annotations

from precision_lab.bench.generate_schema import (
    FP32_BATCH,
    FP32_MAX,
    LOSSY_MAX,
    PLAIN,
    GenerateResult,
    Row,
)

from ..common import MISSING, fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, device_str
from . import Context

NOT_REPORTED = "not reported (check failed)"


def check_label(t: GenerateResult) -> str:
    """The words every quote of a run's numbers carries ('' when its check passed)."""
    return {"passed": "", "skipped": "correctness check SKIPPED: timings and ratios unverified",
            "failed": "correctness check FAILED: ratios are not results"}[t.check.status]


def _tag(text: str, t: GenerateResult) -> str:
    label = check_label(t)
    return f"{text} [{label}]" if label else text


def render(results: list[Result], ctx: Context) -> list:
    blocks: list = []
    for r in results:
        blocks += _render_one(r, ctx)
    return blocks


def _render_one(r: Result, ctx: Context) -> list:
    t: GenerateResult = r.typed
    s = t.settings
    policies = [x for x in s.rows if x != PLAIN]
    prov = Note(provenance_line([r], policies))
    presets = [p for p in s.presets if any(x.preset == p for x in t.rows)]
    blocks: list = [
        Heading(_tag(f"Generation: {', '.join(presets) or 'no rows'} on {device_str(r.provenance)}", t), 3),
        Paragraph(f"Whole-model generation (weights: {s.weights}): a {s.prompt}-token prompt, then {s.new_tokens} "
                  f"generated tokens per row on the fast decode path (`precision_lab.generation`: decode-step "
                  f"kernels, CUDA graphs); plain transformers is `model.generate` on the unadapted model, timed over "
                  f"{s.plain_transformers_tokens} tokens. ms/step is the median decode step; ratios are of rows "
                  "timed in the same run. The run asked for presets " + ", ".join(f"`{p}`" for p in s.presets)
                  + " at batch " + ", ".join(map(str, s.batches)) + "; the file holds "
                  + ("; ".join(f"`{p}` at batch " + ", ".join(map(str, _batches(t, p))) for p in presets)
                     or "no timed rows") + "." + _not_timed(t, presets)),
    ]
    blocks += _check_blocks(t, prov)
    for preset in presets:
        blocks += _preset_blocks(t, preset, ctx, prov)
    failed = [x for x in t.rows if x.error is not None]
    if failed:
        blocks += [Table(["preset", "batch", "row", "error"], [[x.preset, str(x.batch), x.row, x.error[:160]]
                                                               for x in failed],
                         caption=_tag("Rows that failed to run (no timings)", t)), prov]
    blocks += [_targets_table(t, presets), prov]
    return blocks


def _not_timed(t: GenerateResult, presets: list[str]) -> str:
    """' Not timed: ...' naming the presets and batches the run asked for and the file lacks."""
    s = t.settings
    missing = [f"`{p}`" for p in s.presets if p not in presets]
    missing += [f"`{p}` at batch {b}" for p in presets for b in s.batches if b not in _batches(t, p)]
    return f" Not timed: {', '.join(missing)}." if missing else ""


def _batches(t: GenerateResult, preset: str) -> list[int]:
    return sorted({x.batch for x in t.rows if x.preset == preset})


def _row_names(t: GenerateResult, preset: str) -> list[str]:
    held = {x.row for x in t.rows if x.preset == preset}
    return [x for x in t.settings.rows if x in held]


# ------------------------------------------------------------------------------------------------
def _check_blocks(t: GenerateResult, prov: Note) -> list:
    chk = t.check
    if chk.status == "skipped":
        return [Paragraph("**Correctness check SKIPPED**: this run timed the fast path without checking it against "
                          "the torch decode engine (`--skip-check`). Every timing and ratio of this file is "
                          "unverified, and is labelled so below.")]
    verdicts = [(p, pol, v) for p, vs in chk.presets.items() for pol, v in vs.items()]
    bad = [(p, pol) for p, pol, v in verdicts if not v.ok]
    if bad:
        head = (f"**Correctness check FAILED**: {len(bad)} of {len(verdicts)} verdicts failed ("
                + ", ".join(f"`{pol}` on {p}" for p, pol in bad) + "). The fast path did not match the torch decode "
                "engine, so its ratios are not reported and no target counts as met.")
    else:
        head = (f"Correctness check passed: all {len(verdicts)} verdicts (" + ", ".join(chk.presets)
                + ", fp32 weights on the GPU) agree.")
    rows = [[p, pol, "pass" if v.ok else "FAIL", fmt(v.disagreement), fmt(v.effect), v.criterion,
             fmt(v.greedy_tokens_identical), _graphs(v.graphs), _served(v.served)] for p, pol, v in verdicts]
    return [Paragraph(head + f" Criterion: {chk.criterion}."),
            Table(["check preset", "policy", "fast path = decode engine", "disagreement", "policy effect",
                   "criterion", "greedy tokens identical", "CUDA graphs", "SSM layers served by"], rows,
                  caption=_tag("Correctness check on the GPU: the fast path against the torch decode engine, "
                               "fed the same tokens", t)),
            prov]


def _graphs(g) -> str:
    if not g.enabled:
        return "off"
    if g.disabled_reason:
        return f"off: {g.disabled_reason[:60]}"
    return f"{fmt(g.captured)} captured, {fmt(g.replays)} replays"


def _served(served: dict) -> str:
    if served.get("transformers") == "unadapted":
        return "transformers (unadapted model)"
    return ", ".join(f"`{k}` × {v} layers" for k, v in served.items()) or MISSING


# ------------------------------------------------------------------------------------------------
def _ratio_cell(t: GenerateResult, num: Row | None, den: Row | None) -> str:
    if num is None or den is None or num.row == den.row or num.step_ms_median is None or den.step_ms_median is None:
        return MISSING
    if t.check.status == "failed":
        return NOT_REPORTED
    return fmt(num.step_ms_median / den.step_ms_median)


def _preset_blocks(t: GenerateResult, preset: str, ctx: Context, prov: Note) -> list:
    batches = _batches(t, preset)
    names = _row_names(t, preset)
    at = {(x.batch, x.row): x for x in t.rows if x.preset == preset}
    blocks: list = [Heading(_tag(f"{preset}", t), 4)]
    fig = _figure(t, preset, batches, names, at, ctx)
    if fig is not None:
        blocks += [fig, prov]
    head = ["row"]
    for b in batches:
        head += [f"B={b} ms/step", f"B={b} ÷ fp32", f"B={b} ÷ plain"]
    body = []
    for name in names:
        cells = [name]
        for b in batches:
            x = at.get((b, name))
            ms = MISSING if x is None else ("failed" if x.error else fmt(x.step_ms_median))
            cells += [ms, _ratio_cell(t, x, at.get((b, "fp32"))), _ratio_cell(t, x, at.get((b, PLAIN)))]
        body.append(cells)
    blocks.append(Table(head, body, caption=_tag(
        f"{preset}: ms per decode step (median) and its ratio to the fp32 policy and to plain transformers, "
        "per batch B", t)))
    head = ["row"]
    for b in batches:
        head += [f"B={b} prefill (s)", f"B={b} tokens/s"]
    head += ["SSM layers served by", "CUDA graphs"]
    body = []
    for name in names:
        xs = [at.get((b, name)) for b in batches]
        cells = [name]
        for x in xs:
            cells += [MISSING, MISSING] if x is None else [fmt(x.prefill_s), fmt(x.tokens_per_s)]
        cells += [_per_batch(batches, xs, lambda x: _served(x.served) if not x.error else "failed"),
                  _per_batch(batches, xs, lambda x: _graphs(x.graphs) if not x.error else "failed")]
        body.append(cells)
    blocks += [Table(head, body, caption=_tag(f"{preset}: prefill time, throughput (batch ÷ median step) and the "
                                              "implementation that served the SSM layers", t)), prov]
    return blocks


def _per_batch(batches: list[int], rows: list, show) -> str:
    """One text when every batch gives the same, else 'B=1: ...; B=8: ...'."""
    texts = [(b, show(x)) for b, x in zip(batches, rows) if x is not None]
    distinct = list(dict.fromkeys(v for _, v in texts))
    if len(distinct) <= 1:
        return distinct[0] if distinct else MISSING
    return "; ".join(f"B={b}: {v}" for b, v in texts)


def _figure(t: GenerateResult, preset: str, batches: list[int], names: list[str], at: dict, ctx: Context):
    from .bench_section import _finish_axes, _subplots

    timed = [x for x in at.values() if x.step_ms_median is not None]
    if not timed:
        return None
    failed = t.check.status == "failed"
    fig, axes = _subplots(3)
    for name in names:
        pts = [(b, at[(b, name)].step_ms_median) for b in batches
               if (b, name) in at and at[(b, name)].step_ms_median is not None]
        if not pts:
            continue
        plain = name == PLAIN
        kw = dict(marker="o", ms=4, label="plain transformers (model.generate)" if plain else name,
                  color="0.5" if plain else ctx.colors(name), ls="--" if plain else ctx.colors.style(name))
        axes[0].plot(*zip(*pts), **kw)
        if failed or plain or name == "fp32":
            continue
        rp = [(b, at[(b, name)].step_ms_median / at[(b, "fp32")].step_ms_median) for b, _ in pts
              if (b, "fp32") in at and at[(b, "fp32")].step_ms_median is not None]
        if rp:
            axes[1].plot(*zip(*rp), **kw)
    fp = [(b, at[(b, "fp32")].step_ms_median / at[(b, PLAIN)].step_ms_median) for b in batches
          if (b, "fp32") in at and (b, PLAIN) in at and at[(b, "fp32")].step_ms_median is not None
          and at[(b, PLAIN)].step_ms_median is not None]
    if fp and not failed:
        axes[2].plot(*zip(*fp), marker="o", ms=4, color=ctx.colors("fp32"), label="fp32 ÷ plain transformers")
    if not failed:
        axes[1].axhline(LOSSY_MAX, color="tab:red", ls=":", label=f"target ≤ {LOSSY_MAX:g}× fp32")
        axes[1].axhline(1.0, color="0.5", lw=0.8)
        if fp:
            axes[2].axhline(FP32_MAX, color="tab:red", ls=":", label=f"target ≤ {FP32_MAX:g}× at batch {FP32_BATCH}")
    _finish_axes(axes, "batch B (sequences)", ("ms per decode step (median)", "÷ fp32 policy (×)",
                                               "fp32 ÷ plain transformers (×)"))
    if failed:
        for ax in axes[1:]:
            for txt in list(ax.texts):  # "not measured" would be wrong: measured, but not a result
                txt.remove()
            ax.text(0.5, 0.5, NOT_REPORTED, ha="center", va="center", transform=ax.transAxes, color="tab:red")
    axes[0].set_yscale("log")
    for ax in axes:
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
    lo = [y for line in axes[1].get_lines() for y in line.get_ydata()]
    if lo:
        axes[1].set_ylim(min(0.9, min(lo) - 0.05), max(LOSSY_MAX + 0.1, max(lo) + 0.05))
    axes[2].set_ylim(bottom=0)
    fig.suptitle(_tag(f"{preset}: generation on {t.provenance.device.gpu or 'CPU'}", t), fontsize=9)
    path = ctx.figure(fig, f"bench-generate-{preset}")
    return Figure(path, _tag(f"{preset}: ms per decode step against the batch for plain transformers and each policy "
                             "on the fast path; each lossy policy ÷ fp32 against its target; fp32 ÷ plain "
                             "transformers against its target at batch 8", t))


# ------------------------------------------------------------------------------------------------
def _targets_table(t: GenerateResult, presets: list[str]) -> Table:
    status = t.check.status
    by = {(x.preset, x.batch, x.row, x.over): x for x in t.ratios}
    rows = []
    for preset in presets:
        batches = _batches(t, preset)
        names = _row_names(t, preset)
        for b in batches:
            for name in t.settings.rows:
                if name in (PLAIN, "fp32"):
                    continue
                q = f"`{name}` ÷ `fp32`"
                x = by.get((preset, b, name, "fp32"))
                if x is None:
                    why = ("not timed" if name not in names else "no time (row or fp32 failed, or fp32 not timed)")
                    rows.append([preset, str(b), q, MISSING, f"≤ {LOSSY_MAX:g}", f"not measured: {why}"])
                else:
                    rows.append([preset, str(b), q, *_verdict(x.ratio, LOSSY_MAX, status)])
        q = "`fp32` ÷ plain transformers"
        x = by.get((preset, FP32_BATCH, "fp32", PLAIN))
        if x is None:
            why = (f"batch {FP32_BATCH} not timed" if FP32_BATCH not in batches else
                   "fp32 or plain transformers not timed at that batch")
            rows.append([preset, str(FP32_BATCH), q, MISSING, f"≤ {FP32_MAX:g}", f"not measured: {why}"])
        else:
            rows.append([preset, str(FP32_BATCH), q, *_verdict(x.ratio, FP32_MAX, status)])
    return Table(["preset", "batch", "ratio of ms/step", "measured", "target", "verdict"], rows, caption=_tag(
        f"Targets: each lossy policy ≤ {LOSSY_MAX:g}× the fp32 policy at every batch; the fp32 policy ≤ "
        f"{FP32_MAX:g}× plain transformers at batch {FP32_BATCH}", t))


def _verdict(ratio: float, limit: float, status: str) -> list[str]:
    """[measured, target, verdict] of one target."""
    if status == "failed":
        return [NOT_REPORTED, f"≤ {limit:g}", "not judged: correctness check FAILED"]
    met = ratio <= limit
    verdict = "met" if met else "MISSED"
    if status == "skipped":
        verdict += " (unverified: correctness check SKIPPED)"
    return [fmt(ratio), f"≤ {limit:g}", verdict]
