#!/usr/bin/env python
"""Benchmark the Triton quantize/dequantize kernels on a state-shaped fp32 tensor (GPU only).

    python scripts/bench_quant.py                          # 256×128×64×128 fp32 (1 GiB), reports/bench/
    python scripts/bench_quant.py --shape 64 128 64 128 --out-dir /tmp/bench
    python scripts/bench_quant.py --smoke --shape 3 2 16 32 --out-dir /tmp/bench   # no GPU: plumbing only

What is checked, timed and written: precision_lab/bench/quant_kernels.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--shape", type=int, nargs="+", default=[256, 128, 64, 128],
                   help="state shape [..., R, C] (default: %(default)s)")
    p.add_argument("--out-dir", default="reports/bench", help="where bench_quant.json/png go (default: %(default)s)")
    p.add_argument("--rep-ms", type=float, default=200.0, help="do_bench repetition time per kernel in ms (default: %(default)s)")
    p.add_argument("--check-chunk", type=int, default=32,
                   help="leading-axis slices per reference-check chunk (default: %(default)s)")
    p.add_argument("--target", type=float, default=0.8,
                   help="NVFP4 quantize target as a fraction of copy GB/s (default: %(default)s)")
    p.add_argument("--smoke", action="store_true",
                   help="without a GPU: run the whole benchmark under the Triton interpreter on a tiny shape "
                        "(checks the plumbing; its timings are meaningless and marked so)")
    args = p.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("bench_quant: needs a CUDA GPU (the CPU interpreter would time numpy, not the kernels); "
              "--smoke runs the plumbing on the CPU", file=sys.stderr)
        return 2
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    from precision_lab.bench import quant_kernels

    return quant_kernels.run(shape=args.shape, out_dir=args.out_dir, rep_ms=args.rep_ms,
                             check_chunk=args.check_chunk, target=args.target, device=device)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(Path(__file__).resolve().parents[1])
    sys.exit(main())
