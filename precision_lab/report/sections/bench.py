"""Sections for the benchmark kinds: latency, bandwidth and speedup vs batch B, window L and T with
the memcpy ceiling measured in the same run drawn in.

- ``bench-quant`` (``scripts/bench_quant.py``): one bar per kernel, GB/s against the copy ceiling.
- ``bench-scan`` (``scripts/bench_scan.py``) and ``bench-kernels`` (``scripts/bench_kernels.py``):
  rows of measurements; every sweep axis (B, L, T) that takes two or more values gets a figure, with
  the other axes held at their most common value. Field names are read from a short alias list, so
  a benchmark that adds columns still renders; a field that is absent is not drawn (never guessed).
- ``bench-kl`` (``scripts/bench_kl.py``): engine check, teacher-forced vs token-by-token speedup,
  the long run's time against its target and its throughput along the stream.
- any layout these renderers do not know: the file's scalar measurements as a table.

Rows whose correctness check failed carry no timing in their files and are listed as not measured.
"""
from __future__ import annotations

from collections import Counter

from ..common import MISSING, fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, device_str, finite
from ..style import new_figure
from . import Context

AXES = {"B": ("B", "batch", "batch_size"), "L": ("L", "buffer_len", "window"), "T": ("T", "drafts", "tokens")}
LATENCY = (("us", "µs"), ("median_us", "µs"), ("latency_us", "µs"), ("ms", "ms"), ("median_ms", "ms"))
BANDWIDTH = ("GBps", "gbps", "GB_s")
PCT = ("pct_of_copy", "pct_of_ceiling")
SERIES = ("kernel", "policy", "impl", "implementation", "read", "update")
GROUP = ("arch", "op", "model")


def _get(row: dict, names) -> tuple[str | None, object]:
    for n in names:
        if n in row:
            return n, row[n]
    return None, None


def _ceiling(d: dict) -> float | None:
    for key in ("copy_ceiling", "copy", "memcpy", "ceiling"):
        c = d.get(key)
        if isinstance(c, dict):
            _, v = _get(c, BANDWIDTH)
            if finite(v):
                return float(v)
    return None


def _device_par(r: Result, ceiling: float | None) -> Paragraph:
    c = f"memcpy ceiling measured in the same run: {fmt(ceiling)} GB/s" if ceiling else "no memcpy ceiling in the file"
    return Paragraph(f"Device: {device_str(r.provenance)}; {c}. Bandwidth counts bytes with the benchmark's "
                     "explicit bytes model" + (f" ({_bytes_model(r)})" if _bytes_model(r) else "") + ".")


def _bytes_model(r: Result) -> str:
    bm = r.data.get("bytes_model")
    if isinstance(bm, dict):
        return "; ".join(f"{k}: {v}" for k, v in bm.items())
    return " ".join(str(bm).split()) if bm else ""


