"""Where a decode step's warps wait, instruction by instruction (Nsight Compute, on a GPU).

At small batch a step is bound by latency, and which load it waits for is the compiler's choice as
much as the source's (docs/pitfalls.md §17). This script launches one step for Nsight Compute and
turns the profile into a timeline: the SASS instructions in program order with their warp-state
samples and the running total, so that the waits stand out and can be matched to their loads.

    # 1. profile a warm launch (the step runs six times; --launch-skip 3 takes the fourth)
    ncu --clock-control none --set full --import-source no --launch-skip 3 --launch-count 1 \\
        -k regex:gdn_replay_step -o nf python scripts/profile_step.py gdn nonflush --window 7
    # 2. export the per-instruction samples and the launch metrics
    ncu -i nf.ncu-rep --page source --print-source sass --csv > nf_sass.csv
    ncu -i nf.ncu-rep --page details --csv > nf_details.csv
    # 3. the timeline (any machine)
    python scripts/profile_step.py --summarise nf_sass.csv nf_details.csv -o nf.json

Kinds: ``conventional``, ``nonflush`` (the output-only step at window W), ``flush`` (the
autoregressive flush at window W); the benchmark's problem at its shapes
(``precision_lab.bench.problems``), fp32 state, the wrappers' launch rules (the one-launch form
where they choose it). ``reports/diagnostics/ncu-batch1-2bd1ea1.json`` was made this way.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys

# launch metrics kept from ncu's details page
METRICS = ("Duration", "Elapsed Cycles", "SM Frequency", "Registers Per Thread", "Achieved Occupancy",
           "Warp Cycles Per Issued Instruction", "Issue Slots Busy", "Grid Size", "Block Size", "No Eligible",
           "Active Warps Per Scheduler", "Memory Throughput")
SAMPLES = "Warp Stall Sampling (All Samples)"
# instructions always kept in the timeline, whatever their samples: where the waits come from and end
LANDMARKS = ("LDG", "BAR", "STG", "EXIT")


def launch(op: str, kind: str, batch: int, window: int, repeats: int = 6) -> None:
    """Run one step ``repeats`` times on the GPU (for ncu's ``--launch-skip``)."""
    import torch

    from precision_lab.bench.problems import PROBLEMS

    if kind not in ("conventional", "nonflush", "flush"):
        raise SystemExit(f"unknown kind {kind!r}: conventional, nonflush or flush")
    if not torch.cuda.is_available():
        raise SystemExit("profile_step launches on a GPU (the summary mode runs anywhere)")
    problem = PROBLEMS[op](batch, torch.device("cuda"), upd="fp32", read=None, ring=16, W=window, T=1)
    for _ in range(repeats):
        if kind == "conventional":
            problem.conventional()
        else:
            problem.replay(kind == "flush", kind == "flush")
    torch.cuda.synchronize()


def timeline(rows: list[dict], min_samples: int = 3) -> tuple[list[dict], int]:
    """The kept instructions of one kernel's SASS rows (ncu's source page, in program order) and the
    total samples: each with its offset from the first instruction, its samples and the running total."""
    base = int(rows[0]["Address"], 16)
    kept, total = [], 0
    for r in rows:
        n = int(float(r.get(SAMPLES) or 0))
        total += n
        sass = " ".join(r["Source"].split())
        if n >= min_samples or any(k in sass for k in LANDMARKS):
            kept.append({"offset": hex(int(r["Address"], 16) - base), "sass": sass, "samples": n, "running": total})
    return kept, total


def read_sass_csv(path: str) -> list[dict]:
    """ncu's ``--page source --csv`` export: a kernel-name line, then a header and one row per instruction."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    start = next((i for i, r in enumerate(lines) if "Address" in r and "Source" in r), None)
    if start is None or SAMPLES not in lines[start]:
        raise SystemExit(f"{path}: not an ncu source-page export with warp-state samples (--set full)")
    header = lines[start]
    return [dict(zip(header, r)) for r in lines[start + 1:] if len(r) == len(header)]


def read_metrics(path: str) -> dict:
    """The first value of each of ``METRICS`` in ncu's ``--page details --csv`` export, with its unit."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for r in rows:
        name = r.get("Metric Name")
        if name in METRICS and name not in out:
            out[name] = f"{r.get('Metric Value', '')} {r.get('Metric Unit', '')}".strip()
    return out


def summarise(sass_csv: str, details_csv: str | None = None, min_samples: int = 3) -> dict:
    rows = read_sass_csv(sass_csv)
    kept, total = timeline(rows, min_samples)
    return {"metrics": read_metrics(details_csv) if details_csv else {}, "samples": total,
            "sass_instructions": len(rows), "barriers": sum("BAR" in k["sass"] for k in kept), "timeline": kept}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("op", nargs="?", choices=("mamba2", "gdn"))
    ap.add_argument("kind", nargs="?", default="nonflush")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--window", type=int, default=7, help="W, the window's records before the step")
    ap.add_argument("--summarise", nargs="+", metavar="CSV", help="SASS_CSV [DETAILS_CSV]: print the timeline")
    ap.add_argument("--min-samples", type=int, default=3)
    ap.add_argument("-o", "--out", help="write the summary here (JSON) instead of printing it")
    args = ap.parse_args(argv)
    if args.summarise:
        summary = summarise(args.summarise[0], args.summarise[1] if len(args.summarise) > 1 else None,
                            args.min_samples)
        text = json.dumps(summary, indent=1)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        else:
            sys.stdout.write(text + "\n")
        return
    if args.op is None:
        ap.error("give an operator (mamba2, gdn) to launch, or --summarise CSV")
    launch(args.op, args.kind, args.batch, args.window)


if __name__ == "__main__":
    main()
