"""Sections for the benchmark kinds, read through their result classes
(``precision_lab.bench.schema``): latency, bandwidth and speedup against batch B, window L and
drafts T, with the copy ceiling measured in the same run drawn in.

- ``bench-quant`` (``QuantKernelsResult``): one bar per kernel, GB/s against the copy ceiling.
- ``bench-scan`` (``ScanKernelsResult``): per architecture, latency and bandwidth of each policy's
  scan against the batch; every measurement in a table.
- ``bench-kernels`` (``DecodeKernelsResult``): the per-operator summary (amortised window costs,
  speedups only where the correctness checks passed, the targets) as figures and tables.
- ``bench-kl`` (``KLEngineResult``): engine check, teacher-forced vs token-by-token speedup, the
  long run's time against its target and its throughput along the stream.

Kernels whose correctness check failed carry no timing in their files and show none here.
"""
from __future__ import annotations

from precision_lab.bench.schema import (
    DecodeKernelsResult,
    KernelRow,
    KLEngineResult,
    OperatorSummary,
    QuantKernelsResult,
    ScanKernelsResult,
)

from ..common import MISSING, fmt, provenance_line
from ..document import Figure, Heading, Note, Paragraph, Table
from ..results import Result, device_str, finite
from ..style import new_figure
from . import Context


def _device_par(r: Result, ceiling, bytes_model: str = "") -> Paragraph:
    c = (f"memcpy ceiling measured in the same run: {fmt(ceiling.GBps)} GB/s ({ceiling.method})" if ceiling
         else "no memcpy ceiling in the file")
    bm = " ".join(bytes_model.split())
    return Paragraph(f"Device: {device_str(r.provenance)}; {c}. Bandwidth counts bytes with the benchmark's "
                     "explicit bytes model" + (f" ({bm})" if bm else "") + ".")


def _peers_par(peers: dict) -> list:
    if not peers:
        return []
    return [Paragraph("Peers timed: " + ", ".join(f"{k} {v or '(version not recorded)'}" for k, v in peers.items())
                      + ".")]


# ------------------------------------------------------------------------------------------------
def render_quant(results: list[Result], ctx: Context) -> list:
    blocks: list = []
    for r in results:
        t: QuantKernelsResult = r.typed
        ceiling = t.ceiling.GBps if t.ceiling else None
        blocks += [Heading(f"Quantize/dequantize kernels: fp32 state {tuple(t.shape)}", 3),
                   _device_par(r, t.ceiling, "; ".join(f"{k}: {v}" for k, v in t.bytes_model.items()))]
        names = [n for n, k in t.kernels.items() if finite(k.GBps)]
        if names:
            fig, ax = new_figure(8.0, 1.2 + 0.4 * len(names))
            vals = [t.kernels[n].GBps for n in names]
            ax.barh(names[::-1], vals[::-1], color="tab:blue")
            if ceiling:
                ax.axvline(ceiling, color="k", ls="--", label=f"memcpy ceiling {ceiling:.0f} GB/s")
                ax.axvline(t.target.fraction_of_copy * ceiling, color="tab:red", ls=":",
                           label=f"target: {t.target.kernel} at {100 * t.target.fraction_of_copy:.0f} % of copy")
            ax.set_xlabel("bandwidth (GB/s, explicit bytes model)")
            ax.set_xlim(0, 1.1 * max(vals + ([ceiling] if ceiling else [])))
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)  # below: covers no bar
            ax.set_title(f"quantize/dequantize bandwidth, {device_str(r.provenance)}", fontsize=9)
            blocks.append(Figure(ctx.figure(fig, "bench-quant"), "Kernel bandwidth against the memcpy ceiling "
                                                                 "measured in the same run."))
        rows = []
        for n, k in t.kernels.items():
            rows.append([n, k.check, fmt(k.median_ms), fmt(k.GBps),
                         fmt(100 * k.frac_of_copy) if finite(k.frac_of_copy) else MISSING, fmt(k.bytes)])
        blocks.append(Table(["kernel", "check vs reference", "median (ms)", "GB/s", "% of copy", "bytes per call"],
                            rows, caption="Quantize/dequantize kernels (kernels whose check failed are not timed)"))
        tg = t.target
        ach = tg.achieved_fraction
        blocks.append(Paragraph(f"Target: {tg.kernel} at ≥ {fmt(100 * tg.fraction_of_copy)} % of the copy bandwidth; "
                                f"achieved {fmt(100 * ach) if finite(ach) else MISSING} % — "
                                + ("met." if tg.met else "not met.")))
        blocks.append(Note(provenance_line([r])))
    return blocks


