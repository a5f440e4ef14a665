"""Train a small byte-level hybrid (Qwen3.5-style or Nemotron-H-style) on the Gutenberg corpus's
train split, keep the checkpoint with the best validation bits per byte, and save it with its
held-out bits per byte and SSM memory distribution (precision_lab/training.py, docs/training.md).

    python scripts/train_hybrid.py --arch qwen3.5 --minutes 8 --out runs/qwen3.5-gutenberg
    python scripts/train_hybrid.py --arch nemotron-h --minutes 8 --out runs/nemotron-h-gutenberg
    python scripts/train_hybrid.py --arch qwen3.5 --tiny --minutes 1 --out /tmp/smoke   # CPU smoke run
    python scripts/train_hybrid.py --readme runs/qwen3.5-gutenberg   # (re)write README.md from card.json

Output folder: model.safetensors (bf16), config.json (transformers), card.json (everything the run
knows: data split, settings, learning curve, held-out bits/byte, memory per SSM head, provenance,
sha256 of the weights) and README.md (unless --no-readme). Every file is written atomically.
"""
from __future__ import annotations

import time

_STARTED = time.monotonic()  # the --minutes budget counts from here

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

_ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("precision_lab") is None:  # running from a checkout without an install
    sys.path.insert(0, str(_ROOT))
import precision_lab  # noqa: E402,F401  (imported before the root leaves sys.path: submodules then resolve through it)

# With the repository root on sys.path, transformers' probes for Hugging Face's `kernels` package
# (at import and again when a model module loads) would find this repository's kernels/ folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]


def parse_args(argv=None) -> argparse.Namespace:
    from precision_lab.training import ARCHS, TrainConfig

    d = TrainConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=list(ARCHS), default=d.arch)
    p.add_argument("--out", default=None, help="output folder (default runs/<arch>-gutenberg)")
    p.add_argument("--minutes", type=float, default=d.minutes,
                   help="wall-clock budget of the whole run, evaluation and saving included (default %(default)s)")
    p.add_argument("--steps", type=int, default=None,
                   help="train exactly this many steps (the schedule then follows steps; the budget still stops it)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="training and evaluation window (>= 2048)")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--eval-every", type=int, default=d.eval_every, help="validation every N steps")
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default=d.device, help="auto | cuda | cuda:N | cpu")
    p.add_argument("--no-amp", action="store_true", help="train in fp32 (default: bf16 autocast on CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model for the training steps")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny shape of the architecture and short windows: a CPU smoke run of the whole recipe")
    p.add_argument("--heldout-max-windows", type=int, default=None,
                   help="evaluate at most N windows per held-out document (default: all of every document)")
    p.add_argument("--val-max-windows", type=int, default=None, help="use at most N validation windows")
    p.add_argument("--no-readme", action="store_true", help="write no README.md (card.json has everything)")
    p.add_argument("--readme", metavar="FOLDER", default=None,
                   help="only (re)write FOLDER/README.md from FOLDER/card.json, after checking the weights")
    args = p.parse_args(argv)
    if args.readme is None and args.seq_len < 2048 and not args.tiny:
        p.error(f"--seq-len {args.seq_len} is too short: heads learn long memory from windows of >= 2048 "
                "tokens (use --tiny for a smoke run)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from precision_lab.training import TrainConfig, run_from_args

    cfg = TrainConfig(
        arch=args.arch, out=args.out or f"runs/{args.arch}-gutenberg", minutes=args.minutes, steps=args.steps,
        seq_len=128 if args.tiny and args.seq_len == TrainConfig.seq_len else args.seq_len,
        batch_size=4 if args.tiny and args.batch_size == TrainConfig.batch_size else args.batch_size,
        lr=args.lr, min_lr_ratio=args.min_lr_ratio, warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_every=args.eval_every,
        log_every=args.log_every, eval_batch_size=args.eval_batch_size, seed=args.seed, device=args.device,
        amp=False if args.no_amp else None, compile=args.compile, tiny=args.tiny,
        heldout_max_windows=args.heldout_max_windows, val_max_windows=args.val_max_windows,
        readme=not args.no_readme)
    return run_from_args(cfg, readme_only=args.readme, started=_STARTED)


if __name__ == "__main__":
    sys.exit(main())