# ------------------------------------------------------------------------------------------------
def render_quant(results: list[Result], ctx: Context) -> list:
    blocks: list = []
    for r in results:
        d = r.data
        ceiling = _ceiling(d)
        shape = r.provenance.get("shape")
        blocks += [Heading(f"Quantize/dequantize kernels: fp32 state {tuple(shape) if shape else ''}", 3),
                   _device_par(r, ceiling)]
        names = [n for n, k in d["kernels"].items() if finite(k.get("gbps"))]
        if names:
            fig, ax = new_figure(8.0, 1.2 + 0.4 * len(names))
            vals = [d["kernels"][n]["gbps"] for n in names]
            ax.barh(names[::-1], vals[::-1], color="tab:blue")
            if ceiling:
                ax.axvline(ceiling, color="k", ls="--", label=f"memcpy ceiling {ceiling:.0f} GB/s")
            tgt = d.get("target") or {}
            if ceiling and finite(tgt.get("fraction_of_copy")):
                ax.axvline(tgt["fraction_of_copy"] * ceiling, color="tab:red", ls=":",
                           label=f"target: {tgt.get('kernel')} at {100 * tgt['fraction_of_copy']:.0f} % of copy")
            ax.set_xlabel("bandwidth (GB/s, explicit bytes model)")
            ax.set_xlim(0, 1.1 * max(vals + ([ceiling] if ceiling else [])))
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)  # below: covers no bar
            ax.set_title(f"quantize/dequantize bandwidth, {device_str(r.provenance)}", fontsize=9)
            blocks.append(Figure(ctx.figure(fig, "bench-quant"), "Kernel bandwidth against the memcpy ceiling "
                                                                 "measured in the same run."))
        rows = []
        for n, k in d["kernels"].items():
            frac = k.get("frac_of_copy")
            rows.append([n, str(k.get("check", MISSING)), fmt(k.get("median_ms")), fmt(k.get("gbps")),
                         fmt(100 * frac) if finite(frac) else MISSING, fmt(k.get("bytes"))])
        blocks.append(Table(["kernel", "check vs reference", "median (ms)", "GB/s", "% of copy", "bytes per call"],
                            rows, caption="Quantize/dequantize kernels (kernels whose check failed are not timed)"))
        tgt = d.get("target")
        if isinstance(tgt, dict) and "met" in tgt:
            ach = tgt.get("achieved_fraction")
            blocks.append(Paragraph(f"Target: {tgt.get('kernel')} at ≥ {fmt(100 * tgt.get('fraction_of_copy', 0))} % of "
                                    f"the copy bandwidth; achieved {fmt(100 * ach) if finite(ach) else MISSING} % — "
                                    + ("met." if tgt["met"] else "not met.")))
        blocks.append(Note(provenance_line([r])))
    return blocks


# ------------------------------------------------------------------------------------------------
def _rows(d: dict) -> list[dict]:
    for key in ("timings", "rows", "results", "measurements", "sweeps"):
        v = d.get(key)
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return v
        if isinstance(v, dict):  # sweep name -> rows
            flat = [dict(x, sweep=k) for k, xs in v.items() if isinstance(xs, list) for x in xs if isinstance(x, dict)]
            if flat:
                return flat
    return []


def _series(row: dict) -> str:
    parts = [str(row[k]) for k in ("kernel", "policy") if k in row]
    if not parts:
        parts = [str(row[k]) for k in SERIES if k in row][:1]
    return " · ".join(parts) or "measurement"


def _policy_of(row: dict) -> str:
    return str(row.get("policy", _series(row)))


def render_scan(results: list[Result], ctx: Context) -> list:
    return _render_rows(results, ctx, "Teacher-forced scan kernels",
                        {"B": "batch B (sequences)", "L": "window L (tokens)", "T": "tokens per sequence T"})


def render_kernels(results: list[Result], ctx: Context) -> list:
    """scripts/bench_kernels.py: rows of single-kernel timings plus a per-operator summary (amortised
    window costs, speedups only where the correctness checks passed, the targets)."""
    blocks: list = []
    for r in results:
        if isinstance(r.data.get("summary"), dict) and isinstance(r.data.get("rows"), list):
            blocks += _kernels_summary(r, ctx)
        else:  # another layout: plain sweeps over the rows
            blocks += _render_rows([r], ctx, "Decode kernels", {"B": "batch B (sequences)", "L": "window L (tokens)",
                                                                "T": "drafts T (tokens per verify)"})
    return blocks


# series of the decode-kernel figures: (summary or row key, legend, policy whose colour it takes, line style)
_KSERIES = {
    "conventional": ("fp32: conventional step", "fp32", "-"),
    "nonflush": ("shared:fp32: non-flush step", "shared:fp32", "--"),
    "flush": ("shared:fp32: flush step", "shared:fp32", ":"),
    "replay_amortised_us": ("shared:fp32: amortised over the window", "shared:fp32", "-"),
    "fla": ("fla fused_recurrent (peer, fp32 state)", "fla", "-."),
}


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty panel (nothing measured) gets no empty legend box
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="0.4")


