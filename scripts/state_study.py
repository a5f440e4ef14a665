"""The state-precision study on trained models (KL vs length against matched references with floors,
per-layer sensitivity, the next-speaker task): a thin entry point over ``precision-lab study`` (same
arguments, see ``--help``):

    python scripts/state_study.py --models MODEL_A MODEL_B --data HELD_OUT --speaker-data PLAYS --out OUT
    python scripts/state_study.py --quick --models tiny-qwen3.5 --speaker-data plays/ --out runs/smoke

Rerunning the same command after an interruption resumes it.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout


def main(argv: list[str] | None = None) -> int:
    from precision_lab.cli import main as cli_main

    return cli_main(["study", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