# ------------------------------------------------------------------------------------------------
def render_scan(results: list[Result], ctx: Context) -> list:
    blocks: list = []
    for r in results:
        t: ScanKernelsResult = r.typed
        blocks += [Heading(f"Teacher-forced scan kernels: {device_str(r.provenance)}", 3),
                   _device_par(r, t.ceiling, t.bytes_model)]
        blocks.append(Paragraph("Shapes: " + "; ".join(
            f"{arch}: {layer.model} (" + ", ".join(f"{k}={v}" for k, v in layer.dims.items()) + ")"
            for arch, layer in t.layers.items()) + f"; T = {t.T} tokens per sequence."))
        if t.checks:
            bad = [c for c in t.checks if not c.ok]
            blocks.append(Paragraph(f"Correctness checks before timing: {len(t.checks) - len(bad)} of {len(t.checks)} "
                                    "passed" + ("." if not bad else "; failed: " + ", ".join(
                                        f"{c.arch} {c.policy} vs {c.against}" for c in bad)
                                        + " (these configurations have no timings).")))
        prov = Note(provenance_line([r]))
        for arch in t.layers:
            timed = [x for x in t.rows if x.arch == arch and finite(x.ms) and x.kernel in ("replay", "recurrent")]
            if len({x.B for x in timed}) < 2:
                continue
            fig, axes = _subplots(2)
            for pol in dict.fromkeys(x.policy for x in timed):
                pts = sorted((x.B, x.ms, x.tokens_per_s) for x in timed if x.policy == pol)
                kw = dict(marker="o", ms=3, label=pol, color=ctx.colors(pol), ls=ctx.colors.style(pol))
                axes[0].plot([p[0] for p in pts], [p[1] for p in pts], **kw)
                axes[1].plot([p[0] for p in pts], [p[2] for p in pts], **kw)
            _finish_axes(axes, "batch B (sequences)", ("latency of the scan (ms)", "throughput (tokens/s)"))
            axes[0].set_yscale("log")
            axes[1].set_yscale("log")
            fig.suptitle(f"{arch}: scan over T = {t.T} tokens vs batch", fontsize=9)
            blocks += [Figure(ctx.figure(fig, f"bench-scan-{arch}-batch"),
                              f"{arch}: latency and throughput of each policy's scan vs batch B, T = {t.T} (bandwidth "
                              "against the copy ceiling in the table below)."), prov]
        body = [[x.arch, x.policy, x.kernel or MISSING, str(x.B), str(x.T), fmt(x.ms), fmt(x.tokens_per_s),
                 fmt(x.GBps), fmt(x.pct_of_copy), fmt(x.bytes), (x.error or "")[:80]] for x in t.rows]
        blocks += [Table(["arch", "policy", "kernel", "B", "T", "ms", "tokens/s", "GB/s", "% of copy", "bytes", "error"],
                         body, caption="All measurements (rows without a time failed; see the last column)"), prov]
    return blocks


# ------------------------------------------------------------------------------------------------
def render_kernels(results: list[Result], ctx: Context) -> list:
    """The decode-kernel benchmark: the per-operator summary (amortised window costs, speedups only
    where the correctness checks passed, the targets); a checkpoint without one shows its checks
    and rows."""
    blocks: list = []
    for r in results:
        t: DecodeKernelsResult = r.typed
        prov = Note(provenance_line([r]))
        blocks += [Heading(f"Decode kernels: {device_str(r.provenance)}", 3), _device_par(r, t.ceiling),
                   Paragraph(f"Timing: {t.ceiling.timing}."), *_peers_par(t.peers)]
        # a run cut short (or a per-operator checkpoint) says so in the file: say it here too
        if t.incomplete or t.partial:
            blocks.append(Paragraph("**Incomplete run**: " + (t.incomplete or
                                                              "a per-operator checkpoint of a run that did not finish")))
        if t.correctness:
            rows = [[k, "pass" if v.ok else "FAIL", ", ".join(f"{a} {fmt(b, 2)}" for a, b in v.rel_err.items()) or MISSING,
                     fmt(v.tol)] for k, v in t.correctness.items()]
            blocks.append(Table(["check", "result", "relative error", "tolerance"], rows,
                                caption="Correctness of every kernel family at the benchmark shapes (a speedup is only "
                                        "reported where the kernels involved passed)"))
        if t.summary is None:
            blocks += [_kernel_rows_table(t.rows), prov]
            continue
        for op, s in t.summary.items():
            op_rows = [x for x in t.rows if x.op == op]
            if op_rows:  # a run of one operator (--ops) summarises the other as all "not measured"
                blocks += _operator_summary(op, s, op_rows, t.ceiling.GBps, ctx, prov)
    return blocks


def _launch_text(x: KernelRow) -> str:
    """A row's launch shape, and for a ReplaySSM row its launch form (``fused_scores``)."""
    shape = ", ".join(f"{k}={v}" for k, v in x.cfg.items()) or "default"
    form = {True: "; one launch", False: "; scores + step launches"}.get(x.fused_scores, "")
    return shape + form


