"""Section for ``kind: "lmeval"`` (``evals/lmeval_runner.py`` + ``evals/stats.py``, read through
``evals/lmeval_schema.py``): accuracy deltas
against the fp32-state run with paired bootstrap CIs and McNemar p (Table-2 style), and accuracy by
quartile of the fp32 run's generation length (Figure-7 style)."""
from __future__ import annotations

from precision_lab.evals.lmeval_schema import AccuracyInterval, BucketComparison, TaskSummary

from ..common import MISSING, fmt, fmt_pts, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, ResultError, finite, model_name
from ..style import new_figure
from . import Context


def _tasks(results: list[Result]) -> dict[str, TaskSummary]:
    """task → summary, merged over results of one setup (check_mixed has refused overlapping tasks)."""
    tasks: dict[str, TaskSummary] = {}
    for r in results:
        tasks.update(r.typed.tasks)
    return tasks


def render(results: list[Result], ctx: Context) -> list:
    model = model_name(results[0]) or "unknown model"
    tasks = _tasks(results)
    cfg = results[0].typed.provenance.config
    pols = []
    for e in tasks.values():
        pols += [p for p in e.policies if p not in pols]
    prompt = _prompt_mode(cfg.model_args)
    blocks: list = [Heading(f"lm-eval accuracy: {model}" + ("" if prompt == "prefill" else f" (prompt {prompt})"), 3)]
    prov = Note(provenance_line(results, ["fp32", *pols]))
    conf = next((pe.delta.confidence for e in tasks.values() for pe in e.policies.values()), None)
    level = f"{100 * conf:g} %" if finite(conf) else "the stored"
    blocks.append(Paragraph(
        "Accuracy of each state policy and its difference from the fp32-state run on the same items "
        f"(paired: {level} percentile bootstrap CI over items, exact McNemar test on the discordant items; "
        "b = items only fp32 answered correctly, c = items only the policy did); the accuracy CI is each run's "
        "own (Wilson score interval for right/wrong scores, not paired). "
        f"Settings: scoring `{cfg.scoring}`, prompt `{prompt}`, "
        f"generation `{cfg.gen_kwargs or 'task default'}`, "
        f"few-shot {cfg.num_fewshot if cfg.num_fewshot is not None else 'task default'}, "
        f"SR seed {cfg.seed}, limit {cfg.limit if cfg.limit is not None else 'none'}."))

    served = sorted({name for e in tasks.values()
                     for run in [e.fp32, *e.policies.values()]
                     for name in run.served})
    if served:
        blocks.append(Paragraph(f"SSM layers served by: {', '.join(served)}."))

    # -- Table 2: deltas ---------------------------------------------------------------------------
    head = ["task", "policy", "n", "accuracy (%)", "accuracy CI (%)", "Δ vs fp32 (pts)", "95% CI (pts)",
            "McNemar p", "b / c", "changed responses"]
    rows = []
    for t, e in tasks.items():
        rows.append([t, "fp32", fmt(e.n), fmt_pts(e.fp32.accuracy), _acc_ci(e.fp32.accuracy_ci), MISSING, MISSING,
                     MISSING, MISSING, MISSING])
        for p, pe in e.policies.items():
            d, m = pe.delta, pe.mcnemar
            ci = f"[{fmt_pts(d.ci_low, True)}, {fmt_pts(d.ci_high, True)}]"
            rows.append([t, p, fmt(pe.n), fmt_pts(pe.accuracy), _acc_ci(pe.accuracy_ci), fmt_pts(d.delta, True), ci,
                         fmt(m.p_value, 3), f"{m.b} / {m.c}", fmt(pe.changed_responses)])
    blocks.append(Table(head, rows, caption="Accuracy and paired difference from the fp32-state run "
                                            "(percentage points)"))
    if len(tasks) > 1:
        # the paper's layout: one row per policy, one column per task
        head = ["policy"] + [f"{t} (n={tasks[t].n})" for t in tasks]
        wide = [["fp32"] + [fmt_pts(e.fp32.accuracy) for e in tasks.values()]]
        for p in pols:
            cells = []
            for e in tasks.values():
                pe = e.policies.get(p)
                cells.append(MISSING if pe is None else
                             f"{fmt_pts(pe.accuracy)} ({fmt_pts(pe.delta.delta, True)} "
                             f"[{fmt_pts(pe.delta.ci_low, True)}, {fmt_pts(pe.delta.ci_high, True)}])")
            wide.append([p] + cells)
        blocks.append(Table(head, wide, caption="Accuracy (%) per task, with the difference from fp32 and its 95% CI "
                                                "in points (Table-2 layout)"))
    ns = [e.n for e in tasks.values() if e.n > 0]
    if ns:
        blocks.append(Paragraph(f"With n = {min(ns)} items, one changed answer moves accuracy by "
                                f"{100 / min(ns):.2g} points: read the CIs before the deltas."))

    # -- forest plot of the deltas -----------------------------------------------------------------
    pts = [(t, p, pe.delta) for t, e in tasks.items() for p, pe in e.policies.items()]
    if pts:
        fig, ax = new_figure(7.0, 1.2 + 0.35 * len(pts))
        for i, (_t, p, d) in enumerate(pts):
            y = len(pts) - 1 - i
            ax.plot([100 * d.ci_low, 100 * d.ci_high], [y, y], color=ctx.colors(p), lw=2)
            ax.plot([100 * d.delta], [y], "o", color=ctx.colors(p), label=p)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(range(len(pts)), [f"{t} · {p}" for t, p, _ in reversed(pts)], fontsize=8)
        ax.set_xlabel("accuracy − fp32 accuracy (percentage points), with 95 % CI")
        ax.set_title(f"{model}: accuracy difference from the fp32-state run", fontsize=9)
        handles = {h.get_label(): h for h in ax.get_lines() if not h.get_label().startswith("_")}
        ax.legend(handles.values(), handles.keys(), fontsize=8, title="policy", title_fontsize=8)
        path = ctx.figure(fig, f"lmeval-delta-{model}")
        blocks += [Figure(path, "Paired accuracy differences from the fp32-state run with their bootstrap CIs."), prov]

    # -- per-bucket comparisons (tasks whose items carry a bucket, e.g. context length) -------------
    for t, e in tasks.items():
        blocks += _bucket_blocks(ctx, model, t, e, prov)

    # -- Figure 7: accuracy by fp32 generation-length quartile -------------------------------------
    for t, e in tasks.items():
        q = _quartiles(t, e)
        if q is None:
            continue
        labels, acc = q
        fig, ax = new_figure()
        x = list(range(1, len(labels) + 1))
        for i, (name, ys) in enumerate(acc.items()):
            # a small horizontal offset per run keeps equal accuracies (common with few items) visible
            dx = 0.05 * (i - (len(acc) - 1) / 2)
            xs = [xi + dx for xi, v in zip(x, ys) if finite(v)]
            ax.plot(xs, [100 * v for v in ys if finite(v)], marker="o", color=ctx.colors(name),
                    ls=ctx.colors.style(name), label=name)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_xlabel("quartile of the fp32 run's generation length (tokens)")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{model}, {t}: accuracy by fp32 generation length", fontsize=9)
        ax.legend(fontsize=8, title="policy", title_fontsize=8)
        path = ctx.figure(fig, f"lmeval-quartiles-{model}-{t}")
        blocks.append(Figure(path, f"{t}: accuracy within quartiles of the fp32 run's generation length "
                                   "(equal-count bins of items)."))
        head = ["policy"] + labels
        rows = [[n] + [fmt_pts(v) for v in ys] for n, ys in acc.items()]
        blocks += [Table(head, rows, caption=f"{t}: accuracy (%) by quartile of fp32 generation length"), prov]
    if not pts:
        blocks.append(prov)
    return blocks


