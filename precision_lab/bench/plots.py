"""The figures a benchmark draws beside its result file (the report draws its own from the JSON)."""
from __future__ import annotations

import os
from pathlib import Path

from .ceiling import REFERENCE_COPY_GBPS
from .schema import DecodeKernelsResult, QuantKernelsResult


def _plt():
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def decode_kernel_plots(result: DecodeKernelsResult, outdir: Path) -> list[str]:
    """bench_kernels_batch.png (latency vs batch) and bench_kernels_bandwidth.png (GB/s vs batch)."""
    plt = _plt()
    outdir = Path(outdir)
    files = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("mamba2", "gdn")):
        s = result.summary[op].batch if result.summary and op in result.summary else {}
        Bs = sorted(s)
        for key, label in (("conventional_us", "conventional fp32"), ("replay_amortised_us", "ReplaySSM L16 (amortised)"),
                           ("fla_us", "fla fused_recurrent")):
            ys = [getattr(s[b], key) for b in Bs]
            if any(y is not None for y in ys):
                ax.plot(Bs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("µs per token step")
        ax.set_title(op)
        ax.legend()
    fig.tight_layout()
    p = outdir / "bench_kernels_batch.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(str(p))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("mamba2", "gdn")):
        rows = [r for r in result.rows if r.op == op and r.GBps is not None and r.tag == "batch"]
        for kind in ("conventional", "nonflush", "flush", "fla"):
            rr = sorted((r.batch, r.GBps) for r in rows if r.kernel == kind)
            if rr:
                ax.plot([a for a, _ in rr], [b for _, b in rr], marker="o", label=kind)
        ax.axhline(result.ceiling.GBps, color="k", ls="--", label="in-run memcpy")
        ax.axhline(REFERENCE_COPY_GBPS, color="r", ls=":", label=f"reference copy ceiling {REFERENCE_COPY_GBPS:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("GB/s (bytes model)")
        ax.set_title(op)
        ax.legend(fontsize=8)
    fig.tight_layout()
    p = outdir / "bench_kernels_bandwidth.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(str(p))
    return files


def quant_plot(out: QuantKernelsResult, path: Path) -> None:
    """GB/s bars of the quantizer kernels against the copy ceiling and the NVFP4 target."""
    plt = _plt()
    names = [n for n, k in out.kernels.items() if k.GBps is not None]
    vals = [out.kernels[n].GBps for n in names]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.barh(names[::-1], vals[::-1], color="tab:blue")
    copy = out.ceiling.GBps if out.ceiling else None
    for b, n in zip(bars, names[::-1]):
        frac = out.kernels[n].frac_of_copy
        if frac is not None:
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {100 * frac:.0f}%", va="center", fontsize=8)
    if copy:
        ax.axvline(copy, color="k", ls="--", label=f"copy ceiling {copy:.0f} GB/s")
        ax.axvline(out.target.fraction_of_copy * copy, color="tab:red", ls=":", label="NVFP4 quantize target")
        ax.legend(loc="lower right", fontsize=8)
    gpu = out.provenance.device.gpu or "CPU (interpreter)"
    ax.set_xlabel("GB/s (explicit bytes model)")
    ax.set_title(f"quantize/dequantize, fp32 state {tuple(out.shape)}, {gpu}", fontsize=9)
    ax.set_xlim(0, max(vals + [copy or 0]) * 1.15 or 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
