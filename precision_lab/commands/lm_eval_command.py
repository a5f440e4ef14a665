"""``precision-lab lm-eval``: lm-eval tasks under several state policies, compared with FP32."""
from __future__ import annotations

from . import HelpFormatter, add_out_option

EPILOG = """examples:
  # smoke run on the shipped synthetic rows (offline, CPU, a minute)
  precision-lab lm-eval --model tiny-qwen3.5 --policies fp32 shared:nvfp4-sr split:fp16-sr/nvfp4 \\
      --tasks gpqa --synthetic --limit 4 --gen-kwargs max_gen_toks=32 --out runs/lmeval-smoke

  # GPQA-Diamond CoT zero-shot from local files in the upstream format (Table 2 of the paper)
  precision-lab lm-eval --model Qwen/Qwen3.5-4B --model-args dtype=bfloat16 \\
      --policies fp32 shared:nvfp4-sr split:fp16-sr/nvfp4 split:fp8e4m3-sr/nvfp4 \\
      --tasks gpqa --data-dir data/lmeval --batch-size 16 --gen-kwargs max_gen_toks=32768 --out runs/gpqa-qwen4b

  # 4 GPUs, data parallel (lm-eval shards requests; rank 0 writes the results)
  accelerate launch -m precision_lab.cli lm-eval --model Qwen/Qwen3.5-4B --tasks gpqa mmlu_pro math_hard \\
      --data-dir data/lmeval --policies fp32 split:fp16-sr/nvfp4 --out runs/qwen4b

task presets: gpqa (GPQA-Diamond CoT zero-shot), mmlu_pro, math_hard (MATH level 5, leaderboard),
ruler_niah (RULER needle tasks); any other lm-eval task name is passed through unchanged.
Interrupted runs resume: finished (policy, task) runs in OUT/runs are reused.
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "lm-eval", help="lm-eval tasks with the SSM state decoded under each policy, vs FP32, with paired CIs",
        description="Run lm-eval tasks for the FP32-state baseline and every policy (generation decodes token "
                    "by token through the policy's ReplaySSM path), keep per-sample outputs, and report accuracy "
                    "deltas with paired bootstrap CIs, exact McNemar p-values and accuracy by FP32 generation-"
                    "length quartile (results JSON kind 'lmeval').",
        epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--model", required=True, help="preset (tiny-qwen3.5, ...), hub id or local path")
    p.add_argument("--policies", nargs="+", default=["fp32"], metavar="POLICY",
                   help="state policies (fp32 is always run first as the baseline, whether listed or not)")
    p.add_argument("--tasks", nargs="+", required=True, metavar="TASK",
                   help="task presets (gpqa, mmlu_pro, math_hard, ruler_niah) or lm-eval task names")
    add_out_option(p, required=True, help="output folder (rerun the same command to resume)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data-dir", help="folder of local rows in the upstream dataset formats")
    src.add_argument("--synthetic", action="store_true", help="use the shipped SYNTHETIC rows (tests, smoke runs)")
    p.add_argument("--include-path", nargs="*", default=[], metavar="DIR", help="extra lm-eval task folders")
    p.add_argument("--seed", type=int, default=0, help="stochastic-rounding seed (default 0)")
    p.add_argument("--engine", default="auto", choices=("auto", "decode", "scan", "triton"),
                   help="engine of the policy mixers (auto: the decode engine for single-token steps; triton on "
                   "CUDA and the torch scan elsewhere for longer forwards)")
    p.add_argument("--scoring", default="stock", choices=("stock", "decode"),
                   help="loglikelihood requests: stock prefill scoring or through the decode path")
    p.add_argument("--batch-size", default="1", help="lm-eval batch size (an integer or 'auto')")
    p.add_argument("--limit", type=float, default=None, help="items per task (lm-eval --limit)")
    p.add_argument("--gen-kwargs", default=None, help="override generation kwargs, e.g. max_gen_toks=1024")
    p.add_argument("--num-fewshot", type=int, default=None, help="few-shot examples (default: the task's own)")
    p.add_argument("--apply-chat-template", action="store_true", help="format prompts with the model's chat template")
    p.add_argument("--model-args", default="", help="extra HFLM args, e.g. dtype=bfloat16,max_length=40000")
    p.add_argument("--device", default=None, help="torch device, e.g. cuda:0 (default: lm-eval's choice)")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    from precision_lab.evals.lmeval_runner import LMEvalConfig, format_summary, run_study

    limit = args.limit
    if limit is not None and float(limit).is_integer() and limit >= 1:
        limit = int(limit)
    cfg = LMEvalConfig(model=args.model, tasks=args.tasks, out=args.out, policies=args.policies,
                       data_dir=args.data_dir, synthetic=args.synthetic, include_path=args.include_path,
                       seed=args.seed, engine=args.engine, scoring=args.scoring, batch_size=args.batch_size,
                       limit=limit, gen_kwargs=args.gen_kwargs, num_fewshot=args.num_fewshot,
                       apply_chat_template=args.apply_chat_template, model_args=args.model_args,
                       device=args.device, n_boot=args.n_boot)
    summary = run_study(cfg)
    if summary is not None:
        print(format_summary(summary))
        print(f"\nwrote {cfg.out}/lmeval.json")
    return 0
