"""precision-lab report: build a report (Markdown + static HTML + PNG) from result JSON."""
from __future__ import annotations

from . import HelpFormatter, add_out_option

EPILOG = """examples:
  precision-lab sim --steps 4096 -o runs/sim/mamba2-4096
  precision-lab report runs/sim/mamba2-4096.json -o runs/reports/sim-demo
  precision-lab report runs/kl/tiny-nemotron-h-*/ -o runs/reports/kl-tiny
  precision-lab report runs/sim/*.json runs/kl/*/summary.json runs/lmeval-smoke/lmeval.json \\
      reports/bench/bench_quant.json reports/bench/bench_scan.json -o runs/reports/study

Inputs: result JSON files (kinds sim, kl, lmeval, bench-quant, bench-kernels, bench-scan, bench-kl)
or run folders holding summary.json / lmeval.json. Nothing is rerun.
Outputs in -o DIR: index.md, index.html (opens offline: inline CSS, local PNGs, no scripts),
figures/*.png and data/ (a copy of every input). A rebuild into DIR replaces or removes only the
files an earlier build wrote (listed in DIR/.precision-lab-report.json); other files are left alone.
Refused with one error line (exit status 2): files that are not precision-lab results, corrupted
or truncated JSON, the same result twice, two results of the same kind and setup that both hold a
policy (the report would have to pick one), and benchmark smoke runs (interpreter timings).
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="build a Markdown + HTML report with figures from result JSON",
        description="Turn result files (simulation, KL vs length, lm-eval, benchmarks) into a report: "
        "index.md, a static index.html and PNG figures, with provenance under every figure.",
        formatter_class=HelpFormatter, epilog=EPILOG)
    p.add_argument("results", nargs="+", metavar="RESULT", help="result JSON files or run folders")
    add_out_option(p, required=True, help="report folder, e.g. runs/reports/my-study")
    p.add_argument("--title", default=None, help="report title (default: 'precision-lab report: <DIR name>')")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    from precision_lab.report.build import build_report

    index = build_report(args.results, args.out, title=args.title)
    print(f"wrote {index.parent / 'index.md'} and {index} ({len(list((index.parent / 'figures').glob('*.png')))} "
          "figures)")
    return 0
