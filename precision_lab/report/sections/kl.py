"""Section for ``kind: "kl"`` (``evals/kl.py`` summary.json): KL vs length per policy, log-log with
95 % CI bands over documents (Figure-6 style), mean KL per length bucket, overall statistics."""
from __future__ import annotations

import math

from ..common import fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, ResultError, finite, model_name
from ..style import new_figure
from . import Context

# Above this many log2 buckets the table keeps every other one, counted back from the last, so the
# longest lengths always appear (a 128K-token run has 18 buckets).
MAX_TABLE_BUCKETS = 9


def bucket_label(b: dict) -> str:
    return f"{b['lo']}" if b["hi"] <= b["lo"] else f"{b['lo']}–{b['hi']}"


def table_buckets(buckets: list[dict]) -> list[int]:
    """Indices of the log2 buckets the fixed-length table shows."""
    n = len(buckets)
    if n <= MAX_TABLE_BUCKETS:
        return list(range(n))
    return sorted(range(n - 1, -1, -2))


def render(results: list[Result], ctx: Context) -> list:
    first = results[0].data
    runs: dict[str, dict] = {}
    for r in results:
        for p, v in r.data["results"].items():
            if "buckets" not in v or "log2" not in v["buckets"] or "overall" not in v:
                raise ResultError(f"{r.path}: policy {p!r} has no log2 buckets or overall statistics")
            runs[p] = v
    names = list(runs)
    ref_edges = [(b["lo"], b["hi"]) for b in runs[names[0]]["buckets"]["log2"]]
    for p in names[1:]:
        if [(b["lo"], b["hi"]) for b in runs[p]["buckets"]["log2"]] != ref_edges:
            raise ResultError(f"KL results for {p!r} and {names[0]!r} have different length buckets although their "
                              "settings match")
    model = model_name(results[0]) or "unknown model"
    data = first["data"]
    eng = first.get("engine") or {}
    impl = ", ".join(eng.get("implementations") or []) if isinstance(eng, dict) else str(eng)
    blocks: list = [
        Heading(f"KL vs length: {model}, {data.get('source')}, {data.get('docs')} docs × {data.get('tokens')} tokens", 3),
        Paragraph(f"KL(p_fp32 ‖ p_policy) per position under teacher forcing against the {first.get('reference', 'fp32')}"
                  f"-state run of the same model, from fp32 logits in fp64; {data.get('docs')} documents of "
                  f"{data.get('tokens')} tokens from `{data.get('source')}`, prefill {data.get('prefill')}, "
                  f"{data.get('decode_tokens')} decode positions each. Length = "
                  f"{first.get('length_definition', 'decode steps taken when the position is predicted')}. "
                  + (f"Served by: {impl}." if impl else "")),
    ]

    # -- the figure: mean per log2 bucket, CI band over documents ---------------------------------
    fig, ax = new_figure()
    dropped = []
    for k, p in enumerate(names):
        rows = runs[p]["buckets"]["log2"]
        x = [math.sqrt(b["lo"] * max(b["hi"], b["lo"])) for b in rows]
        y = [b.get("mean") for b in rows]
        keep = [i for i, v in enumerate(y) if finite(v) and v > 0]
        if len(keep) < len(rows):
            dropped.append(p)
        if not keep:
            continue
        xs, ys = [x[i] for i in keep], [y[i] for i in keep]
        ax.plot(xs, ys, marker="o", ms=3, lw=1.5, color=ctx.colors(p), ls=ctx.colors.style(p), label=p,
                zorder=3 + len(names) - k)  # earlier policies on top: coinciding curves stay visible
        band = [(x[i], rows[i]["ci95"]) for i in keep if rows[i].get("ci95")]
        if band:
            # a t interval over few documents can reach below zero; on a log axis its lower end is
            # drawn at a tenth of the smallest plotted mean (stated in the caption)
            floor = min(ys) / 10
            ax.fill_between([b[0] for b in band], [max(c[0], floor) for _, c in band], [c[1] for _, c in band],
                            color=ctx.colors(p), alpha=0.15, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length (decode steps; log2 buckets, geometric centre)")
    ax.set_ylabel("mean KL(p_fp32 ‖ p_policy) (nats per token)")
    ax.set_title(f"{model}: KL vs length, {data.get('docs')} docs × {data.get('decode_tokens')} decode tokens",
                 fontsize=9)
    ax.legend(fontsize=8, title="policy", title_fontsize=8)
    path = ctx.figure(fig, f"kl-{model}")
    methods = {b.get("ci_method", "t") for p in names for b in runs[p]["buckets"]["log2"] if b.get("ci95")}
    how = {"bootstrap-percentile": "percentile-bootstrap intervals", "t": "t intervals"}
    cap = ("Mean KL per log2 length bucket (log-log) with 95 % "
           + " / ".join(how.get(m, str(m)) for m in sorted(methods)) + " over documents (shaded"
           + ("; lower ends at or below zero drawn at a tenth of the smallest mean" if "t" in methods else "")
           + ")." if methods else "Mean KL per log2 length bucket (log-log); fewer than 2 documents: no intervals.")
    if dropped:
        cap += f" Buckets with zero mean KL are not drawn for: {', '.join(dropped)}."
    blocks.append(Figure(path, cap))

    # -- mean KL at fixed lengths ------------------------------------------------------------------
    b0 = runs[names[0]]["buckets"]["log2"]
    idx = table_buckets(b0)
    head = ["policy"] + [f"length {bucket_label(b0[i])}" for i in idx]
    rows = [[p] + [fmt(runs[p]["buckets"]["log2"][i].get("mean")) for i in idx] for p in names]
    blocks.append(Table(head, rows, caption=f"Mean KL (nats per token) at fixed generated lengths (log2 buckets "
                                            f"of decode steps), {model}"))

    # -- overall -----------------------------------------------------------------------------------
    head = ["policy", "mean", "median", "q90", "q95", "q99", "max", "top-1 agreement", "95% CI of mean (docs)",
            "NLL", "NLL fp32"]
    rows = []
    for p in names:
        o = runs[p]["overall"]
        ci = o.get("doc_ci95")
        rows.append([p, fmt(o.get("mean")), fmt(o.get("median")), fmt(o.get("q90")), fmt(o.get("q95")),
                     fmt(o.get("q99")), fmt(o.get("max")), fmt(o.get("top1_agreement")),
                     f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "—", fmt(o.get("nll")), fmt(o.get("nll_ref"))])
    blocks.append(Table(head, rows, caption="KL over all decode positions (nats per token), top-1 agreement with "
                                            f"the fp32-state run, and next-token NLL (nats), {model}"))
    blocks.append(Note(provenance_line(results, names)))
    return blocks
