"""Write RULER needle-in-a-haystack rows to local files with lm-eval's own generator.

Upstream RULER tasks build their rows at load time (a ``custom_dataset`` function sized with the
model's tokenizer). The local presets read files instead, so the rows are generated once here, by
the same upstream functions, and the long-context study runs from them offline:

    python -m precision_lab.evals.tasks.prepare_ruler --tokenizer /path/to/model \\
        --lengths 4096 32768 131072 --out data/lmeval
    precision-lab lm-eval --model /path/to/model --tasks ruler_niah --data-dir data/lmeval ...

Haystacks: ``niah_single_1`` ("repeat") and ``niah_multikey_2/3`` ("needle") build offline; the
essay haystack of the other five tasks is the ``baber/paul_graham_essays`` dataset, which must be
in the Hugging Face datasets cache (or reachable). Upstream draws 500 rows per length.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from precision_lab.evals.tasks import RULER_NIAH

OFFLINE_TASKS = ("niah_single_1", "niah_multikey_2", "niah_multikey_3")


def prepare_ruler(tokenizer: str, lengths: list[int], out_dir: str | Path,
                  tasks: tuple[str, ...] | list[str] = RULER_NIAH) -> dict[str, Path]:
    """Generate rows of each task at each length into ``out_dir/ruler/<task>.jsonl``.

    tokenizer: a tokenizer name or local path (the model's: lengths are counted in its tokens).
    Returns task -> file. Rows keep upstream's fields (index, input, outputs, length, max_length,
    gen_prefix); the lm-eval metric of a row is keyed by its max_length.
    """
    bad = [t for t in tasks if t not in RULER_NIAH]
    if bad:
        raise ValueError(f"unknown RULER task(s) {bad}; known: {', '.join(RULER_NIAH)}")
    if not lengths or any(int(n) < 64 for n in lengths):
        raise ValueError(f"lengths must be token counts >= 64, got {lengths}")
    niah = importlib.import_module("lm_eval.tasks.ruler.niah_utils")
    out = Path(out_dir) / "ruler"
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for task in tasks:
        ds = getattr(niah, task)(tokenizer=tokenizer, max_seq_lengths=[int(n) for n in lengths])["test"]
        path = out / f"{task}.jsonl"
        with path.open("w") as f:
            for row in ds:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        written[task] = path
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m precision_lab.evals.tasks.prepare_ruler", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="tokenizer name or path (the evaluated model's)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096], help="context lengths in tokens")
    ap.add_argument("--out", required=True, help="data dir (rows go to OUT/ruler/<task>.jsonl)")
    ap.add_argument("--tasks", nargs="+", default=list(RULER_NIAH), choices=RULER_NIAH)
    args = ap.parse_args(argv)
    for task, path in prepare_ruler(args.tokenizer, args.lengths, args.out, args.tasks).items():
        print(f"{task}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
