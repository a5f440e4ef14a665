"""``precision-lab`` command line. Each subcommand lives in ``precision_lab/commands/<name>_command.py``
and exposes ``add_parser(subparsers)``; heavy imports stay inside the command's run function so
``precision-lab --help`` is instant. Every subcommand uses ``commands.HelpFormatter`` (defaults
shown) and spells its output option ``-o/--out``."""
from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .commands import HelpFormatter

# (module under precision_lab.commands) in the order --help lists them
COMMANDS = ("formats", "sim", "kl", "lm_eval", "study", "report", "models")

# The paths are the commands' default outputs: sim --steps 4096 writes runs/sim/mamba2-4096.json,
# kl writes runs/kl/<model>-<hash of the settings>/ (and prints it).
EPILOG = """examples:
  precision-lab formats
  precision-lab sim --steps 4096
  precision-lab kl
  precision-lab report runs/sim/mamba2-4096.json runs/kl/tiny-nemotron-h-*/ -o runs/reports/my-study
  precision-lab COMMAND --help      # each command's options and examples
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precision-lab",
        description="Numerical precision of recurrent (SSM) states in hybrid LLMs: quantizers, ReplaySSM "
        "decode in shared and split precision, KL-vs-length and lm-eval studies, reports.",
        formatter_class=HelpFormatter, epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"precision_lab.commands.{name}_command").add_parser(sub)
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
