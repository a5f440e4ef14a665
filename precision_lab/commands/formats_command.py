"""``precision-lab formats``: every registered quantization format with its storage cost, block
size, scale format, rounding and special-value policy (built-ins and entry-point plugins)."""
from __future__ import annotations

import argparse
import json
import math
from typing import Any

from . import HelpFormatter

EPILOG = """examples:
  precision-lab formats                 # table of every registered format
  precision-lab formats --json          # the same as JSON (one object per format)
  precision-lab formats --filter nvfp4  # only names containing 'nvfp4'
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "formats", help="list the registered quantization formats",
        description="List every registered quantization format (built-ins and plugins of the entry-point "
        "group 'precision_lab.quantizers') with bits per element, block size, scale format and rounding.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--filter", default=None, metavar="TEXT", help="only formats whose name contains TEXT")
    p.set_defaults(func=run)


def format_rows(name_filter: str | None = None) -> list[dict[str, Any]]:
    """One dict per registered format: name, bits_per_element, block_size, scale_format, rounding,
    special (NaN/Inf policy). A plugin that cannot be built without options is listed with its error."""
    from precision_lab.quant import get_quantizer, known_quantizers

    rows = []
    for name in known_quantizers():
        if name_filter and name_filter not in name:
            continue
        try:
            q = get_quantizer(name)
            d = q.describe() if hasattr(q, "describe") else {}
        except Exception as e:  # a plugin's problem must not hide the other formats
            d = {"error": f"{type(e).__name__}: {e}"}
        rows.append({"name": name, "bits_per_element": d.get("bits_per_element"), "block_size": d.get("block_size"),
                     "scale_format": d.get("scale_format"), "rounding": d.get("rounding"),
                     "special": d.get("special", d.get("error"))})
    return rows


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def run(args: argparse.Namespace) -> int:
    rows = format_rows(args.filter)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    cols = [("name", "format"), ("bits_per_element", "bits/elem"), ("block_size", "block"),
            ("scale_format", "scales"), ("rounding", "rounding"), ("special", "NaN/Inf policy")]
    table = [[h for _, h in cols]] + [[_cell(r[k]) for k, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for i, row in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0
