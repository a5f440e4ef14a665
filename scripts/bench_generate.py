"""Generation benchmark (GPU): ms per decode step of the 4B-shape presets under each state policy,
the fast path (decode-step kernels, CUDA graphs) against plain transformers, after a correctness
check on the GPU. Writes reports/bench/bench_generate.json (see precision_lab/bench/generate.py).

    python scripts/bench_generate.py                      # the full run (both presets, batch 1/8/64)
    python scripts/bench_generate.py --presets qwen3.5-4b-shape --batches 8 --new-tokens 64
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from precision_lab.bench.generate import PLAIN, POLICIES, run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["qwen3.5-4b-shape", "nemotron-3-nano-4b-shape"],
                    help="model presets to time (default: %(default)s)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 64], help="batch sizes (default: %(default)s)")
    ap.add_argument("--rows", nargs="+", default=[PLAIN, *POLICIES],
                    help="rows: policies and/or 'plain transformers' (default: all)")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (default: %(default)s)")
    ap.add_argument("--new-tokens", type=int, default=256, help="generated tokens per row (default: %(default)s)")
    ap.add_argument("--plain-tokens", type=int, default=64,
                    help="tokens generated for the plain-transformers row (default: %(default)s)")
    ap.add_argument("--check-presets", nargs="+", default=["tiny-qwen3.5", "tiny-nemotron-h"],
                    help="tiny presets the correctness check runs on (default: %(default)s)")
    ap.add_argument("--skip-check", action="store_true", help="time without the correctness check (labelled)")
    ap.add_argument("-o", "--out", type=Path, default=Path("reports/bench/bench_generate.json"),
                    help="result JSON (default: %(default)s)")
    a = ap.parse_args()
    run(presets=a.presets, batches=a.batches, rows=a.rows, prompt=a.prompt, new_tokens=a.new_tokens,
        plain_tokens=a.plain_tokens, check_presets=a.check_presets, out=a.out, skip_check=a.skip_check)


if __name__ == "__main__":
    main()
