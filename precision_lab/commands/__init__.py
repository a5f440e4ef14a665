"""One module per CLI subcommand; each defines ``add_parser(subparsers)`` (see precision_lab/cli.py).

Shared by every subcommand: ``HelpFormatter`` (descriptions and examples as written, each option's
default shown) and ``add_out_option`` (the one spelling of the output option, ``-o/--out``).
"""
from __future__ import annotations

import argparse
import copy

# Accepted spellings that help does not list (older spellings kept working).
HIDDEN_ALIASES = ("--output",)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions and examples as written, appends "(default: X)" to an option's help when
    it has a default worth showing and the help does not already say it, and leaves hidden
    alias spellings out of the option list."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        unset = default is None or default is False or default == "" or default == [] or default == argparse.SUPPRESS
        if "default" in text.lower() or unset or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if any(s in HIDDEN_ALIASES for s in action.option_strings):
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in HIDDEN_ALIASES]
        return super()._format_action_invocation(action)


def add_out_option(parser: argparse.ArgumentParser, *, help: str, metavar: str = "DIR",
                   required: bool = False) -> None:
    """``-o/--out`` (``--output`` is accepted too) into ``args.out``."""
    parser.add_argument("-o", "--out", "--output", dest="out", default=None, required=required, metavar=metavar,
                        help=help)
