"""precision-lab sim: the single-layer precision simulator (precision_lab.sim)."""
from __future__ import annotations

from . import HelpFormatter, add_out_option

EPILOG = """examples:
  precision-lab sim                                   # Mamba-2 layer, 4096 steps, the five default policies
  precision-lab sim --steps 32768 -o runs/sim/mamba2-32k
  precision-lab sim --arch gdn --policies fp32 shared:fp8e4m3-sr split:bf16-sr/nvfp4
  precision-lab sim --decay 0.99 0.99999 --input-scale 3 --seed 1
  precision-lab sim --mode equivalence                # float64 ReplaySSM = conventional, write counts
                                                      # (Mamba-2, GDN and KDA)

Outputs: a table on stdout, OUT.json (kind "sim") and OUT.png (log-log error vs step).
"""


def add_parser(subparsers) -> None:
    from precision_lab.sim import DEFAULT_POLICIES, SimConfig

    d = SimConfig()
    p = subparsers.add_parser(
        "sim", help="single synthetic SSM layer: output error of state policies vs float64",
        description="Run one synthetic SSM layer under several state policies (float32 compute, the scan "
        "engine = exact decode semantics) and compare each output with a float64 unquantized run.",
        formatter_class=HelpFormatter, epilog=EPILOG)
    p.add_argument("--mode", choices=("error", "equivalence"), default="error",
                   help="error: the error-vs-length study (default); equivalence: float64 ReplaySSM vs "
                   "conventional decode and speculative decoding, with write counts")
    p.add_argument("--arch", choices=("mamba2", "gdn", "kda"), default=None,
                   help="layer type (default mamba2; --mode equivalence runs all three unless given)")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), metavar="POLICY",
                   help="policy strings (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="decode steps (default %(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="sequences (default %(default)s)")
    p.add_argument("--heads", type=int, default=d.heads, help="heads (default %(default)s)")
    p.add_argument("--rows", type=int, default=d.rows, help="state rows per head: P or V (default %(default)s)")
    p.add_argument("--cols", type=int, default=d.cols, help="state columns per head: N or K (default %(default)s)")
    p.add_argument("--groups", type=int, default=d.groups, help="B/C groups or key heads (default %(default)s)")
    p.add_argument("--decay", type=float, nargs=2, default=list(d.decay), metavar=("MIN", "MAX"),
                   help="per-step decay range over the heads, memory 1/(1-a) log-spaced (default %(default)s)")
    p.add_argument("--jitter", type=float, default=d.jitter, help="per-token relative jitter of the log decay "
                   "(default %(default)s)")
    p.add_argument("--input-scale", type=float, default=d.input_scale, help="std of x / v (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the inputs (default %(default)s)")
    p.add_argument("--sr-seed", type=int, default=d.sr_seed, help="seed of the SR bit stream (default %(default)s)")
    p.add_argument("--engine", choices=("scan", "decode"), default="scan",
                   help="scan: window-parallel (default); decode: token by token (same semantics, slower)")
    p.add_argument("--avg", type=int, default=d.avg, help="steps averaged at each window end (default %(default)s)")
    add_out_option(p, metavar="PATH", help="output path without extension (default runs/sim/<arch>-<steps>, or "
                   "runs/sim/equivalence)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the per-step ops are small, and extra threads only "
                   "contend on a shared machine)")
    p.add_argument("--force", action="store_true", help="overwrite OUT.json / OUT.png if they exist "
                   "(without it, an existing result is kept and the run refused before any work)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from precision_lab import sim

    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _run(args, sim)
    finally:
        torch.set_num_threads(threads)


def _refuse_to_overwrite(paths, force: bool) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise ValueError(f"{' and '.join(existing)} already exist(s); pass --force to overwrite, or -o another path")


def _run(args, sim) -> int:
    import json
    from pathlib import Path

    if args.mode == "equivalence":
        out = Path(args.out or "runs/sim/equivalence")
        _refuse_to_overwrite([out.with_suffix(".json")], args.force)
        result = sim.equivalence_result([args.arch] if args.arch else sim.ARCHS, seed=args.seed)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
        print(f"wrote {out.with_suffix('.json')}")
        return 0

    cfg = sim.SimConfig(arch=args.arch or "mamba2", steps=args.steps, batch=args.batch, heads=args.heads, rows=args.rows,
                        cols=args.cols, groups=args.groups, decay=tuple(args.decay), jitter=args.jitter,
                        input_scale=args.input_scale, seed=args.seed, sr_seed=args.sr_seed,
                        policies=tuple(args.policies), avg=args.avg, engine=args.engine)
    out = Path(args.out or f"runs/sim/{cfg.arch}-{cfg.steps}")
    sim.parse_policies(cfg)  # a bad policy fails here, before the header and any work
    _refuse_to_overwrite([out.with_suffix(".json")] + ([] if args.no_plot else [out.with_suffix(".png")]), args.force)
    print(f"simulating a {cfg.arch} layer: {cfg.steps} steps, batch {cfg.batch}, {cfg.heads} heads of "
          f"{cfg.rows}x{cfg.cols}, {len(cfg.policies)} policies")
    result = sim.run_sim(cfg)
    print()
    print(sim.format_table(result))
    print(f"\ntotal {result['seconds']:.1f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    print(f"wrote {out.with_suffix('.json')}")
    if not args.no_plot:
        sim.plot(result, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")
    return 0