def _int_keys(d: dict) -> list:
    return sorted(d, key=lambda k: int(k))


def _sweep_points(sweep: dict, key: str) -> list:
    """[(x, value)] of a summary sweep keyed by integer strings, finite values only, x ascending."""
    return [(int(x), sweep[x][key]) for x in _int_keys(sweep) if finite(sweep[x].get(key))]


def _finish_axes(axes, xlabel: str, ylabels) -> None:
    """Shared look of the sweep panels: log2 x axis, labels, legend (or 'not measured')."""
    for ax, yl in zip(axes, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(yl)
        _legend(ax)


def _kernels_summary(r: Result, ctx: Context) -> list:
    d = r.data
    ceiling = _ceiling(d)
    prov = Note(provenance_line([r]))
    blocks: list = [Heading(f"Decode kernels: {device_str(r.provenance)}", 3), _device_par(r, ceiling)]
    timing = (d.get("ceiling") or {}).get("timing")
    if timing:
        blocks.append(Paragraph(f"Timing: {timing}."))
    # a run cut short (or a per-operator checkpoint) says so in the file: say it here too
    if d.get("incomplete") or d.get("partial"):
        blocks.append(Paragraph("**Incomplete run**: " + str(d.get("incomplete") or
                                "a per-operator checkpoint of a run that did not finish")))
    checks = d.get("correctness")
    if isinstance(checks, dict) and checks:
        rows = [[k, "pass" if v.get("ok") else "FAIL",
                 ", ".join(f"{a} {fmt(b, 2)}" for a, b in (v.get("rel_err") or {}).items()) or MISSING,
                 fmt(v.get("tol"))] for k, v in checks.items()]
        blocks.append(Table(["check", "result", "relative error", "tolerance"], rows,
                            caption="Correctness of every kernel family at the benchmark shapes (a speedup is only "
                                    "reported where the kernels involved passed)"))
    for op, s in d["summary"].items():
        if not isinstance(s, dict):
            continue
        blocks.append(Heading(f"{op}", 4))
        # -- batch sweep ---------------------------------------------------------------------------
        rows = [x for x in d["rows"] if x.get("op") == op and x.get("tag") == "batch" and finite(x.get("us"))]
        sb = s.get("batch") or {}
        if rows:
            fig, axes = _subplots(3)
            for kern in ("conventional", "nonflush", "flush", "fla"):
                pts = sorted((x["batch"], x["us"], x.get("GBps")) for x in rows if x.get("kernel") == kern)
                if not pts:
                    continue
                label, pol, ls = _KSERIES[kern]
                axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, ls=ls, label=label,
                             color=ctx.colors(pol))
                bw = [(p[0], p[2]) for p in pts if finite(p[2])]
                if bw:
                    axes[1].plot(*zip(*bw), marker="o", ms=3, ls=ls, label=label, color=ctx.colors(pol))
            am = _sweep_points(sb, "replay_amortised_us")
            if am:
                label, pol, ls = _KSERIES["replay_amortised_us"]
                axes[0].plot(*zip(*am), marker="s", ms=3, lw=2, ls=ls, label=label, color=ctx.colors(pol))
            if ceiling:
                axes[1].axhline(ceiling, color="k", ls="--", lw=1, label=f"memcpy ceiling {ceiling:.0f} GB/s")
            for key, label in (("speedup_vs_conventional", "vs conventional fp32"), ("speedup_vs_fla", "vs fla")):
                sp = _sweep_points(sb, key)
                if sp:
                    axes[2].plot(*zip(*sp), marker="o", ms=3, label=f"ReplaySSM {label}",
                                 color=ctx.colors("shared:fp32"), ls="-" if "conv" in key else "-.")
            axes[2].axhline(1.0, color="0.5", lw=0.8)
            _finish_axes(axes, "batch B (sequences)", ("latency per step (µs)", "bandwidth (GB/s, bytes model)",
                                                       "speedup (×, ReplaySSM amortised)"))
            axes[0].set_yscale("log")
            axes[1].set_ylim(bottom=0)
            axes[2].set_ylim(bottom=0)
            fig.suptitle(f"{op}: decode step vs batch (L = 16)", fontsize=9)
            blocks += [Figure(ctx.figure(fig, f"bench-kernels-{op}-batch"),
                              f"{op}: latency, bandwidth and speedup vs batch; the amortised ReplaySSM cost spreads "
                              "one flush over the window; dashed: the memcpy ceiling."), prov]
        if sb:
            head = ["B", "conventional (µs)", "conventional % of ceiling", "non-flush (µs)", "flush (µs)",
                    "ReplaySSM amortised (µs)", "fla (µs)", "speedup vs conventional", "speedup vs fla"]
            body = [[str(b)] + [fmt(sb[b].get(k)) for k in ("conventional_us", "conventional_pct_ceiling",
                                                            "nonflush_us", "flush_us", "replay_amortised_us",
                                                            "fla_us", "speedup_vs_conventional", "speedup_vs_fla")]
                    for b in _int_keys(sb)]
            blocks.append(Table(head, body, caption=f"{op}: batch sweep (L = 16, fp32 state)"))
        # -- L sweep ---------------------------------------------------------------------------
        sl = s.get("L") or {}
        if sl:
            fig, axes = _subplots(2)
            Ls = [int(k) for k in _int_keys(sl)]
            for key, kern in (("nonflush_us", "nonflush"), ("flush_us", "flush"),
                              ("replay_amortised_us", "replay_amortised_us")):
                pts = _sweep_points(sl, key)
                if pts:
                    label, pol, ls = _KSERIES[kern]
                    axes[0].plot(*zip(*pts), marker="o", ms=3, ls=ls, label=label, color=ctx.colors(pol))
            sp = _sweep_points(sl, "speedup_vs_conventional")
            if sp:
                axes[1].plot(*zip(*sp), marker="o", ms=3, label="ReplaySSM vs conventional fp32",
                             color=ctx.colors("shared:fp32"))
            bd = _sweep_points(sl, "bound")
            if bd:
                axes[1].plot(*zip(*bd), color="k", ls="--", lw=1, label="bytes bound 2L/(L+1)")
            _finish_axes(axes, "window L (tokens)", ("latency (µs)", "speedup (×)"))
            axes[1].set_ylim(bottom=0)
            fig.suptitle(f"{op}: window length sweep (B = 256)", fontsize=9)
            blocks += [Figure(ctx.figure(fig, f"bench-kernels-{op}-L"),
                              f"{op}: non-flush, flush and amortised cost vs L, and the speedup over the conventional "
                              "step against its bytes bound."), prov]
            blocks.append(Table(["L", "non-flush (µs)", "flush (µs)", "amortised (µs)", "speedup vs conventional",
                                 "bound"],
                                [[str(L)] + [fmt(sl[str(L)].get(k)) for k in ("nonflush_us", "flush_us",
                                                                               "replay_amortised_us",
                                                                               "speedup_vs_conventional", "bound")]
                                 for L in Ls], caption=f"{op}: L sweep (B = 256)"))
        # -- drafts ---------------------------------------------------------------------------
        sd = s.get("drafts") or {}
        if sd:
            Ts = [int(k) for k in _int_keys(sd)]
            fig, axes = _subplots(2)
            for key, label, ls in (("verify_us", "shared:fp32: verify T drafts", "--"),
                                   ("spec_flush_us", "shared:fp32: speculative flush", ":"),
                                   ("per_round_amortised_us", "shared:fp32: per round, amortised", "-"),
                                   ("snapshot_baseline_estimate_us", "fp32: T conventional steps (estimate)", "-.")):
                pts = _sweep_points(sd, key)
                if pts:
                    axes[0].plot(*zip(*pts), marker="o", ms=3, ls=ls, label=label,
                                 color=ctx.colors("fp32" if key.startswith("snapshot") else "shared:fp32"))
            rt = _sweep_points(sd, "ratio_to_one_conventional_step")
            if rt:
                axes[1].plot(*zip(*rt), marker="o", ms=3, color=ctx.colors("shared:fp32"),
                             label="verify round / one conventional step")
                axes[1].axhline(1.2, color="tab:red", ls=":", label="target ≤ 1.2")
            _finish_axes(axes, "drafts T (tokens per verify)", ("latency (µs)", "ratio (×)"))
            axes[1].set_ylim(bottom=0)
            fig.suptitle(f"{op}: speculative verify (B = 256)", fontsize=9)
            blocks += [Figure(ctx.figure(fig, f"bench-kernels-{op}-T"),
                              f"{op}: verifying T drafts against checkpoint + history, flushes amortised."), prov]
            blocks.append(Table(["T", "verify (µs)", "speculative flush (µs)", "per round amortised (µs)",
                                 "ratio to one conventional step", "T conventional steps (µs, estimate)"],
                                [[str(T)] + [fmt(sd[str(T)].get(k)) for k in (
                                    "verify_us", "spec_flush_us", "per_round_amortised_us",
                                    "ratio_to_one_conventional_step", "snapshot_baseline_estimate_us")] for T in Ts],
                                caption=f"{op}: draft sweep (B = 256)"))
        # -- formats and targets ----------------------------------------------------------------
        fr = []
        for rf, v in (s.get("read") or {}).items():
            fr.append([f"read copy {rf} (split:fp32/{rf})", fmt(v.get("nonflush_us")), fmt(v.get("nonflush_GBps")),
                       fmt(v.get("flush_us")), fmt(v.get("replay_amortised_us"))])
        for uf, v in (s.get("update") or {}).items():
            fr.append([f"update checkpoint {uf} (read nvfp4)", MISSING, MISSING, fmt(v.get("flush_us")), MISSING])
        for cf, v in (s.get("conventional_formats") or {}).items():
            fr.append([f"conventional:{cf}", fmt(v.get("us")), fmt(v.get("GBps")), MISSING, MISSING])
        if fr:
            blocks.append(Table(["configuration", "step (µs)", "GB/s", "flush (µs)", "amortised (µs)"], fr,
                                caption=f"{op}: storage formats at B = 256, L = 16"))
        tg = s.get("targets") or {}
        if tg:
            blocks.append(Table(["quantity", "measured", "target", "met"],
                                [[k, fmt(v.get("value")), fmt(v.get("target")),
                                  {True: "yes", False: "NO"}.get(v.get("met"), "not measured")]
                                 for k, v in tg.items()], caption=f"{op}: targets (B = 256, L = 16)"))
        blocks.append(prov)
    return blocks


