"""A/B of the NVFP4 output-only step's element decodes (``fp4_decode``) at batch 256, in one process.

    python scripts/ab_nvfp4_decodes.py -o reports/diagnostics/nvfp4-decodes-ab-<commit>-<card>.jsonl

First rows (``check``): each decode other than "fp16" against "fp16" on the benchmark's decode-check
problem (batch 2, W = 5, fp32 checkpoint, NVFP4 read copy), the relative error of the bf16 outputs
in each launch form (NaN where an output is). Then ``--rounds`` rounds, each the fp32
conventional step and the output-only step at batch 256, W = 7, once per decode, through
``measure`` (the benchmark's timing: CUDA-graph replays over cold buffer sets, the wrappers' launch
shape). The decodes run in the order of ``FP4_DECODES``, reversed every other round. Rows are
appended as they are measured; the script prints each decode's range over the rounds.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_OPS = ("gdn", "mamba2")


def check_rows(decodes, dev, ops=DEFAULT_OPS) -> list[dict]:
    """Each decode against "fp16" on the benchmark's decode-check problem per operator, in both launch
    forms (``nvfp4_decode_errors``)."""
    from precision_lab.bench.decode_kernels import nvfp4_decode_errors, nvfp4_decode_problem

    rows = []
    for op in ops:
        prob, ref = nvfp4_decode_problem(op, dev)
        for decode in decodes:
            if decode != "fp16":
                rows.append({"kind": "check", "op": op, "fp4_decode": decode,
                             "rel_err_vs_fp16": nvfp4_decode_errors(prob, ref, decode)})
    return rows


def shape_name(shape: dict) -> str:
    """A launch shape's label: "" for the wrappers' own, else "@key=value,..." ."""
    return "@" + ",".join(f"{k}={v}" for k, v in shape.items()) if shape else ""


def parse_shape(text: str) -> dict:
    """"block_r=128,num_warps=2" → {"block_r": 128, "num_warps": 2}; "" → {} (the wrappers' shape)."""
    shape = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("block_r", "num_warps") or not value.isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: expected block_r=N or num_warps=N")
        shape[key] = int(value)
    return shape


def timed_rounds(measure, decodes, dev, rounds: int, emit, ops=DEFAULT_OPS, batch: int = 256,
                 shapes=({},)) -> dict:
    """``rounds`` rounds of the conventional step and each decode's output-only step per operator, at
    each launch shape of ``shapes`` ({}: the wrappers' own); every row passed to ``emit``. Returns
    {(op, form): [µs per round]}, form the decode and its shape's label (``shape_name``)."""
    times: dict = {}
    forms = [(decode, shape) for shape in shapes for decode in decodes]
    for rep in range(rounds):
        order = forms if rep % 2 == 0 else list(reversed(forms))
        for op in ops:
            row = measure(op, "conventional", batch, dev)
            emit({"kind": "time", "rep": rep, "form": "conventional", **row})
            times.setdefault((op, "conventional"), []).append(row["us"])
            for decode, shape in order:
                form = decode + shape_name(shape)
                row = measure(op, "nonflush", batch, dev, upd="fp32", read="nvfp4", W=7,
                              cfg={"fp4_decode": decode, **shape})
                emit({"kind": "time", "rep": rep, "form": form, **row})
                times.setdefault((op, form), []).append(row["us"])
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="JSON-lines file the rows are appended to")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default: %(default)s)")
    ap.add_argument("--ops", nargs="+", default=list(DEFAULT_OPS), choices=list(DEFAULT_OPS))
    ap.add_argument("--shapes", nargs="+", type=parse_shape, default=[{}], metavar="SHAPE",
                    help='launch shapes to time each decode at, e.g. "" (the wrappers\' own) '
                         '"num_warps=2" "block_r=128,num_warps=2" (default: the wrappers\' own)')
    args = ap.parse_args(argv)
    import torch
    import triton
    from precision_lab.kernels.common.launch import FP4_DECODES

    from precision_lab.bench.decode_kernels import measure
    from precision_lab.provenance import git_hash

    if not torch.cuda.is_available():
        print("a CUDA device is needed (the decodes are timed on it)", file=sys.stderr)
        return 2
    dev = "cuda"
    out = open(args.output, "a")  # noqa: SIM115 - one line per row, survives a kill

    def emit(row: dict) -> None:
        out.write(json.dumps(row) + "\n")
        out.flush()

    emit({"kind": "head", "commit": git_hash(), "device": torch.cuda.get_device_name(),
          "torch": torch.__version__, "triton": triton.__version__, "decodes": list(FP4_DECODES)})
    for row in check_rows(FP4_DECODES, dev, args.ops):
        emit(row)
        print(row, flush=True)
    times = timed_rounds(measure, FP4_DECODES, dev, args.rounds, emit, args.ops, shapes=args.shapes)
    for (op, form), us in times.items():
        print(f"{op:>6} {form:>30}: {min(us):.2f}-{max(us):.2f} µs over {len(us)} rounds")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # running from a checkout
    from precision_lab.bench import use_checkout

    use_checkout(Path(__file__).resolve().parents[1])
    sys.exit(main())
