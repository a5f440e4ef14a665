#!/usr/bin/env python
"""Check and time the teacher-forced Triton scans (the KL engine's fast path) on the GPU.

    python scripts/bench_scan.py                       # T = 32768, batch 1 2 4 8 -> reports/bench/
    python scripts/bench_scan.py --T 8192 --batches 1 4 --out-dir /tmp/bench
    python scripts/bench_scan.py --smoke               # no GPU: interpreter, tiny shapes (plumbing only)

What is checked, timed and written: precision_lab/bench/scan_kernels.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--T", type=int, default=32768, help="tokens per sequence in the timed runs (default: %(default)s)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8], help="batch sizes timed (default: %(default)s)")
    p.add_argument("--policies", nargs="+",
                   default=["fp32", "shared:nvfp4-sr", "split:fp16-sr/nvfp4", "conventional:bf16"],
                   help="policies checked and timed (default: %(default)s)")
    p.add_argument("--recurrent-batches", type=int, nargs="+", default=[1, 8],
                   help="batches at which the (sequential, per-token) conventional scan is timed (default: %(default)s)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per configuration, median (default: %(default)s)")
    p.add_argument("--time-budget", type=float, default=200.0,
                   help="seconds; later timings are skipped (default: %(default)s)")
    p.add_argument("--check-T", type=int, default=1024, help="tokens of the batch-1 correctness check (default: %(default)s)")
    p.add_argument("--tol", type=float, default=3e-3,
                   help="max relative RMS vs the torch reference (y in its dtype; a rare flip of a quantized "
                        "code moves a state by ~1e-3) (default: %(default)s)")
    p.add_argument("--out-dir", default=str(ROOT / "reports" / "bench"), help="output folder (default: reports/bench)")
    p.add_argument("--smoke", action="store_true", help="interpreter on tiny shapes; timings meaningless")
    args = p.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no GPU: run with --smoke to check the plumbing under the interpreter", file=sys.stderr)
        return 2
    from precision_lab.bench import scan_kernels

    return scan_kernels.run(T=args.T, batches=args.batches, policies=args.policies,
                            recurrent_batches=args.recurrent_batches, reps=args.reps, time_budget=args.time_budget,
                            check_T=args.check_T, tol=args.tol, out_dir=args.out_dir, smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(ROOT)
    sys.exit(main())