def _render_rows(results: list[Result], ctx: Context, title: str, axis_labels: dict[str, str]) -> list:
    blocks: list = []
    for r in results:
        d = r.data
        rows = _rows(d)
        if not rows:
            blocks += render_generic([r], ctx)
            continue
        ceiling = _ceiling(d)
        blocks += [Heading(f"{title}: {device_str(r.provenance)}", 3), _device_par(r, ceiling)]
        shapes = d.get("shapes")
        if isinstance(shapes, dict):
            blocks.append(Paragraph("Shapes: " + "; ".join(
                f"{k}: " + (", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else str(v))
                for k, v in shapes.items()) + "."))
        checks = d.get("checks")
        if isinstance(checks, list) and checks:
            bad = [c for c in checks if not c.get("ok")]
            blocks.append(Paragraph(f"Correctness checks before timing: {len(checks) - len(bad)} of {len(checks)} passed"
                                    + ("." if not bad else "; failed: " + ", ".join(
                                        f"{c.get('arch')} {c.get('policy')} vs {c.get('against')}" for c in bad)
                                       + " (these configurations have no timings).")))
        blocks += _sweep_figures(r, rows, ceiling, ctx, axis_labels)
        blocks += [_rows_table(rows), Note(provenance_line([r]))]
    return blocks


def _sweep_figures(r: Result, rows: list[dict], ceiling, ctx: Context, axis_labels) -> list:
    blocks = []
    timed = [x for x in rows if finite(_get(x, [k for k, _ in LATENCY])[1]) or finite(_get(x, BANDWIDTH)[1])]
    groups = sorted({str(_get(x, GROUP)[1]) for x in timed})
    for g in groups:
        grows = [x for x in timed if str(_get(x, GROUP)[1]) == g]
        for ax_name, aliases in AXES.items():
            vals = {_get(x, aliases)[1] for x in grows} - {None}
            if len(vals) < 2:
                continue
            # hold the other axes at their most common value so each line is a one-factor sweep
            fixed = {}
            for other, oal in AXES.items():
                if other != ax_name:
                    c = Counter(_get(x, oal)[1] for x in grows)
                    fixed[other] = (oal, c.most_common(1)[0][0])
            sel = [x for x in grows if all(_get(x, oal)[1] == v for oal, v in fixed.values())
                   and _get(x, aliases)[1] is not None]
            panels = []
            lat_key = next((k for k, _ in LATENCY if any(finite(x.get(k)) for x in sel)), None)
            if lat_key:
                panels.append(("latency", lat_key, dict(LATENCY)[lat_key]))
            bw_key = next((k for k in BANDWIDTH if any(finite(x.get(k)) for x in sel)), None)
            if bw_key:
                panels.append(("bandwidth", bw_key, "GB/s"))
            sp_keys = sorted({k for x in sel for k in x if k.startswith("speedup") and finite(x[k])})
            for k in sp_keys:
                panels.append(("speedup", k, "×"))
            if not panels:
                continue
            fig, axes = new_figure(4.2 * len(panels), 3.8) if len(panels) == 1 else _subplots(len(panels))
            axes = axes if isinstance(axes, list) else [axes]
            # colour = policy (as in every figure of the report), line style = kernel
            kernels = sorted({str(x.get("kernel")) for x in sel})
            styles = {k: ("-", "--", ":", "-.")[i % 4] for i, k in enumerate(kernels)}
            for axp, (what, key, unit) in zip(axes, panels):
                series = sorted({_series(x) for x in sel if finite(x.get(key))})
                for s in series:
                    pts = sorted((_get(x, aliases)[1], x[key]) for x in sel if _series(x) == s and finite(x.get(key)))
                    row0 = next(x for x in sel if _series(x) == s)
                    axp.plot(*zip(*pts), marker="o", ms=3, label=s, color=ctx.colors(_policy_of(row0)),
                             ls=styles[str(row0.get("kernel"))])
                if what == "bandwidth" and ceiling:
                    axp.axhline(ceiling, color="k", ls="--", lw=1, label=f"memcpy ceiling {ceiling:.0f} GB/s")
                if what == "speedup":
                    axp.axhline(1.0, color="0.5", lw=0.8)
                axp.set_xscale("log", base=2)
                if what == "latency":
                    axp.set_yscale("log")
                else:  # bandwidth and speedup read against zero (and the ceiling / 1×)
                    axp.set_ylim(bottom=0)
                axp.set_xlabel(axis_labels[ax_name])
                axp.set_ylabel({"latency": f"latency ({unit})", "bandwidth": "bandwidth (GB/s, bytes model)",
                                "speedup": f"{key.replace('_', ' ')} (×)"}[what])
                _legend(axp)
            held = ", ".join(f"{k} = {v}" for k, (_, v) in fixed.items() if v is not None)
            fig.suptitle(f"{g}: sweep over {ax_name}" + (f" ({held})" if held else ""), fontsize=9)
            path = ctx.figure(fig, f"bench-{r.kind}-{g}-{ax_name}")
            blocks.append(Figure(path, f"{g}: " + ", ".join(p[0] for p in panels) + f" vs {axis_labels[ax_name]}"
                                       + (f", {held}" if held else "") + "; dashed: the memcpy ceiling."))
            blocks.append(Note(provenance_line([r])))
    return blocks


def _subplots(n: int):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), dpi=110)
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
    return fig, list(axes)


