"""Benchmark the decode-step kernels on the GPU: conventional vs ReplaySSM vs flash-linear-attention.

    python scripts/bench_kernels.py -o reports/bench/bench_kernels.json [--quick]
    python scripts/bench_kernels.py --ops mamba2 -o m2.json --log m2_rows.jsonl     # one operator
    python scripts/bench_kernels.py --resummarise m2.json gdn.json -o reports/bench/bench_kernels.json
    python scripts/bench_kernels.py --resummarise old.json --recount-bytes -o old_recounted.json
    python scripts/bench_kernels.py --tune-only -o tune.json --log tune_rows.jsonl   # launch-shape exploration
    python scripts/bench_kernels.py --tune-batches 1 4 16 -o small.json --log small_rows.jsonl  # the same at small batch

What is measured and how: precision_lab/bench/decode_kernels.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default="reports/bench/bench_kernels.json", help="result JSON (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer batches, windows and draft counts than the full sweep, every target still measured "
                    "(both operators took 475 s on an H100; where a call has a shorter time limit, run each "
                    "operator with --ops and join the files with --resummarise)")
    ap.add_argument("--ops", nargs="+", default=["mamba2", "gdn"], choices=["mamba2", "gdn"],
                    help="which operators to check and time (default both)")
    ap.add_argument("--tune-only", action="store_true",
                    help="only the launch-shape tuning rows at batch 256, over the wider exploration space "
                    "(TUNE_SPACE_WIDE); no correctness checks, sweeps or summary")
    ap.add_argument("--tune-batches", nargs="+", type=int, metavar="B",
                    help="only the launch-shape exploration at these (small) batches, over TUNE_SPACE_SMALL: "
                    "smaller row blocks and fewer warps than at batch 256 (a tune-only run)")
    ap.add_argument("--recount-bytes", action="store_true",
                    help="with --resummarise: recount every row's bytes (and so its GB/s and %% of ceiling) with "
                    "the current bytes model first; for files written under an earlier model")
    ap.add_argument("--plots-from", metavar="JSON", help="only draw the PNGs from an existing JSON")
    ap.add_argument("--log", metavar="JSONL", help="append every measured row to this JSON-lines file as it is measured")
    ap.add_argument("--resummarise", nargs="+", metavar="JSON",
                    help="recompute the summary from the measured rows of one or more result JSONs (several: "
                    "runs split by --ops, merged: rows and checks joined, the highest ceiling kept), write it "
                    "to --output with the plots and print the Markdown tables")
    args = ap.parse_args(argv)
    if args.recount_bytes and not args.resummarise:
        ap.error("--recount-bytes needs --resummarise (it recounts the rows of existing result files)")
    from precision_lab.bench import decode_kernels

    return decode_kernels.main(output=args.output, quick=args.quick, ops=args.ops, tune_only=args.tune_only,
                               plots_from=args.plots_from, log=args.log, resummarise_from=args.resummarise,
                               tune_batches=args.tune_batches, recount=args.recount_bytes)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(Path(__file__).resolve().parents[1])
    sys.exit(main())
