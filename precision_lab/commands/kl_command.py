"""``precision-lab kl``: KL divergence between each state policy and its matched reference (the same
arithmetic with fp32 storage) vs generated length, under teacher forcing, with the arithmetic-order
floor of every reference (KL between the fp32 run and the reference)."""
from __future__ import annotations

from . import HelpFormatter, add_out_option

EPILOG = """examples:
  precision-lab kl                                   # the shipped trained gutenberg-qwen3.5 on 2 held-out plays, CPU
  precision-lab kl --model tiny-nemotron-h --policies shared:nvfp4 split:fp32/nvfp4 --out runs/kl-nemo
  precision-lab kl --model Qwen/Qwen3.5-4B --data pg19 --docs 8 --tokens 131072 --prefill 512 \\
      --policies shared:nvfp4 split:fp32/nvfp4 split:fp16-sr/nvfp4 --segment 8192 --out runs/kl-qwen4b
  torchrun --nproc-per-node 4 -m precision_lab.cli kl --model Qwen/Qwen3.5-4B --data pg19 --docs 16 ...
  (rerun the same command after an interruption: finished batches are kept, the rest is computed)

Outputs in the output folder: summary.json (kind "kl"), kl_vs_length.png, run.json and batches/.
"""


def add_parser(sub) -> None:
    from precision_lab.evals.kl import DEFAULT_BATCH_TOKENS, DEFAULT_POLICIES

    p = sub.add_parser("kl", help="KL(matched fp32 reference || policy) vs generated length under teacher forcing",
                       description="KL divergence between each state policy and its matched reference (the same "
                       "arithmetic with fp32 storage) vs generated length, under teacher forcing, with the "
                       "arithmetic-order floor of every reference (KL between the fp32 run and the reference).",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--model", default="gutenberg-qwen3.5",
                   help="preset (precision-lab models), hub id or local path; the default is the shipped trained "
                   "Qwen3.5-style model")
    p.add_argument("--data", default="gutenberg",
                   help="'gutenberg' (held-out Shakespeare plays, offline; gutenberg:train|validation|heldout), "
                   "'default' (built-in text), 'pg19' (emozilla/pg19-test via datasets), or a "
                   ".parquet/.jsonl/.txt file or directory")
    p.add_argument("--docs", type=int, default=2, help="number of documents")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per document, prefill included")
    p.add_argument("--prefill", type=int, default=32, help="tokens served as prefill before decoding (default 32)")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), metavar="POLICY",
                   help="state policies, each compared with its matched reference (e.g. shared:nvfp4 with "
                   "shared:fp32, conventional:bf16 with conventional:fp32)")
    p.add_argument("--seed", type=int, default=0, help="stochastic-rounding seed")
    p.add_argument("--batch-size", type=int, default=None,
                   help="documents per batch, the unit that is saved and resumed (default: as many as fit in "
                   f"{DEFAULT_BATCH_TOKENS} tokens, at least 1; 0: all in one batch)")
    p.add_argument("--segment", type=int, default=512, help="decode tokens per forward (memory knob)")
    p.add_argument("--engine", default="auto", choices=["auto", "scan", "triton", "decode"],
                   help="auto: triton on CUDA, torch scan elsewhere")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default=None, help="weight dtype: float32, bfloat16 (default: the preset's, bfloat16 "
                   "for checkpoints)")
    p.add_argument("--model-seed", type=int, default=0, help="weight seed of presets")
    p.add_argument("--skip-short", action="store_true", help="skip documents shorter than --tokens")
    p.add_argument("--layout", default="grouped", choices=["grouped", "lockstep"],
                   help="grouped: one forward per row group (identical computations give identical bits on "
                   "every backend); lockstep: all groups in one forward, with a check that rows agree")
    p.add_argument("--sr-seeds", type=int, default=1,
                   help="seeds per stochastic-rounding policy; >1 reports the spread of KL over seeds")
    p.add_argument("--per-layer", action="store_true",
                   help="run each policy in one SSM layer at a time (the others on its matched reference); "
                   "writes a kl-layers summary")
    add_out_option(p, help="output folder (default: runs/kl/<model>-<hash of the settings>, so a run with other "
                   "settings gets its own folder and the same command resumes in the same one)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--no-plot", action="store_true", help="skip kl_vs_length.png")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=_run)


def default_out(cfg) -> str:
    """runs/kl/<model>-<8 hex digits>: the digits hash every setting that changes the results (after
    normalisation, so equivalent spellings of a policy share a folder), not where or how it runs."""
    import hashlib
    import json
    import re
    from dataclasses import asdict
    from pathlib import Path

    settings = {k: v for k, v in asdict(cfg.normalized()).items() if k not in ("out", "progress", "plot")}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.model).strip("._") or "model"
    return str(Path("runs") / "kl" / f"{model}-{digest}")


def _run(args) -> int:
    from dataclasses import replace

    from precision_lab.evals.kl import KLConfig, format_table, run_kl

    cfg = KLConfig(model=args.model, data=args.data, docs=args.docs, tokens=args.tokens, prefill=args.prefill,
                   policies=tuple(args.policies), seed=args.seed, batch_size=args.batch_size, segment=args.segment,
                   engine=args.engine, dtype=args.dtype, model_seed=args.model_seed, skip_short=args.skip_short,
                   layout=args.layout, sr_seeds=args.sr_seeds, per_layer=args.per_layer,
                   out=args.out or "", device=args.device, progress=not args.no_progress, plot=not args.no_plot)
    if not args.out:
        cfg = replace(cfg, out=default_out(cfg))
        print(f"kl: output folder {cfg.out} (rerun the same command to resume; --out to choose another)")
    out = cfg.out
    try:
        summary = run_kl(cfg)
    except RuntimeError as e:
        if "out of memory" in str(e) and not args.debug:
            raise ValueError(str(e)) from e
        raise
    if summary is not None and summary["kind"] == "kl-layers":
        from precision_lab.evals.kl import format_layers_table

        print(format_layers_table(summary))
        print(f"wrote {out}/summary.json")
    elif summary is not None:
        print(format_table(summary))
        print(f"engine: {summary['engine']['used']} ({', '.join(summary['engine']['implementations'])})")
        print(f"wrote {out}/summary.json" + ("" if args.no_plot else f" and {out}/kl_vs_length.png"))
    return 0