def _rows_table(rows: list[dict]) -> Table:
    """Every measurement row, columns in a fixed order then any others the file has."""
    order = ["sweep", *GROUP, "kernel", "policy", "B", "batch", "L", "T", "drafts", "us", "median_us", "ms",
             "median_ms", "tokens_per_s", "GBps", "gbps", "pct_of_copy", "bytes"]
    present = [k for k in order if any(k in x for x in rows)]
    extra = sorted({k for x in rows for k, v in x.items() if k not in present and (finite(v) or isinstance(v, str))
                    and k not in ("error",)})
    cols = present + extra
    units = {"us": "us (µs)", "median_us": "median_us (µs)", "ms": "ms", "GBps": "GB/s", "gbps": "GB/s",
             "pct_of_copy": "% of copy", "tokens_per_s": "tokens/s", "bytes": "bytes"}
    body = []
    for x in rows:
        cells = [fmt(x.get(k)) if not isinstance(x.get(k), str) else x[k] for k in cols]
        if "error" in x:
            cells[-1] = f"{cells[-1]} (error: {str(x['error'])[:80]})"
        body.append(cells)
    return Table([units.get(c, c) for c in cols], body, caption="All measurements (rows without a time were skipped "
                                                                 "or failed; see the last column)")


# ------------------------------------------------------------------------------------------------
def _flatten(d, prefix="", depth=0) -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if k in ("kind", "schema_version", "provenance"):
            continue
        name = f"{prefix}{k}"
        if isinstance(v, dict) and depth < 3:
            out += _flatten(v, name + ".", depth + 1)
        elif finite(v) or isinstance(v, (str, bool)):
            out.append((name, v))
    return out


