"""Section for ``kind: "kl"`` (``evals/kl.py`` summary.json): KL vs length per policy, log-log with
95 % CI bands over documents (Figure-6 style), each policy beside its floor; mean KL per length
bucket, overall statistics with the floor verdict, and the buffer-length (L) sweep.

Version-2 files compare each policy with its matched reference (the same arithmetic with fp32
storage) and carry the floor (KL between the fp32 run and that reference); version-1 files compare
with the fp32 run and have no floor, which the text then says."""
from __future__ import annotations

import math
from collections import defaultdict

from precision_lab.evals.kl_schema import WITHIN_FLOOR, has_floor, read_kl_summary

from ..common import MISSING, fmt, provenance_line
from ..document import Bullets, Figure, Heading, Note, Paragraph, Table
from ..results import Result, ResultError, finite, model_name
from ..style import new_figure
from . import Context

# Above this many log2 buckets the table keeps every other one, counted back from the last, so the
# longest lengths always appear (a 128K-token run has 18 buckets).
MAX_TABLE_BUCKETS = 9
WITHIN_MARK = "‡"


def bucket_label(b: dict) -> str:
    return f"{b['lo']}" if b["hi"] <= b["lo"] else f"{b['lo']}–{b['hi']}"


def table_buckets(buckets: list[dict]) -> list[int]:
    """Indices of the log2 buckets the fixed-length table shows."""
    n = len(buckets)
    if n <= MAX_TABLE_BUCKETS:
        return list(range(n))
    return sorted(range(n - 1, -1, -2))


def _ci(ci) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else MISSING


def _cell(b: dict) -> str:
    """A mean KL with the within-floor mark when the bucket does not clear its floor."""
    return fmt(b.get("mean")) + (f" {WITHIN_MARK}" if b.get("verdict") == WITHIN_FLOOR else "")


def _curve(ax, rows: list[dict], key: str, **kw):
    x = [math.sqrt(b["lo"] * max(b["hi"], b["lo"])) for b in rows]
    keep = [i for i, b in enumerate(rows) if finite(b.get(key)) and b[key] > 0]
    if keep:
        ax.plot([x[i] for i in keep], [rows[i][key] for i in keep], **kw)
    return x, keep


def _family(policy: str) -> tuple[str, int]:
    """(the policy without its L, L) — policies that differ only in L form one family."""
    from precision_lab.policy import StatePolicy

    p = StatePolicy.parse(policy)
    if not p.is_replay:
        return policy, 0
    return StatePolicy(p.mode, p.update, p.read, 16, 0, p.gdn_fold).short_str().replace("@L16", ""), p.buffer_len


