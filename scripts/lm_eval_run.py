#!/usr/bin/env python
"""lm-eval study under several state policies (thin wrapper of ``precision-lab lm-eval``).

    python scripts/lm_eval_run.py --model tiny-qwen3.5 --policies fp32 shared:nvfp4-sr \\
        --tasks gpqa --synthetic --limit 4 --gen-kwargs max_gen_toks=32 --out runs/lmeval-smoke

``python scripts/lm_eval_run.py --help`` lists every option; data parallel:
``accelerate launch scripts/lm_eval_run.py --model <hub id> ...``.
"""
import sys

from precision_lab.cli import main

if __name__ == "__main__":
    sys.exit(main(["lm-eval", *sys.argv[1:]]))