def render_generic(results: list[Result], ctx: Context) -> list:
    """The numbers a result file holds, as they are (for kinds without a dedicated figure)."""
    blocks: list = []
    for r in results:
        items = _flatten(r.data)
        blocks += [Heading(f"{r.kind}: {r.name}", 3),
                   Paragraph(f"Device: {device_str(r.provenance)}. The file's scalar values as recorded."),
                   Table(["quantity", "value"], [[k, fmt(v) if not isinstance(v, (str, bool)) else str(v)]
                                                 for k, v in items], caption=f"{r.kind} measurements"),
                   Note(provenance_line([r]))]
    return blocks


# ------------------------------------------------------------------------------------------------
def render_kl(results: list[Result], ctx: Context) -> list:
    """scripts/bench_kl.py: teacher-forced engine check, speedup over token-by-token decode, long run."""
    blocks: list = []
    for r in results:
        d = r.data
        if not any(isinstance(d.get(k), dict) for k in ("check", "side_by_side", "long_run")):
            blocks += render_generic([r], ctx)
            continue
        prov = Note(provenance_line([r], list(d.get("policies") or [])))
        eng = d.get("engine")
        blocks += [Heading(f"KL engine: {d.get('model')} on {device_str(r.provenance)}", 3),
                   Paragraph(f"Reference fp32 plus {len(d.get('policies') or [])} policies in one forward per "
                             f"segment; engine `{eng}`; model parameters {fmt(d.get('model_params'))}.")]
        chk = d.get("check")
        if isinstance(chk, dict) and isinstance(chk.get("verdicts"), dict):
            rows = [[p, "pass" if v.get("ok") else "FAIL", fmt(v.get("disagreement")), fmt(v.get("effect")),
                     str(v.get("criterion", MISSING))] for p, v in chk["verdicts"].items()]
            blocks.append(Table(["policy", "teacher-forced = token-by-token", "disagreement", "policy effect",
                                 "criterion"], rows,
                                caption=f"Engine check: {chk.get('decode_tokens')} decode tokens after a prefill of "
                                        f"{chk.get('prefill')}, {chk.get('weights')} weights"))
        sb = d.get("side_by_side")
        if isinstance(sb, dict):
            valid = sb.get("speedup_valid")
            rows = [["decode tokens", fmt(sb.get("decode_tokens"))],
                    ["teacher-forced engine (s)", fmt(sb.get("teacher_forced_seconds"))],
                    ["teacher-forced (tokens/s)", fmt(sb.get("teacher_forced_tok_per_s"))],
                    ["token-by-token (s per step)", fmt(sb.get("token_by_token_seconds_per_step"))],
                    ["token-by-token (s for the stream)", fmt(sb.get("token_by_token_seconds_for_stream"))],
                    ["speedup (×)", "not reported: engine check failed" if valid is False else
                     fmt(sb.get("speedup")) + (" (engine check not run)" if valid is None else "")]]
            blocks.append(Table(["quantity", "value"], rows,
                                caption="Teacher-forced engine vs token-by-token decode on the same stream "
                                        f"({sb.get('weights')} weights; token-by-token "
                                        f"{sb.get('token_by_token_note', 'measured')})"))
        lr = d.get("long_run")
        if isinstance(lr, dict):
            # known fields first with readable names, then whatever else the run recorded (a status or
            # an extrapolation note written instead of a measurement), verbatim
            labels = {"tokens": "stream tokens", "prefill": "prefill", "segment": "segment (tokens)",
                      "rows": "rows (fp32 + policies)", "decode_tokens_done": "decode tokens done",
                      "seconds": "seconds", "tokens_per_s_per_row": "tokens/s",
                      "estimated_seconds_full": "full run (s)", "estimate_note": "how the full run time was obtained",
                      "target_seconds": "target (s)", "peak_gpu_mem_gib": "peak GPU memory (GiB)"}
            keys = [k for k in labels if k in lr] + [k for k in lr if k not in labels]
            rows = [[labels.get(k, k), v if isinstance(v, str) else fmt(v)] for k in keys
                    for v in [lr[k]] if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
            blocks.append(Table(["quantity", "value"], rows, caption="The long run (KL per position included)"))
            segs = [s for s in lr.get("segments") or [] if finite(s.get("seconds")) and s.get("seconds") > 0
                    and finite(s.get("tokens"))]
            if len(segs) >= 2:
                fig, ax = new_figure()
                ax.plot([s["start"] + s["tokens"] for s in segs], [s["tokens"] / s["seconds"] for s in segs],
                        marker="o", ms=3, color="k")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("stream position at the end of the segment (tokens)")
                ax.set_ylabel("stream tokens/s (fp32 + policies together)")
                ax.set_title(f"{d.get('model')}: long-run throughput along the stream", fontsize=9)
                blocks += [Figure(ctx.figure(fig, "bench-kl-throughput"),
                                  "Tokens per second of each segment of the long run (the first one is the prefill); "
                                  "attention makes later segments slower."), prov]
            mk = lr.get("mean_kl_by_policy_random_weights")
            if isinstance(mk, dict) and mk:
                blocks.append(Paragraph("Mean KL of the long run (random weights: a smoke value, not a result): "
                                        + ", ".join(f"`{p}` {fmt(v)}" for p, v in mk.items()) + "."))
        blocks.append(prov)
    return blocks