def render(results: list[Result], ctx: Context) -> list:
    runs: dict[str, dict] = {}
    refs: dict[str, dict] = {}
    summaries = []
    for r in results:
        try:
            s = read_kl_summary(r.data)
        except ValueError as e:
            raise ResultError(f"{r.path}: {e}") from e
        summaries.append(s)
        for p, v in s["results"].items():
            if "buckets" not in v or "log2" not in v["buckets"] or "overall" not in v:
                raise ResultError(f"{r.path}: policy {p!r} has no log2 buckets or overall statistics")
            runs[p] = v
        refs.update(s.get("references") or {})
    floors = all(has_floor(s) for s in summaries)
    names = list(runs)
    ref_edges = [(b["lo"], b["hi"]) for b in runs[names[0]]["buckets"]["log2"]]
    for p in names[1:]:
        if [(b["lo"], b["hi"]) for b in runs[p]["buckets"]["log2"]] != ref_edges:
            raise ResultError(f"KL results for {p!r} and {names[0]!r} have different length buckets although their "
                              "settings match")
    first = summaries[0]
    model = model_name(results[0]) or "unknown model"
    data = first["data"]
    eng = first.get("engine") or {}
    impl = ", ".join(eng.get("implementations") or []) if isinstance(eng, dict) else str(eng)
    against = "its matched reference" if floors else "the fp32-state run"
    blocks: list = [
        Heading(f"KL vs length: {model}, {data.get('source')}, {data.get('docs')} docs × {data.get('tokens')} tokens", 3)]
    if floors:
        blocks.append(Paragraph(
            "Each policy is compared with its *matched reference*: the same arithmetic with fp32 storage "
            "(`conventional:F` with `conventional:fp32`, `shared:F@Ln` with `shared:fp32@Ln`, `split:H/F@Ln` with "
            "`split:fp32/fp32@Ln` and the same GDN fold), so its KL measures the storage format alone and a "
            "lossless policy gives exactly 0. The *floor* of a policy is KL(p_fp32 ‖ p_reference): how far the "
            "reference's arithmetic order alone moves the predictions from the fp32 run. A policy whose KL does "
            f"not clear its floor (the 95 % interval over documents of KL − floor does not lie above 0) is marked "
            f"{WITHIN_MARK} / *within floor*: at that length its storage effect is no larger than a change of "
            "summation order."))
    else:
        blocks.append(Paragraph(
            "These results (schema version 1) compare each policy with the fp32-state run, which evaluates the "
            "recurrence in another order than the ReplaySSM and per-token conventional rows, and carry no floor: "
            "small KLs mix storage and arithmetic-order effects and cannot be told apart here."))
    blocks.append(Paragraph(
        f"KL(p_reference ‖ p_policy) per position under teacher forcing against {against}, from fp32 logits in "
        f"fp64; {data.get('docs')} documents of {data.get('tokens')} tokens from `{data.get('source')}`, prefill "
        f"{data.get('prefill')}, {data.get('decode_tokens')} decode positions each. Length = "
        f"{first.get('length_definition', 'decode steps taken when the position is predicted')}. "
        + (f"Served by: {impl}." if impl else "")))

    blocks += _layout_notes(summaries, runs)

    # -- the figure: policies at their own L, mean per log2 bucket, CI band over documents, floors ---
    fams = defaultdict(dict)
    for p in names:
        f, L = _family(p)
        fams[f][L] = p
    sweep = {f: d for f, d in fams.items() if len(d) > 1}
    main = [p for p in names if not (_family(p)[0] in sweep and _family(p)[1] not in (0, 16))]
    blocks.append(_kl_figure(ctx, main, runs, model, data, floors, f"kl-{model}",
                             "Mean KL per log2 length bucket (log-log)"))

    # -- mean KL at fixed lengths ----------------------------------------------------------------
    b0 = runs[names[0]]["buckets"]["log2"]
    idx = table_buckets(b0)
    head = ["policy"] + (["reference"] if floors else []) + [f"length {bucket_label(b0[i])}" for i in idx]
    rows = [[p] + ([runs[p].get("reference", MISSING)] if floors else [])
            + [_cell(runs[p]["buckets"]["log2"][i]) for i in idx] for p in names]
    cap = f"Mean KL (nats per token) against {against} at fixed generated lengths (log2 buckets of decode steps), {model}"
    if floors:
        cap += f"; {WITHIN_MARK}: within floor"
    blocks.append(Table(head, rows, caption=cap))
    if floors and refs:
        head = ["reference (floor = KL(fp32 ‖ reference))", "policies"] + [f"length {bucket_label(b0[i])}" for i in idx]
        rows = [[ref, ", ".join(e.get("policies") or [])] + [fmt(e["floor"]["buckets"]["log2"][i].get("mean"))
                                                              for i in idx] for ref, e in refs.items()]
        blocks.append(Table(head, rows, caption=f"Floors: mean KL(p_fp32 ‖ p_reference) at the same lengths, {model}"))

    # -- overall -----------------------------------------------------------------------------------
    if floors:
        head = ["policy", "reference", "mean", "95% CI of mean (docs)", "floor", "excess over floor [95% CI]",
                "verdict", "median", "q99", "max", "top-1 agreement", "NLL", "NLL reference", "KL vs fp32"]
        rows = []
        for p in names:
            o = runs[p]["overall"]
            ex = o.get("excess") or {}
            vs = (runs[p].get("vs_fp32") or {}).get("overall") or {}
            rows.append([p, runs[p].get("reference", MISSING), fmt(o.get("mean")), _ci(o.get("doc_ci95")),
                         fmt(o.get("floor_mean")), f"{fmt(ex.get('delta'))} {_ci(ex.get('ci95'))}",
                         o.get("verdict") or MISSING, fmt(o.get("median")), fmt(o.get("q99")), fmt(o.get("max")),
                         fmt(o.get("top1_agreement")), fmt(o.get("nll")), fmt(o.get("nll_ref")), fmt(vs.get("mean"))])
        blocks.append(Table(head, rows, caption="KL over all decode positions against the matched reference (nats per "
                                                "token), its floor and verdict, top-1 agreement with the reference, "
                                                f"next-token NLL (nats) and the unmatched KL(fp32 ‖ policy), {model}"))
    else:
        head = ["policy", "mean", "median", "q90", "q95", "q99", "max", "top-1 agreement", "95% CI of mean (docs)",
                "NLL", "NLL fp32"]
        rows = []
        for p in names:
            o = runs[p]["overall"]
            rows.append([p, fmt(o.get("mean")), fmt(o.get("median")), fmt(o.get("q90")), fmt(o.get("q95")),
                         fmt(o.get("q99")), fmt(o.get("max")), fmt(o.get("top1_agreement")), _ci(o.get("doc_ci95")),
                         fmt(o.get("nll")), fmt(o.get("nll_ref"))])
        blocks.append(Table(head, rows, caption="KL over all decode positions (nats per token), top-1 agreement with "
                                                f"the fp32-state run, and next-token NLL (nats), {model}"))

    # -- the L sweep -------------------------------------------------------------------------------
    if sweep:
        blocks += _l_sweep(ctx, sweep, runs, model, data, floors)

    # -- SR seed spread ----------------------------------------------------------------------------
    seeded = {p: runs[p]["seeds"] for p in names if runs[p].get("seeds")}
    if seeded:
        head = ["policy", "seeds", "mean KL per seed", "spread (max − min)", "std over seeds", "floor"]
        rows = [[p, ", ".join(map(str, s["seeds"])), ", ".join(fmt(m) for m in s["mean"]), fmt(s.get("spread")),
                 fmt(s.get("std")), fmt(runs[p]["overall"].get("floor_mean"))] for p, s in seeded.items()]
        blocks.append(Table(head, rows, caption="Stochastic rounding: overall mean KL of each seed against the matched "
                                                f"reference; the spread is the seed-to-seed null control, {model}"))
    for s in summaries:
        if s.get("speaker"):
            blocks += _speaker_tables(s["speaker"], model)
    blocks.append(Note(provenance_line(results, names)))
    return blocks