def _kernel_rows_table(rows: list[KernelRow]) -> Table:
    body = [[x.op, x.tag, x.kernel, str(x.batch), x.update or MISSING, x.read or MISSING, fmt(x.W), fmt(x.T),
             _launch_text(x), fmt(x.us), fmt(x.GBps), fmt(x.pct_ceiling),
             (x.error or "")[:80]] for x in rows]
    return Table(["op", "sweep", "kernel", "B", "update", "read", "W", "T", "launch", "µs", "GB/s", "% of ceiling",
                  "error"], body, caption="All measured launches (rows without a time failed; see the last column)")


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


def _sweep_points(sweep: dict, key: str) -> list:
    """[(x, value)] of a summary sweep (integer keys), finite values only, x ascending."""
    return [(x, getattr(sweep[x], key)) for x in sorted(sweep) if finite(getattr(sweep[x], key))]


def _finish_axes(axes, xlabel: str, ylabels) -> None:
    """Shared look of the sweep panels: log2 x axis, labels, legend (or 'not measured')."""
    for ax, yl in zip(axes, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(yl)
        _legend(ax)


def _operator_summary(op: str, s: OperatorSummary, op_rows: list[KernelRow], ceiling: float, ctx: Context,
                      prov: Note) -> list:
    blocks: list = [Heading(f"{op}", 4)]
    # -- batch sweep ---------------------------------------------------------------------------
    rows = [x for x in op_rows if x.tag == "batch" and finite(x.us)]
    sb = s.batch
    if rows:
        fig, axes = _subplots(3)
        for kern in ("conventional", "nonflush", "flush", "fla"):
            pts = sorted((x.batch, x.us, x.GBps) for x in rows if x.kernel == kern)
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
        body = [[str(b)] + [fmt(getattr(sb[b], k)) for k in ("conventional_us", "conventional_pct_ceiling",
                                                             "nonflush_us", "flush_us", "replay_amortised_us",
                                                             "fla_us", "speedup_vs_conventional", "speedup_vs_fla")]
                for b in sorted(sb)]
        blocks.append(Table(head, body, caption=f"{op}: batch sweep (L = 16, fp32 state)"))
    # -- L sweep ---------------------------------------------------------------------------
    sl = s.L
    if sl:
        fig, axes = _subplots(2)
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
        blocks.append(Table(["L", "non-flush (µs)", "flush (µs)", "amortised (µs)", "speedup vs conventional", "bound"],
                            [[str(L)] + [fmt(getattr(sl[L], k)) for k in ("nonflush_us", "flush_us",
                                                                          "replay_amortised_us",
                                                                          "speedup_vs_conventional", "bound")]
                             for L in sorted(sl)], caption=f"{op}: L sweep (B = 256)"))
    # -- drafts ---------------------------------------------------------------------------
    sd = s.drafts
    if sd:
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
            axes[1].axhline(s.targets["verify_T8_vs_conventional"].target, color="tab:red", ls=":",
                            label=f"target ≤ {s.targets['verify_T8_vs_conventional'].target}")
        _finish_axes(axes, "drafts T (tokens per verify)", ("latency (µs)", "ratio (×)"))
        axes[1].set_ylim(bottom=0)
        fig.suptitle(f"{op}: speculative verify (B = 256)", fontsize=9)
        blocks += [Figure(ctx.figure(fig, f"bench-kernels-{op}-T"),
                          f"{op}: verifying T drafts against checkpoint + history, flushes amortised."), prov]
        blocks.append(Table(["T", "verify (µs)", "speculative flush (µs)", "per round amortised (µs)",
                             "ratio to one conventional step", "T conventional steps (µs, estimate)"],
                            [[str(T)] + [fmt(getattr(sd[T], k)) for k in (
                                "verify_us", "spec_flush_us", "per_round_amortised_us",
                                "ratio_to_one_conventional_step", "snapshot_baseline_estimate_us")] for T in sorted(sd)],
                            caption=f"{op}: draft sweep (B = 256)"))
    # -- formats and targets ----------------------------------------------------------------
    fr = []
    for rf, v in s.read.items():
        fr.append([f"read copy {rf} (split:fp32/{rf})", fmt(v.nonflush_us), fmt(v.nonflush_GBps), fmt(v.flush_us),
                   fmt(v.replay_amortised_us)])
    for uf, v in s.update.items():
        fr.append([f"update checkpoint {uf} (read nvfp4)", MISSING, MISSING, fmt(v.flush_us), MISSING])
    for cf, v in s.conventional_formats.items():
        fr.append([f"conventional:{cf}", fmt(v.us), fmt(v.GBps), MISSING, MISSING])
    if fr:
        blocks.append(Table(["configuration", "step (µs)", "GB/s", "flush (µs)", "amortised (µs)"], fr,
                            caption=f"{op}: storage formats at B = 256, L = 16"))
    if s.targets:
        blocks.append(Table(["quantity", "measured", "target", "met", "byte bound"],
                            [[k, fmt(v.value), fmt(v.target), {True: "yes", False: "NO"}.get(v.met, "not measured"),
                              fmt(v.byte_bound)] for k, v in s.targets.items()],
                            caption=f"{op}: targets (B = 256, L = 16; byte bound: the value with every ReplaySSM "
                                    "kernel at the copy ceiling, the baseline as measured)"))
    blocks.append(prov)
    return blocks


def _subplots(n: int):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), dpi=110)
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
    return fig, list(axes)


