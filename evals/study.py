"""The state-precision study on trained models: KL vs length, per-layer sensitivity and a task by
context length, for each model, written as result files ``precision-lab report`` turns into the study's report.

    precision-lab study --models MODEL [MODEL ...] --data HELD_OUT --speaker-data HELD_OUT_PLAYS \\
        --out OUT            # at most 3 result files per model plus study.txt, nothing else
    precision-lab report OUT/*.json -o reports/NAME

Per model:

1. ``kl-<model>.json`` (kind "kl"): KL vs length on every held-out document for the study policies
   (``STUDY_POLICIES``; the GDN-only fold variant on models with Gated DeltaNet layers) and the
   buffer-length sweep (``L_SWEEP``), each against its matched reference, with the arithmetic-order
   floor of every reference, bootstrap CIs over documents, top-1 agreement and held-out NLL
   (``evals/kl.py``); and, from the same stream, next-speaker exact match on every speaker tag of
   the documents with the whole play decoded under each policy (``speaker``).
2. ``kl-layers-<model>.json`` (kind "kl-layers"): each of ``LAYER_POLICIES`` in one SSM layer at a
   time, the other layers on its matched reference.
3. ``lmeval-<model>.json`` (kind "lmeval"): an lm-eval task over the held-out plays (``--task``,
   ``TASKS``; by default the multiple-choice next speaker of ``tasks/play_choice.py``) through the
   ``replayssm`` lm-eval model for fp32, the task policies and (``task_references``) their matched
   references, run in that order; accuracy with its CI by context-length bucket, and each policy
   against fp32 and against its matched reference on the same items, with paired bootstrap CIs and
   exact McNemar p per bucket. The multiple-choice tasks score through the decode path
   (``scoring=decode``), one context per batch branched per choice; with ``--task-prompt decode``
   (the default) every context byte is a decode step of the policy, with ``prefill`` the context is
   one prefill. Every item runs its own stream, so this stage is a sample (plays x buckets x
   ``--per-bucket``); the teacher-forced next-speaker score in (1) covers every tag.

Work files (per-position batches, per-run lm-eval samples, the generated task) go to ``--work``
(default ``OUT-work``), so OUT holds only what the report needs; every stage is resumable there.
``--quick`` shrinks every size for a CPU smoke run of the whole pipeline.

Sizes (defaults, meant for one H200 and two ~10M-parameter byte-level models with the Triton
engine): 8 documents x 100K positions x 21 row groups for the KL run; 4 x 16K positions for the
per-layer run; every held-out play x 5 buckets (256 to 65,536+ bytes of context) x 2 items, 11
policy runs (fp32, 7 policies, 3 references), for the task. Each is a flag.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from precision_lab.policy import StatePolicy

STUDY_POLICIES = ("conventional:bf16", "conventional:fp8e4m3-sr", "shared:nvfp4-sr", "shared:fp8e4m3-sr",
                  "split:fp32/nvfp4", "split:fp16-sr/nvfp4", "split:fp8e4m3-sr/nvfp4")
GDN_ONLY_POLICIES = ("split:fp16-sr/nvfp4@fold=buffered",)
L_SWEEP = ("shared:nvfp4-sr@L8", "shared:nvfp4-sr@L32", "split:fp16-sr/nvfp4@L8", "split:fp16-sr/nvfp4@L32")
LAYER_POLICIES = ("shared:nvfp4-sr", "split:fp16-sr/nvfp4")
TASK_POLICIES = STUDY_POLICIES
STAGES = ("kl", "layers", "lmeval")
# the lm-eval stage's task: --task name -> (module in precision_lab.evals.tasks, lm-eval task name)
TASKS = {"speaker-choice": ("play_choice", "shakespeare_speaker_choice"),
         "word-choice": ("play_choice", "shakespeare_word_choice"),
         "next-speaker": ("next_speaker", "shakespeare_next_speaker")}


@dataclass
class StudyConfig:
    """Settings of a study (each a flag of ``precision-lab study``)."""

    models: tuple[str, ...]
    data: str = "gutenberg"                 # held-out documents for the KL runs
    speaker_data: str | None = None         # held-out plays for the task (default: data)
    out: str = "runs/study"
    work: str | None = None                 # default: OUT-work
    # KL vs length
    docs: int = 8
    tokens: int = 100_000
    prefill: int = 0
    segment: int = 4096
    batch_size: int = 0
    sr_seeds: int = 1
    policies: tuple[str, ...] = STUDY_POLICIES
    gdn_policies: tuple[str, ...] = GDN_ONLY_POLICIES
    l_sweep: tuple[str, ...] = L_SWEEP
    # per-layer sensitivity
    layer_docs: int = 4
    layer_tokens: int = 16_384
    layer_policies: tuple[str, ...] = LAYER_POLICIES
    # next speaker scored from the KL stream (every speaker tag of the documents)
    tf_buckets: tuple[int, ...] = (256, 1024, 4096, 16384, 65536)
    # the lm-eval task (a sample of positions of the held-out plays, through replayssm)
    task: str = "speaker-choice"            # speaker-choice | word-choice | next-speaker (TASKS)
    plays: int | None = None                # held-out plays used (None: all)
    buckets: tuple[int, ...] = (256, 1024, 4096, 16384, 65536)
    per_bucket: int = 2
    max_context: int | None = None
    choices: int = 4                        # K of the multiple-choice tasks
    distractors: str = "other-plays"        # speaker-choice: other-plays | cast | recent
    task_prompt: str = "decode"             # multiple-choice tasks: replayssm prompt=prefill|decode
    max_gen_toks: int = 12                  # next-speaker
    task_policies: tuple[str, ...] = TASK_POLICIES
    task_references: bool = True            # also run each task policy's matched reference
    lmeval_batch_size: str | None = None    # default: K for multiple choice (one context, its K choices
                                            # per batch), 1 for next-speaker (no padding)
    model_args: str = ""                    # extra replayssm/HFLM args, "k=v,k=v"
    n_boot: int = 10_000
    # common
    engine: str = "auto"
    device: str = "auto"
    dtype: str | None = None
    seed: int = 0
    skip: tuple[str, ...] = ()
    progress: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.models:
            raise ValueError("no models given (e.g. --models tiny-qwen3.5)")
        bad = [s for s in self.skip if s not in STAGES]
        if bad:
            raise ValueError(f"unknown stage(s) to skip {bad}; stages are {', '.join(STAGES)}")
        for p in (*self.policies, *self.gdn_policies, *self.l_sweep, *self.layer_policies, *self.task_policies):
            StatePolicy.parse(p)
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; tasks are {', '.join(TASKS)}")
        if self.task_prompt not in ("prefill", "decode"):
            raise ValueError(f"task prompt must be prefill or decode, got {self.task_prompt!r}")

    @classmethod
    def quick(cls, models, **kw) -> StudyConfig:
        """Every size shrunk for a CPU smoke run (minutes on two cores, tiny presets)."""
        sizes = dict(docs=2, tokens=64, segment=32, layer_docs=2, layer_tokens=40, plays=2, buckets=(64, 512),
                     tf_buckets=(64, 256), per_bucket=1, max_context=1024, max_gen_toks=3,
                     l_sweep=("shared:nvfp4-sr@L8",),
                     policies=("conventional:bf16", "shared:nvfp4-sr", "split:fp16-sr/nvfp4"),
                     layer_policies=("shared:nvfp4-sr",), task_policies=("shared:nvfp4-sr",),
                     n_boot=200, engine="auto", device="cpu", progress=False)
        sizes.update(kw)
        return cls(tuple(models), **sizes)


def model_stem(model: str) -> str:
    """A file-name-safe short name of a model (preset name, or a path's / hub id's last part)."""
    base = model.rstrip("/").rsplit("/", 1)[-1] or model
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-") or "model"


def kl_policies(cfg: StudyConfig, kinds: set[str]) -> list[str]:
    """The KL run's policies for a model whose SSM layers are of ``kinds`` (GDN-only ones on GDN)."""
    pols = list(cfg.policies) + (list(cfg.gdn_policies) if kinds & {"gdn", "kda"} else []) + list(cfg.l_sweep)
    return list(dict.fromkeys(StatePolicy.parse(p).short_str() for p in pols))


