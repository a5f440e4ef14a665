"""KL(fp32 state || policy) vs generated length under teacher forcing — the study of the paper's
Figure 6. A thin entry point over ``precision-lab kl`` (same arguments, see ``--help``):

    python scripts/kl_vs_length.py                                  # offline demo on CPU
    python scripts/kl_vs_length.py --model Qwen/Qwen3.5-4B --data pg19 --docs 8 --tokens 131072 \\
        --prefill 512 --segment 8192 --policies shared:nvfp4 split:fp32/nvfp4 split:fp16-sr/nvfp4
    torchrun --nproc-per-node 4 scripts/kl_vs_length.py --model Qwen/Qwen3.5-4B --data pg19 --docs 16 ...

Rerunning the same command after an interruption resumes it (finished batches are kept).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout


def main(argv: list[str] | None = None) -> int:
    # Under torchrun each process takes batches k with k mod WORLD_SIZE == RANK and rank 0 merges
    # (precision_lab.evals.kl.run_kl sets up the process group for its final barrier).
    from precision_lab.cli import main as cli_main

    return cli_main(["kl", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