# ------------------------------------------------------------------------------------------------
def render_kl(results: list[Result], ctx: Context) -> list:
    """The KL engine benchmark: teacher-forced engine check, speedup over token-by-token decode, long run."""
    blocks: list = []
    for r in results:
        t: KLEngineResult = r.typed
        prov = Note(provenance_line([r], t.policies))
        blocks += [Heading(f"KL engine: {t.model} on {device_str(r.provenance)}", 3),
                   Paragraph(f"Reference fp32 plus {len(t.policies)} policies in one forward per segment; engine "
                             f"`{t.engine}`; model parameters {fmt(t.model_params)}; copy ceiling "
                             + (f"{fmt(t.ceiling.GBps)} GB/s." if t.ceiling else "not measured."))]
        chk = t.check
        if chk is not None:
            rows = [[p, "pass" if v.ok else "FAIL", fmt(v.disagreement), fmt(v.effect), v.criterion or MISSING]
                    for p, v in chk.verdicts.items()]
            blocks.append(Table(["policy", "teacher-forced = token-by-token", "disagreement", "policy effect",
                                 "criterion"], rows,
                                caption=f"Engine check: {chk.decode_tokens} decode tokens after a prefill of "
                                        f"{chk.prefill}, {chk.weights} weights"))
        sb = t.side_by_side
        if sb is not None:
            rows = [["decode tokens", fmt(sb.decode_tokens)],
                    ["teacher-forced engine (s)", fmt(sb.teacher_forced_seconds)],
                    ["teacher-forced (tokens/s)", fmt(sb.teacher_forced_tok_per_s)],
                    ["token-by-token (s per step)", fmt(sb.token_by_token_seconds_per_step)],
                    ["token-by-token (s for the stream)", fmt(sb.token_by_token_seconds_for_stream)],
                    ["speedup (×)", "not reported: engine check failed" if sb.speedup_valid is False else
                     fmt(sb.speedup) + (" (engine check not run)" if sb.speedup_valid is None else "")]]
            blocks.append(Table(["quantity", "value"], rows,
                                caption="Teacher-forced engine vs token-by-token decode on the same stream "
                                        f"({sb.weights} weights; token-by-token {sb.token_by_token_note})"))
        lr = t.long_run
        if lr is not None:
            rows = [["stream tokens", fmt(lr.tokens)], ["prefill", fmt(lr.prefill)], ["segment (tokens)", fmt(lr.segment)],
                    ["rows (fp32 + policies)", fmt(lr.rows)], ["decode tokens done", fmt(lr.decode_tokens_done)],
                    ["seconds", fmt(lr.seconds)], ["tokens/s", fmt(lr.tokens_per_s_per_row)],
                    ["full run (s)", fmt(lr.estimated_seconds_full)],
                    ["how the full run time was obtained", lr.estimate_note], ["target (s)", fmt(lr.target_seconds)],
                    ["peak GPU memory (GiB)", fmt(lr.peak_gpu_mem_gib)]]
            blocks.append(Table(["quantity", "value"], rows, caption="The long run (KL per position included)"))
            segs = [x for x in lr.segments if finite(x.seconds) and x.seconds > 0]
            if len(segs) >= 2:
                fig, ax = new_figure()
                ax.plot([x.start + x.tokens for x in segs], [x.tokens / x.seconds for x in segs], marker="o", ms=3,
                        color="k")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("stream position at the end of the segment (tokens)")
                ax.set_ylabel("stream tokens/s (fp32 + policies together)")
                ax.set_title(f"{t.model}: long-run throughput along the stream", fontsize=9)
                blocks += [Figure(ctx.figure(fig, "bench-kl-throughput"),
                                  "Tokens per second of each segment of the long run (the first one is the prefill); "
                                  "attention makes later segments slower."), prov]
            mk = lr.mean_kl_by_policy_random_weights
            if mk:
                blocks.append(Paragraph("Mean KL of the long run (random weights: a smoke value, not a result): "
                                        + ", ".join(f"`{p}` {fmt(v)}" for p, v in mk.items()) + "."))
        blocks.append(prov)
    return blocks