def task_policies(cfg: StudyConfig) -> list[str]:
    """fp32, then the task policies, then (``task_references``) their matched references, each once:
    a run cut short by a time limit has the policies before the references."""
    pols = [StatePolicy.parse(p) for p in cfg.task_policies]
    refs = [p.matched_reference().short_str() for p in pols] if cfg.task_references else []
    return list(dict.fromkeys(["fp32"] + [p.short_str() for p in pols] + refs))


def _copy_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(dst.suffix + f".tmp{os.getpid()}")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def run_study(cfg: StudyConfig, log=print) -> dict:
    """Run (or resume) every stage for every model; returns {"files": [...], "timing": {...}}."""
    import torch
    from precision_lab.evals.kl import KLConfig, format_layers_table, format_table, run_kl

    from precision_lab.models import apply_policy, load_model, policy_mixers

    out = Path(cfg.out)
    work = Path(cfg.work or f"{str(out).rstrip('/')}-work")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device)
    files, timing, text = [], {}, []
    task_dir = None
    if "lmeval" not in cfg.skip:
        task_dir = _write_task(cfg, work / f"{cfg.task}-task", log)
    for model_name in cfg.models:
        stem = model_stem(model_name)
        t0 = time.perf_counter()
        model, tok = load_model(model_name, dtype=cfg.dtype, device=device, seed=0)
        apply_policy(model, "fp32", engine="auto")
        kinds = {getattr(m, "kind", None) for m in policy_mixers(model)}
        timing[f"{stem}/load"] = time.perf_counter() - t0
        base = dict(model=model_name, data=cfg.data, prefill=cfg.prefill, segment=cfg.segment, seed=cfg.seed,
                    batch_size=cfg.batch_size, engine=cfg.engine, dtype=cfg.dtype, skip_short=True,
                    device=str(device), progress=cfg.progress, plot=False)
        if "kl" not in cfg.skip:
            t0 = time.perf_counter()
            kc = KLConfig(**base, docs=cfg.docs, tokens=cfg.tokens, policies=tuple(kl_policies(cfg, kinds)),
                          sr_seeds=cfg.sr_seeds, speaker=True, speaker_buckets=tuple(cfg.tf_buckets),
                          out=str(work / stem / "kl"))
            s = run_kl(kc, model_and_tokenizer=(model, tok), log=log)
            dst = out / f"kl-{stem}.json"
            _copy_atomic(work / stem / "kl" / "summary.json", dst)
            files.append(str(dst))
            timing[f"{stem}/kl"] = time.perf_counter() - t0
            text += [format_table(s), ""]
            log(f"study: {model_name}: KL vs length done in {timing[f'{stem}/kl']:.0f} s -> {dst}")
        if "layers" not in cfg.skip:
            t0 = time.perf_counter()
            lc = KLConfig(**{**base, "segment": min(cfg.segment, cfg.layer_tokens)}, docs=cfg.layer_docs,
                          tokens=cfg.layer_tokens, policies=tuple(cfg.layer_policies), per_layer=True,
                          out=str(work / stem / "kl-layers"))
            s = run_kl(lc, model_and_tokenizer=(model, tok), log=log)
            dst = out / f"kl-layers-{stem}.json"
            _copy_atomic(work / stem / "kl-layers" / "summary.json", dst)
            files.append(str(dst))
            timing[f"{stem}/layers"] = time.perf_counter() - t0
            text += [format_layers_table(s), ""]
            log(f"study: {model_name}: per-layer sensitivity done in {timing[f'{stem}/layers']:.0f} s -> {dst}")
        del model
        if task_dir is not None:
            t0 = time.perf_counter()
            s = _run_task(cfg, model_name, task_dir, work / stem / "lmeval", str(device))
            dst = out / f"lmeval-{stem}.json"
            _copy_atomic(work / stem / "lmeval" / "lmeval.json", dst)
            files.append(str(dst))
            timing[f"{stem}/lmeval"] = time.perf_counter() - t0
            text += [format_task_table(s), ""]
            log(f"study: {model_name}: {cfg.task} task done in {timing[f'{stem}/lmeval']:.0f} s -> {dst}")
    total = sum(timing.values())
    text += ["timing (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timing.items()) + f"; total {total:.1f}",
             "settings: " + json.dumps({k: v for k, v in asdict(cfg).items() if k != "extra"}, default=str),
             f"report: precision-lab report {' '.join(files)} -o reports/NAME"]
    (out / "study.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    return {"files": files, "timing": timing, "summary_text": str(out / "study.txt")}


def _write_task(cfg: StudyConfig, folder: Path, log) -> Path:
    """Draw the task's items from the held-out plays and write its YAML and jsonl into ``folder``."""
    import importlib

    from precision_lab.evals.tasks.next_speaker import plays_from_source

    module, task_name = TASKS[cfg.task]
    mod = importlib.import_module(f"precision_lab.evals.tasks.{module}")
    plays = plays_from_source(cfg.speaker_data or cfg.data, limit=cfg.plays)
    common = dict(buckets=cfg.buckets, per_bucket=cfg.per_bucket, seed=cfg.seed, max_context=cfg.max_context)
    if cfg.task == "next-speaker":
        items = mod.make_items(plays, **common)
        mod.write_task(folder, items, max_gen_toks=cfg.max_gen_toks)
        tail = cfg.max_gen_toks
    else:
        kind = cfg.task.removesuffix("-choice")
        items = mod.make_items(plays, kind=kind, k=cfg.choices, distractors=cfg.distractors, **common)
        mod.write_task(folder, items, task=task_name)
        tail = max(len(c.encode("utf-8")) for it in items for c in it["choices"])
    counts = {}
    for it in items:
        counts[it["bucket"]] = counts.get(it["bucket"], 0) + 1
    log(f"study: {cfg.task} task: {len(items)} items from {len(plays)} plays "
        f"({', '.join(f'{b}: {n}' for b, n in counts.items())}) -> {folder}")
    # the longest prompt plus what is generated or scored after it, for lm-eval's max_length
    (folder / "max_context_tokens.txt").write_text(str(max(it["context_bytes"] for it in items) + tail))
    return folder


def _run_task(cfg: StudyConfig, model: str, task_dir: Path, out: Path, device: str) -> dict:
    try:
        import lm_eval  # noqa: F401
    except ImportError as e:
        raise ValueError(f"the lm-eval stage ({cfg.task}) needs lm-eval (pip install 'lm-eval>=0.4'); or pass "
                         "--skip lmeval") from e
    from precision_lab.evals.lmeval_runner import LMEvalConfig
    from precision_lab.evals.lmeval_runner import run_study as run_lmeval

    task_name = TASKS[cfg.task][1]
    mc = cfg.task != "next-speaker"
    # lm-eval cuts prompts to the model's max_length (often its training length): allow the longest
    # context (bytes = tokens for byte-level models) unless the caller set it
    longest = int((task_dir / "max_context_tokens.txt").read_text()) + 8
    extra = [] if "max_length=" in cfg.model_args else [f"max_length={longest}"]
    if "prompt=" not in cfg.model_args:
        extra.append(f"prompt={cfg.task_prompt}")
    if mc and "fast_decode=" not in cfg.model_args:
        # one prefill per context, branched per choice, on CPU too (there the steps run eagerly)
        extra.append("fast_decode=true")
    args = ",".join(a for a in (cfg.model_args, f"dtype={cfg.dtype}" if cfg.dtype else "", *extra) if a)
    batch = cfg.lmeval_batch_size or (str(cfg.choices) if mc else "1")
    lc = LMEvalConfig(model=model, tasks=[task_name], out=str(out), policies=task_policies(cfg),
                      include_path=[str(task_dir)], seed=cfg.seed, engine=cfg.engine, batch_size=batch,
                      scoring="decode" if mc else "stock", model_args=args, device=device, n_boot=cfg.n_boot)
    s = run_lmeval(lc)
    if s is None:
        raise RuntimeError("lm-eval returned no summary on this rank")
    return s


def format_task_table(summary: dict) -> str:
    """Accuracy per context-length bucket for each policy, with the paired difference against fp32
    and against the matched reference (95 % CI in points, McNemar p)."""
    lines = []
    for task, e in summary["tasks"].items():
        fb = {b["bucket"]: b for b in (e["fp32"].get("by_bucket") or [])}
        lines.append(f"{task}: accuracy (%) by context length (bytes); fp32 overall {100 * e['fp32']['accuracy']:.1f} "
                     f"over {e['n']} items")
        for b in e["fp32"].get("by_bucket") or []:
            ci = b.get("accuracy_ci")
            lines.append(f"  fp32 {b['bucket']:<14} n={b['n']:<4} {100 * b['accuracy']:5.1f}"
                         + (f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci else ""))
        lines.append(f"{'policy':<30} {'bucket':<14} {'n':>4} {'acc':>6} {'fp32':>6} {'d vs fp32 [95% CI]':>24} "
                     f"{'p':>6} {'d vs reference [95% CI]':>26} {'p':>6}")
        for p, pe in e["policies"].items():
            ref = {b["bucket"]: b for b in ((pe.get("vs_reference") or {}).get("by_bucket") or [])}
            for b in pe.get("by_bucket") or []:
                d = b["delta"]
                r = ref.get(b["bucket"])
                rd = (f"{100 * r['delta']['delta']:+.1f} [{100 * r['delta']['ci_low']:+.1f}, "
                      f"{100 * r['delta']['ci_high']:+.1f}]") if r else "-"
                rp = f"{r['mcnemar']['p_value']:.3g}" if r else "-"
                dd = f"{100 * d['delta']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"
                base = 100 * fb.get(b["bucket"], {}).get("accuracy", float("nan"))
                lines.append(f"{p:<30} {b['bucket']:<14} {b['n']:>4} {100 * b['accuracy']:>6.1f} {base:>6.1f} "
                             f"{dd:>24} {b['mcnemar']['p_value']:>6.3g} {rd:>26} {rp:>6}")
    return "\n".join(lines)


__all__ = ["GDN_ONLY_POLICIES", "LAYER_POLICIES", "L_SWEEP", "STUDY_POLICIES", "TASKS", "TASK_POLICIES", "StudyConfig",
           "format_task_table", "kl_policies", "model_stem", "run_study", "task_policies"]
