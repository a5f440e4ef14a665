"""``precision-lab`` command line. Each subcommand lives in ``precision_lab/commands/<name>.py``
and exposes ``add_parser(subparsers)``; heavy imports stay inside the command's run function so
``precision-lab --help`` is instant."""
from __future__ import annotations

import argparse
import importlib
import sys

# (module under precision_lab.commands) in the order --help lists them
COMMANDS = ("formats", "sim", "kl", "lm_eval", "study", "report", "models")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precision-lab",
        description="Numerical precision of recurrent (SSM) states in hybrid LLMs: quantizers, ReplaySSM "
        "decode in shared and split precision, KL-vs-length and lm-eval studies, reports.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  precision-lab formats\n  precision-lab sim --steps 4096\n  precision-lab kl\n"
        "  precision-lab report runs/kl/summary.json -o reports/my-study",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"precision_lab.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"precision_lab.commands.{name}":
                continue  # command not built yet
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted; completed work is saved where the command says it resumes from", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as e:  # user errors: one clear line, no traceback
        if getattr(args, "debug", False):
            raise
        print(f"precision-lab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
