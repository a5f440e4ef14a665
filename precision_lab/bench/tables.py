"""Markdown tables of a decode-kernel benchmark result (what reports/bench/README.md shows)."""
from __future__ import annotations

from .ceiling import REFERENCE_COPY_GBPS
from .schema import DecodeKernelsResult


def decode_kernel_tables(result: DecodeKernelsResult) -> str:
    """The results tables of reports/bench/README.md, from the result alone."""
    def f(v, fmt="{:.2f}"):
        return "—" if v is None else fmt.format(v)

    ceil = result.ceiling.GBps
    checks = result.correctness.values()
    lines = [f"Device: {result.provenance.device.gpu or 'CPU'}; in-run memcpy {ceil:.0f} GB/s (read + write); "
             f"targets judged against max(in-run, reference copy ceiling {REFERENCE_COPY_GBPS:.0f} GB/s). "
             f"Correctness: {sum(c.ok for c in checks)}/{len(checks)} checks passed.", ""]
    summary = result.summary or {}
    lines += ["### Targets (batch 256, L = 16; fp32 state unless the name says otherwise; batch1: batch 1)", "",
              "| op | metric | measured | target | met | byte bound |", "|---|---|---|---|---|---|"]
    for op, s in summary.items():
        for k, t in s.targets.items():
            rounds = "" if not t.spread else f" ({f(t.spread[0])}–{f(t.spread[1])} over the rounds)"
            lines.append(f"| {op} | {k} | {f(t.value)}{rounds} | {t.target} | {t.met} | {f(t.byte_bound)} |")
    lines += ["", "Byte bound: the ratio if every ReplaySSM kernel in it moved its counted bytes at the copy "
              "ceiling and its baseline kept its measured time (— where bytes do not bound it)."]
    lines += ["", "### Batch sweep (µs per token step; ReplaySSM shared:fp32 @L16 amortised over the window)", "",
              "| op | batch | conventional | % in-run memcpy | non-flush | flush | ReplaySSM amortised | fla peer | "
              "× conventional | × fla |", "|---|---|---|---|---|---|---|---|---|---|"]
    for op, s in summary.items():
        for B, e in s.batch.items():
            lines.append(f"| {op} | {B} | {f(e.conventional_us, '{:.1f}')} | {f(e.conventional_pct_ceiling, '{:.0f}')} | "
                         f"{f(e.nonflush_us, '{:.1f}')} | {f(e.flush_us, '{:.1f}')} | "
                         f"{f(e.replay_amortised_us, '{:.1f}')} | {f(e.fla_us, '{:.1f}')} | "
                         f"{f(e.speedup_vs_conventional)} | {f(e.speedup_vs_fla)} |")
    if any(s.launch_forms for s in summary.values()):
        lines += ["", "### One-token ReplaySSM steps: one launch vs scores kernel + step kernel (shared:fp32 @L16)",
                  "", "| op | batch | conventional µs | non-flush, one launch | non-flush, two launches | "
                  "flush, one launch | flush, two launches | conventional ÷ non-flush (one / two launches) |",
                  "|---|---|---|---|---|---|---|---|"]
        for op, s in summary.items():
            for B, e in s.launch_forms.items():
                lines.append(f"| {op} | {B} | {e.conventional_us:.2f} | {e.nonflush_one_launch_us:.2f} | "
                             f"{e.nonflush_two_launch_us:.2f} | {e.flush_one_launch_us:.2f} | "
                             f"{e.flush_two_launch_us:.2f} | {f(e.nonflush_one_launch_vs_conventional)} / "
                             f"{f(e.nonflush_two_launch_vs_conventional)} |")
    lines += ["", "### L sweep (batch 256)", "", "| op | L | non-flush µs | flush µs | amortised µs | × conventional | "
              "bound 2L/(L+1) |", "|---|---|---|---|---|---|---|"]
    for op, s in summary.items():
        for L, e in s.L.items():
            lines.append(f"| {op} | {L} | {e.nonflush_us:.1f} | {e.flush_us:.1f} | {e.replay_amortised_us:.1f} | "
                         f"{f(e.speedup_vs_conventional)} | {e.bound:.2f} |")
    lines += ["", "### Speculative verify (batch 256, history block 16, every draft accepted)", "",
              "| op | T | verify µs | spec. flush µs | per round amortised µs | ÷ one conventional step | "
              "snapshot baseline T×conv µs |", "|---|---|---|---|---|---|---|"]
    for op, s in summary.items():
        for T, e in s.drafts.items():
            lines.append(f"| {op} | {T} | {e.verify_us:.1f} | {e.spec_flush_us:.1f} | {e.per_round_amortised_us:.1f} | "
                         f"{f(e.ratio_to_one_conventional_step)} | {e.snapshot_baseline_estimate_us:.1f} |")
    lines += ["", "### Read / update / storage formats (batch 256, L = 16)", "",
              "| op | kernel | format | µs | GB/s |", "|---|---|---|---|---|"]
    for op, s in summary.items():
        for rf, e in s.read.items():
            lines.append(f"| {op} | non-flush, read copy | {rf} | {e.nonflush_us:.1f} | {e.nonflush_GBps:.0f} |")
            lines.append(f"| {op} | flush split:fp32/{rf} | {rf} | {e.flush_us:.1f} | — |")
        for uf, e in s.update.items():
            lines.append(f"| {op} | flush split:{uf}/nvfp4 | {uf} | {e.flush_us:.1f} | {e.GBps:.0f} |")
        for cf, e in s.conventional_formats.items():
            lines.append(f"| {op} | conventional | {cf} | {e.us:.1f} | {e.GBps:.0f} |")
    return "\n".join(lines) + "\n"
