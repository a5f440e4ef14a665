"""``precision-lab study``: the state-precision study on given models — KL vs length against matched
references with floors (and the buffer-length sweep), per-layer sensitivity, and a multiple-choice
task over held-out plays through lm-eval — written as at most three result files per model plus
study.txt."""
from __future__ import annotations

import argparse  # noqa: F401

from . import HelpFormatter

EPILOG = """examples:
  precision-lab study --models MODEL_A MODEL_B --data HELD_OUT --speaker-data HELD_OUT_PLAYS --out OUT
  precision-lab study --quick --models tiny-qwen3.5 --speaker-data plays/ --out runs/study-smoke   # CPU smoke run
  # only the task, on both trained models, every held-out play, contexts decoded through each policy
  precision-lab study --models gutenberg-qwen3.5 gutenberg-nemotron-h --skip kl layers --task speaker-choice \
      --task-prompt decode --per-bucket 2 --out runs/task
  # CPU smoke run of the task stage (under a minute per model with OMP_NUM_THREADS=1)
  precision-lab study --quick --models gutenberg-qwen3.5 --data gutenberg --skip kl layers --out runs/task-smoke
  precision-lab report OUT/*.json -o reports/NAME
Rerun the same command after an interruption: every stage resumes from --work (default OUT-work).
"""


def add_parser(sub) -> None:
    from precision_lab.evals import study as st

    d = st.StudyConfig(models=("x",))
    p = sub.add_parser("study", help="KL vs length, per-layer sensitivity and a long-context task on given models",
                       description=__doc__.replace("``", ""), epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--models", nargs="+", required=True, help="presets, local paths or hub ids")
    p.add_argument("--data", default=d.data, help=f"held-out documents for the KL runs (default {d.data!r})")
    p.add_argument("--speaker-data", default=None, help="held-out plays for the lm-eval task (default: --data)")
    p.add_argument("--out", default=d.out, help="result folder: kl-*, kl-layers-*, lmeval-* JSON and study.txt")
    p.add_argument("--work", default=None, help="work folder (resumable runs; default OUT-work)")
    p.add_argument("--quick", action="store_true", help="shrink every size for a CPU smoke run (flags below still win)")
    g = p.add_argument_group("KL vs length")
    g.add_argument("--docs", type=int, help=f"held-out documents (default {d.docs})")
    g.add_argument("--tokens", type=int, help=f"positions per document (default {d.tokens})")
    g.add_argument("--prefill", type=int, help=f"prefill tokens (default {d.prefill})")
    g.add_argument("--segment", type=int, help=f"decode tokens per forward (default {d.segment})")
    g.add_argument("--batch-size", type=int, help="documents per batch (default: all)")
    g.add_argument("--sr-seeds", type=int, help=f"seeds per SR policy (default {d.sr_seeds})")
    g.add_argument("--policies", nargs="+", help=f"default: {' '.join(d.policies)} (+ {' '.join(d.gdn_policies)} on GDN)")
    g.add_argument("--l-sweep", nargs="+", help=f"default: {' '.join(d.l_sweep)}")
    g = p.add_argument_group("per-layer sensitivity")
    g.add_argument("--layer-docs", type=int, help=f"default {d.layer_docs}")
    g.add_argument("--layer-tokens", type=int, help=f"default {d.layer_tokens}")
    g.add_argument("--layer-policies", nargs="+", help=f"default: {' '.join(d.layer_policies)}")
    g.add_argument("--tf-buckets", type=int, nargs="+",
                   help=f"context-length edges of the teacher-forced next-speaker score (default {list(d.tf_buckets)})")
    g = p.add_argument_group("lm-eval task over held-out plays (stage lmeval)")
    g.add_argument("--task", choices=list(st.TASKS),
                   help=f"speaker-choice: next speaker among K names; word-choice: next word among K of the same "
                        f"length; next-speaker: generate the name (default {d.task})")
    g.add_argument("--plays", type=int, help="held-out plays used (default: all)")
    g.add_argument("--buckets", type=int, nargs="+", help=f"context-length edges in bytes (default {list(d.buckets)})")
    g.add_argument("--per-bucket", type=int, help=f"items per play and bucket (default {d.per_bucket})")
    g.add_argument("--max-context", type=int, help="longest context in bytes (default: the whole play)")
    g.add_argument("--choices", type=int, help=f"K, choices per item of the multiple-choice tasks (default {d.choices})")
    g.add_argument("--distractors", choices=["other-plays", "cast", "recent"],
                   help=f"speaker-choice distractors (default {d.distractors})")
    g.add_argument("--task-prompt", choices=["prefill", "decode"],
                   help=f"how the context enters the state: one prefill, or every byte a decode step of the policy "
                        f"(default {d.task_prompt})")
    g.add_argument("--max-gen-toks", type=int, help=f"next-speaker (default {d.max_gen_toks})")
    g.add_argument("--task-policies", nargs="+", help=f"default: {' '.join(d.task_policies)} (+ fp32 and references)")
    g.add_argument("--no-task-references", action="store_true",
                   help="do not run the task policies' matched references (fp32 and the task policies only)")
    g.add_argument("--lmeval-batch-size", help="default: K for the multiple-choice tasks, 1 for next-speaker")
    g.add_argument("--model-args", help="extra replayssm/HFLM model args, k=v,k=v (e.g. graphs=false)")
    g = p.add_argument_group("common")
    g.add_argument("--engine", choices=["auto", "scan", "triton", "decode"], help="default auto")
    g.add_argument("--device", help="auto | cpu | cuda")
    g.add_argument("--dtype", help="weight dtype (default: the model's)")
    g.add_argument("--seed", type=int, help="SR seed (default 0)")
    g.add_argument("--skip", nargs="+", choices=list(st.STAGES), default=[], help="stages to leave out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=_run)


_FIELDS = ("data", "out", "work", "docs", "tokens", "prefill", "segment", "batch_size", "sr_seeds", "layer_docs",
           "layer_tokens", "task", "plays", "per_bucket", "max_context", "choices", "distractors", "task_prompt",
           "max_gen_toks", "lmeval_batch_size", "model_args", "engine", "device", "dtype", "seed")
_TUPLES = ("policies", "l_sweep", "layer_policies", "buckets", "tf_buckets", "task_policies")


def _run(args) -> int:
    from precision_lab.evals.study import StudyConfig, run_study

    kw = {f: getattr(args, f) for f in _FIELDS if getattr(args, f) is not None}
    kw.update({f: tuple(getattr(args, f)) for f in _TUPLES if getattr(args, f) is not None})
    kw["speaker_data"] = args.speaker_data
    kw["skip"] = tuple(args.skip)
    if args.no_task_references:
        kw["task_references"] = False
    if args.no_progress:
        kw["progress"] = False
    cfg = StudyConfig.quick(args.models, **kw) if args.quick else StudyConfig(tuple(args.models), **kw)
    res = run_study(cfg)
    print(open(res["summary_text"], encoding="utf-8").read())
    print("wrote " + ", ".join(res["files"]) + f" and {res['summary_text']}")
    return 0