def _acc_ci(ci: AccuracyInterval | None) -> str:
    """An accuracy CI in percent, ``[lo, hi]`` (older files have none)."""
    return MISSING if ci is None else f"[{fmt_pts(ci.low)}, {fmt_pts(ci.high)}]"


def _prompt_mode(model_args: str) -> str:
    """How prompts entered the state (the ``prompt=`` model arg of replayssm; prefill by default)."""
    for part in (model_args or "").split(","):
        k, _, v = part.partition("=")
        if k.strip() == "prompt":
            return v.strip()
    return "prefill"


def _delta_cells(cmp: BucketComparison | None) -> list[str]:
    if cmp is None:
        return [MISSING, MISSING, MISSING]
    d, m = cmp.delta, cmp.mcnemar
    return [f"{fmt_pts(d.delta, True)} [{fmt_pts(d.ci_low, True)}, {fmt_pts(d.ci_high, True)}]",
            fmt(m.p_value, 3), f"{m.b} / {m.c}"]


def _bucket_blocks(ctx: Context, model: str, task: str, e: TaskSummary, prov) -> list:
    """Accuracy per item bucket (a task's own bucketing, e.g. context length in bytes), each policy
    against fp32 and against its matched reference: paired bootstrap CI and exact McNemar p per bucket."""
    pols = {p: pe for p, pe in e.policies.items() if pe.by_bucket}
    if not e.fp32.by_bucket:
        return []
    base = {b.bucket: b for b in e.fp32.by_bucket}
    labels = [b.bucket for b in e.fp32.by_bucket]
    head = ["policy", "bucket", "n", "accuracy (%)", "accuracy CI (%)", "fp32 (%)", "Δ vs fp32 (pts) [95% CI]",
            "McNemar p", "b / c", "reference", "Δ vs reference (pts) [95% CI]", "McNemar p (reference)",
            "b / c (reference)"]
    rows = [["fp32", lab, fmt(base[lab].n), fmt_pts(base[lab].accuracy), _acc_ci(base[lab].accuracy_ci), MISSING,
             MISSING, MISSING, MISSING, MISSING, MISSING, MISSING, MISSING] for lab in labels]
    for p, pe in pols.items():
        vs = pe.vs_reference
        ref_b = {b.bucket: b for b in (vs.by_bucket or [])} if vs is not None else {}
        for b in pe.by_bucket:
            fp32_bucket = base.get(b.bucket)
            rows.append([p, b.bucket, fmt(b.n), fmt_pts(b.accuracy), _acc_ci(b.accuracy_ci),
                         fmt_pts(fp32_bucket.accuracy if fp32_bucket else None), *_delta_cells(b),
                         vs.reference if vs is not None else MISSING, *_delta_cells(ref_b.get(b.bucket))])
    blocks: list = [Table(head, rows, caption=f"{task}: accuracy (%) by item bucket, with its own CI, and paired "
                                              "differences from fp32 and from the matched reference on the same items "
                                              "(points, 95 % bootstrap CI over items; exact McNemar test)")]
    fig, ax = new_figure()
    x = list(range(len(labels)))
    ax.plot(x, [100 * base[lab].accuracy for lab in labels], marker="o", color=ctx.colors("fp32"), label="fp32")
    for p, pe in pols.items():
        acc = {b.bucket: b.accuracy for b in pe.by_bucket}
        ax.plot(x, [100 * acc[lab] if lab in acc else float("nan") for lab in labels], marker="o",
                color=ctx.colors(p), ls=ctx.colors.style(p), label=p)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlabel("item bucket")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{model}, {task}: accuracy by bucket", fontsize=9)
    ax.legend(fontsize=7, title="policy", title_fontsize=8)
    path = ctx.figure(fig, f"lmeval-buckets-{model}-{task}")
    blocks += [Figure(path, f"{task}: accuracy per item bucket for each policy."), prov]
    return blocks


def _quartiles(task: str, e: TaskSummary):
    """(column labels, run → accuracies per quartile) or None when the runs stored no lengths."""
    per = {p: pe.by_fp32_length_quartile for p, pe in e.policies.items() if pe.by_fp32_length_quartile}
    if not per:
        return None
    first = next(iter(per.values()))
    labels = []
    for row in first:
        rng = f"{row.len_min}–{row.len_max}" if row.len_min is not None else "empty"
        labels.append(f"Q{row.quartile} ({rng}, n={row.n})")
    acc = {"fp32": [row.accuracy["fp32"] for row in first]}
    for p, rows in per.items():
        fp = [row.accuracy["fp32"] for row in rows]
        if fp != acc["fp32"]:
            raise ResultError(f"lmeval task {task!r}: the fp32 accuracy by quartile differs between policies "
                              f"({fp} vs {acc['fp32']}); the runs are not paired on the same items")
        acc[p] = [row.accuracy["policy"] for row in rows]
    return labels, acc