def _pts(x) -> str:
    return f"{100 * x:+.1f}" if finite(x) else MISSING


def _cmp_cells(c: dict | None) -> list[str]:
    if not c:
        return [MISSING, MISSING]
    d, m = c.get("delta") or {}, c.get("mcnemar") or {}
    return [f"{_pts(d.get('delta'))} [{_pts(d.get('ci_low'))}, {_pts(d.get('ci_high'))}]",
            f"{fmt(m.get('p_value'), 3)} ({m.get('b', '?')} / {m.get('c', '?')})"]


def _speaker_tables(sp: dict, model: str) -> list:
    """Next-speaker exact match scored from the teacher-forced stream (every context token decoded
    under the policy), by context-length bucket, against the matched reference and fp32."""
    base = {b["bucket"]: b for b in sp["fp32"]["by_bucket"]}
    head = ["policy", "bucket", "n", "accuracy (%)", "reference", "Δ vs reference (pts) [95% CI]",
            "McNemar p (b / c)", "Δ vs fp32 (pts) [95% CI]", "McNemar p vs fp32 (b / c)"]
    rows = [["fp32", lab, fmt(b["n"]), f"{100 * b['accuracy']:.1f}", MISSING, MISSING, MISSING, MISSING, MISSING]
            for lab, b in base.items()]
    for p, e in sp["policies"].items():
        vr = {b["bucket"]: b for b in e["vs_reference"]["by_bucket"]}
        vf = {b["bucket"]: b for b in e["vs_fp32"]["by_bucket"]}
        rows.append([p, "all", fmt(sp["n_items"]), f"{100 * e['accuracy']:.1f}", e["reference"],
                     *_cmp_cells(e["vs_reference"]), *_cmp_cells(e["vs_fp32"])])
        for lab in base:
            b = vr.get(lab) or {}
            rows.append([p, lab, fmt(b.get("n")), f"{100 * b['accuracy']:.1f}" if b else MISSING, e["reference"],
                         *_cmp_cells(vr.get(lab)), *_cmp_cells(vf.get(lab))])
    return [Paragraph(f"Next speaker under teacher forcing: {sp['n_items']} speaker tags of the same documents; an "
                      f"item counts as right when the run's argmax is the true token at every byte of the name and its "
                      "closing period (what greedy generation would produce), after every earlier token of the play "
                      "was decoded under the policy. Paired over items (95 % bootstrap CI, exact McNemar test; b = "
                      "items only the reference got right, c = items only the policy did)."),
            Table(head, rows, caption=f"Next-speaker exact match (%) by context length (tokens), teacher forced, "
                                      f"{model}")]


