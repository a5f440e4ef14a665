"""Sections for the benchmark kinds: latency, bandwidth and speedup vs batch B, window L and T with
the memcpy ceiling measured in the same run drawn in.

- ``bench-quant`` (``scripts/bench_quant.py``): one bar per kernel, GB/s against the copy ceiling.
- ``bench-scan`` (``scripts/bench_scan.py``) and ``bench-kernels`` (``scripts/bench_kernels.py``):
  rows of measurements; every sweep axis (B, L, T) that takes two or more values gets a figure, with
  the other axes held at their most common value. Field names are read from a short alias list, so
  a benchmark that adds columns still renders; a field that is absent is not drawn (never guessed).
- anything else (``bench-kl``): the file's scalar measurements as a table.

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
            ax.legend(fontsize=8, loc="lower right")
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
    return _render_rows(results, ctx, "Decode kernels",
                        {"B": "batch B (sequences)", "L": "window L (tokens)", "T": "drafts T (tokens per verify)"})


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
        blocks.append(_rows_table(rows))
        blocks.append(Note(provenance_line([r])))
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
            for axp, (what, key, unit) in zip(axes, panels):
                series = sorted({_series(x) for x in sel if finite(x.get(key))})
                for s in series:
                    pts = sorted((_get(x, aliases)[1], x[key]) for x in sel if _series(x) == s and finite(x.get(key)))
                    pol = _policy_of(next(x for x in sel if _series(x) == s))
                    axp.plot(*zip(*pts), marker="o", ms=3, label=s, color=ctx.colors(pol))
                if what == "bandwidth" and ceiling:
                    axp.axhline(ceiling, color="k", ls="--", lw=1, label=f"memcpy ceiling {ceiling:.0f} GB/s")
                if what == "speedup":
                    axp.axhline(1.0, color="0.5", lw=0.8)
                axp.set_xscale("log", base=2)
                if what == "latency":
                    axp.set_yscale("log")
                axp.set_xlabel(axis_labels[ax_name])
                axp.set_ylabel({"latency": f"latency ({unit})", "bandwidth": "bandwidth (GB/s, bytes model)",
                                "speedup": f"{key.replace('_', ' ')} (×)"}[what])
                axp.legend(fontsize=7)
            held = ", ".join(f"{k} = {v}" for k, (_, v) in fixed.items() if v is not None)
            fig.suptitle(f"{g}: sweep over {ax_name}" + (f" ({held})" if held else ""), fontsize=9)
            path = ctx.figure(fig, f"bench-{r.kind}-{g}-{ax_name}")
            blocks.append(Figure(path, f"{g}: " + ", ".join(p[0] for p in panels) + f" vs {axis_labels[ax_name]}"
                                       + (f", {held}" if held else "") + "; dashed: the memcpy ceiling."))
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
