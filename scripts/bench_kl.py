"""Benchmark the KL-vs-length machinery on one GPU: teacher-forced engine vs token-by-token decode,
a 128K-token long run with KL per position, and an engine check.

    python scripts/bench_kl.py --out reports/bench/bench_kl_h200.json
    python scripts/bench_kl.py --model tiny-qwen3.5 --tokens 4096 --side-tokens 256 --tbt-tokens 16 \\
        --check-tokens 24 --device cpu --out /tmp/bench_kl_cpu.json          # CPU smoke run

What is measured and written: precision_lab/bench/kl_engine.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3.5-4b-shape", help="model preset (default: %(default)s)")
    ap.add_argument("--policies", nargs="+",
                    default=["shared:nvfp4", "split:fp32/nvfp4", "split:fp16-sr/nvfp4", "conventional:bf16"],
                    help="policies beside the fp32 reference (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=131072, help="long-run stream length, prefill included (default: %(default)s)")
    ap.add_argument("--prefill", type=int, default=512, help="prefill tokens (default: %(default)s)")
    ap.add_argument("--segment", type=int, default=4096, help="tokens per segment of the long run (default: %(default)s)")
    ap.add_argument("--time-limit", type=float, default=120.0,
                    help="stop the long run after this many seconds (default: %(default)s)")
    ap.add_argument("--side-tokens", type=int, default=512, help="decode tokens of the side-by-side stream (default: %(default)s)")
    ap.add_argument("--tbt-tokens", type=int, default=32, help="token-by-token steps actually timed (default: %(default)s)")
    ap.add_argument("--check-tokens", type=int, default=16, help="decode tokens of the correctness check (default: %(default)s)")
    ap.add_argument("--engine", default="auto", help="KL engine (default: %(default)s)")
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto (default: %(default)s)")
    ap.add_argument("--skip-check", action="store_true", help="leave out the engine check (the speedup is then unchecked)")
    ap.add_argument("--out", default="reports/bench/bench_kl.json", help="result JSON (default: %(default)s)")
    args = ap.parse_args(argv)
    from precision_lab.bench import kl_engine

    return kl_engine.run(model=args.model, policies=args.policies, tokens=args.tokens, prefill=args.prefill,
                         segment=args.segment, time_limit=args.time_limit, side_tokens=args.side_tokens,
                         tbt_tokens=args.tbt_tokens, check_tokens=args.check_tokens, engine=args.engine,
                         device=args.device, skip_check=args.skip_check, out=args.out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(Path(__file__).resolve().parents[1])
    sys.exit(main())