def _layout_notes(summaries: list[dict], runs: dict[str, dict]) -> list:
    items = []
    for s in summaries:
        lay = s.get("layout") or {}
        chk = lay.get("check")
        if lay.get("name") == "grouped":
            items.append("Rows ran *grouped* (one forward per policy row), so identical computations give identical "
                         "bits on any backend.")
        elif chk:
            items.append(f"Rows ran in *lockstep* (one forward for all policies); the row check (a copy of the fp32 "
                         f"rows at the far end of the batch) gives max KL {fmt(chk.get('max_kl'))}: "
                         + ("rows are treated alike, the comparison is exact." if chk.get("exact") else
                            "rows at different batch positions differ, which adds to every KL below."))
    bad = [p for p, r in runs.items() if r.get("arithmetic_matched") is False]
    if bad:
        items.append("Served by other code than their reference (the KL then mixes storage and arithmetic-order "
                     "effects): " + "; ".join(f"`{p}`: {', '.join(runs[p].get('implementations') or [])}" for p in bad)
                     + ".")
    return [Bullets(sorted(set(items), key=items.index))] if items else []


def _kl_figure(ctx: Context, names: list[str], runs: dict, model: str, data: dict, floors: bool, stem: str,
               what: str) -> Figure:
    fig, ax = new_figure()
    dropped = []
    for k, p in enumerate(names):
        rows = runs[p]["buckets"]["log2"]
        x, keep = _curve(ax, rows, "mean", marker="o", ms=3, lw=1.5, color=ctx.colors(p), ls=ctx.colors.style(p),
                         label=p, zorder=3 + len(names) - k)  # earlier policies on top: coinciding curves stay visible
        if len(keep) < len(rows):
            dropped.append(p)
        if floors:
            _curve(ax, rows, "floor_mean", lw=0.9, color=ctx.colors(p), ls=(0, (1, 1.5)), alpha=0.8)
            within = [i for i in keep if rows[i].get("verdict") == WITHIN_FLOOR]
            if within:  # hollow markers: buckets whose effect does not clear the floor
                ax.plot([x[i] for i in within], [rows[i]["mean"] for i in within], ls="none", marker="o", ms=6,
                        mfc="white", mec=ctx.colors(p), zorder=4 + len(names))
        band = [(x[i], rows[i]["ci95"]) for i in keep if rows[i].get("ci95")]
        if band:
            lowest = min(rows[i]["mean"] for i in keep) / 10
            ax.fill_between([b[0] for b in band], [max(c[0], lowest) for _, c in band], [c[1] for _, c in band],
                            color=ctx.colors(p), alpha=0.15, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length (decode steps; log2 buckets, geometric centre)")
    ax.set_ylabel("mean KL(p_reference ‖ p_policy) (nats per token)")
    ax.set_title(f"{model}: KL vs length, {data.get('docs')} docs × {data.get('decode_tokens')} decode tokens",
                 fontsize=9)
    ax.legend(fontsize=7, title="policy", title_fontsize=8)
    path = ctx.figure(fig, stem)
    cap = (f"{what} against " + ("the matched reference" if floors else "the fp32-state run")
           + " with 95 % percentile-bootstrap intervals over documents (shaded; lower ends below a tenth of the "
           "smallest mean are drawn there)"
           + ("; each policy's floor KL(p_fp32 ‖ p_reference) dotted in its colour, hollow markers where the "
              "policy does not clear it" if floors else "") + ".")
    if dropped:
        cap += f" Buckets with zero mean KL are not drawn for: {', '.join(dropped)}."
    return Figure(path, cap)


def _l_sweep(ctx: Context, sweep: dict[str, dict[int, str]], runs: dict, model: str, data: dict,
             floors: bool) -> list:
    Ls = sorted({L for d in sweep.values() for L in d})
    head = ["policy"] + [f"L = {L}" for L in Ls] + ([f"floor L = {L}" for L in Ls] if floors else [])
    rows = []
    for fam, d in sweep.items():
        cells = []
        for L in Ls:
            p = d.get(L)
            if p is None:
                cells.append(MISSING)
                continue
            o = runs[p]["overall"]
            cells.append(f"{fmt(o.get('mean'))} {_ci(o.get('doc_ci95'))}"
                         + (f" {WITHIN_MARK}" if o.get("verdict") == WITHIN_FLOOR else ""))
        if floors:
            cells += [fmt(runs[d[L]]["overall"].get("floor_mean")) if L in d else MISSING for L in Ls]
        rows.append([fam] + cells)
    blocks: list = [Table(head, rows, caption=f"Buffer-length sweep: overall mean KL [95 % CI over documents] at each "
                                              f"L, {model}" + (f"; {WITHIN_MARK}: within floor" if floors else ""))]
    names = [p for d in sweep.values() for _, p in sorted(d.items())]
    blocks.append(_kl_figure(ctx, names, runs, model, data, floors, f"kl-L-sweep-{model}",
                             "Buffer-length sweep: mean KL per log2 length bucket (log-log) for each L"))
    return blocks
