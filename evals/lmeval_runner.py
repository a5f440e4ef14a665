"""Run lm-eval tasks under several state policies and compare each with the FP32-state run.

    precision-lab lm-eval --model tiny-qwen3.5 --policies fp32 shared:nvfp4-sr split:fp16-sr/nvfp4 \\
        --tasks gpqa --synthetic --limit 4 --gen-kwargs max_gen_toks=32 --out runs/lmeval-demo

One model is loaded once; for each policy its SSM mixers are switched in place (``apply_policy``)
and each task is evaluated through lm-eval's ``simple_evaluate`` with the ``replayssm`` model, so
prompts, filters and metrics are lm-eval's. Per (policy, task) the per-sample outputs are saved in
``OUT/runs/<policy>/<task>.json`` (the response, filtered answer, score, generation length, and
the prompt hash); an existing file with the same settings is reused, so an interrupted study
resumes where it stopped. Every run's python/numpy/torch seeds are reset by lm-eval, so the items
(and GPQA's shuffled choices) are identical across policies; the pairing is checked item by item
(prompt hashes) before any statistic is computed.

The summary ``OUT/lmeval.json`` (kind "lmeval", class ``lmeval_schema.LMEvalResult``) is rewritten after every
policy, so a study cut short (a time limit) leaves a valid summary of the policies it finished
(``policies`` lists them). It holds, per task and policy: accuracy with its own CI, the delta
against FP32 with a paired bootstrap CI, the exact McNemar p-value, accuracy by quartile of the
FP32 generation length, and generation-length statistics (see ``stats.py``). When a policy's matched
reference (``StatePolicy.matched_reference``: its arithmetic with fp32 storage) was run too, the
same paired statistics against that reference are under ``vs_reference``. Tasks whose documents
carry a ``bucket`` field (e.g. context-length buckets, ``tasks/next_speaker.py``) also get every
comparison per bucket (``by_bucket``). Multiple-choice samples also keep every choice's
log-likelihood and the chosen index (``loglikelihoods``, ``pred``), and ``changed_responses`` counts
items whose chosen answer changed.

Data parallel: launch the same command under ``accelerate launch`` / ``torchrun`` with a hub id or
path as ``--model``; lm-eval shards the requests over ranks and gathers the samples on rank 0,
which writes the files.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from precision_lab.evals import lmeval_schema
from precision_lab.evals import stats as st
from precision_lab.evals import tasks as task_presets

from precision_lab.policy import StatePolicy

log = logging.getLogger(__name__)


@dataclass
class LMEvalConfig:
    """Settings of one lm-eval study (each field is a CLI flag of ``precision-lab lm-eval``)."""

    model: str                                   # preset, hub id or local path
    tasks: list[str]                             # preset names (gpqa, mmlu_pro, math_hard, ruler_niah) or lm-eval task names
    out: str                                     # output folder (resumable)
    policies: list[str] = field(default_factory=lambda: ["fp32"])  # fp32 is always run, first
    data_dir: str | None = None                  # local rows in the upstream formats (see evals/tasks)
    synthetic: bool = False                      # use the shipped SYNTHETIC rows (smoke tests only)
    include_path: list[str] = field(default_factory=list)  # extra lm-eval task folders
    seed: int = 0                                # SR seed
    engine: str = "auto"
    scoring: str = "stock"                       # loglikelihood scoring: stock | decode
    batch_size: str = "1"
    limit: float | None = None                   # items per task (lm-eval --limit)
    gen_kwargs: str | None = None                # e.g. "max_gen_toks=1024"
    num_fewshot: int | None = None
    apply_chat_template: bool = False
    model_args: str = ""                         # extra HFLM args, "k=v,k=v" (dtype=bfloat16,max_length=...)
    device: str | None = None
    n_boot: int = 10_000
    stats_seed: int = 0

    def __post_init__(self):
        pols = [StatePolicy.parse(p, seed=self.seed) for p in self.policies]
        names = [p.short_str() for p in pols]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate policies: {names}")
        self.policies = ["fp32"] + [n for n in names if n != "fp32"]
        if not self.tasks:
            raise ValueError("no tasks given")
        if self.scoring not in ("stock", "decode"):
            raise ValueError(f"scoring must be stock or decode, got {self.scoring!r}")
        if self.synthetic and self.data_dir:
            raise ValueError("give either --data-dir or --synthetic, not both")


def _arg_value(v: str):
    """A model-arg value as lm-eval's command line reads it: true/false, int, float, else the string
    (HFLM does arithmetic with max_length and friends)."""
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def _parse_kv(text: str) -> dict:
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise ValueError(f"model arg {part!r} is not key=value")
        out[k.strip()] = _arg_value(v.strip())
    return out


def _atomic_write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default))
    os.replace(tmp, path)


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _file_digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _served_calls(lm, since: dict | None = None) -> dict[str, dict[str, int]]:
    """SSM module -> {engine:implementation: calls} served so far (minus ``since``): the mixers count
    cumulatively over the model's life, so a run's own calls are the difference."""
    out = {}
    for layer in lm.model.precision_lab_report()["layers"]:
        prev = (since or {}).get(layer["module"], {})
        calls = {k: n - prev.get(k, 0) for k, n in layer["calls"].items() if n - prev.get(k, 0)}
        out[layer["module"]] = calls
    return out


def _choice_loglikelihoods(sample: dict) -> list[float] | None:
    """The log-likelihood of each continuation of a loglikelihood / multiple-choice sample (lm-eval
    logs ``resps`` as one ``[(loglikelihood, is_greedy)]`` per request), else None."""
    out = []
    for r in sample.get("resps") or []:
        first = r[0] if isinstance(r, (list, tuple)) and r else None
        if not isinstance(first, (list, tuple)) or not first or isinstance(first[0], (str, bool)):
            return None
        out.append(float(first[0]))
    return out or None


def _declared_tasks(paths) -> set[str]:
    """Task names declared (``task: NAME``) by the YAML files under ``paths``."""
    import re

    names: set[str] = set()
    for p in paths:
        for f in Path(p).rglob("*.yaml") if Path(p).is_dir() else []:
            m = re.search(r"(?m)^task:\s*['\"]?([A-Za-z0-9_.-]+)", f.read_text(encoding="utf-8", errors="replace"))
            if m:
                names.add(m.group(1))
    return names


class Study:
    """One study: task configs, the model, per-(policy, task) runs and the summary."""

    def __init__(self, cfg: LMEvalConfig):
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.task_dir = self.out / "tasks"
        self.presets: dict[str, task_presets.TaskPreset] = {}
        self.data_digest: dict[str, str] = {}
        self._lm = None

    # -- tasks ------------------------------------------------------------------------------------
    def prepare_tasks(self) -> dict[str, list[str]]:
        """Write local task YAMLs for preset names; returns study task -> lm-eval task names."""
        wanted = [t for t in self.cfg.tasks if t in task_presets.PRESETS]
        if wanted:
            if not (self.cfg.data_dir or self.cfg.synthetic):
                raise ValueError(f"task preset(s) {wanted} read local rows: pass --data-dir DIR (rows in the upstream "
                                 "format, see precision_lab.evals.tasks) or --synthetic for the shipped test rows")
            data = Path(self.cfg.data_dir) if self.cfg.data_dir else task_presets.SYNTHETIC_DIR
            self.presets = task_presets.write_task_configs(self.task_dir, data, wanted)
            for name, p in self.presets.items():
                self.data_digest[name] = _file_digest([data / f for t in p.tasks for f in set(t.data_files.values())])
        # tasks of the included folders (e.g. generated items): their files' digest, so a run file made
        # from other items is never reused
        others = [t for t in self.cfg.tasks if t not in self.presets]
        files = [f for d in self.cfg.include_path if Path(d).is_dir() for f in Path(d).rglob("*")
                 if f.is_file() and f.suffix in (".yaml", ".yml", ".jsonl", ".json", ".py")]
        if others and files:
            digest = _file_digest(files)
            for t in others:
                self.data_digest[t] = digest
        return {t: (self.presets[t].task_names if t in self.presets else [t]) for t in self.cfg.tasks}

    def task_manager(self):
        from lm_eval.tasks import TaskManager

        paths = [str(self.task_dir)] if self.presets else []
        paths += list(self.cfg.include_path)
        # Indexing lm-eval's ~13k built-in YAMLs takes tens of seconds; the presets include their
        # upstream YAML by absolute path, so the built-in index is needed only for other task names
        # that no included folder declares.
        declared = _declared_tasks(self.cfg.include_path)
        builtin = any(t not in task_presets.PRESETS and t not in declared for t in self.cfg.tasks)
        return TaskManager(include_path=paths or None, include_defaults=builtin or not paths)

    # -- model ------------------------------------------------------------------------------------
    def lm(self):
        if self._lm is None:
            from precision_lab.evals.lmeval_model import ReplaySSMLM

            kw = _parse_kv(self.cfg.model_args)
            bs = self.cfg.batch_size
            kw.update(pretrained=self.cfg.model, policy="fp32", seed=self.cfg.seed, engine=self.cfg.engine,
                      scoring=self.cfg.scoring, batch_size=int(bs) if str(bs).isdigit() else bs)
            if self.cfg.device:
                kw["device"] = self.cfg.device
            self._lm = ReplaySSMLM(**kw)
        return self._lm

    # -- runs -------------------------------------------------------------------------------------
    def run_path(self, policy: str, task: str) -> Path:
        return self.out / "runs" / StatePolicy.parse(policy).file_stem() / f"{task}.json"

    def fingerprint(self, policy: str, task: str) -> dict:
        c = self.cfg
        return {"model": c.model, "policy": policy, "seed": c.seed, "engine": c.engine, "scoring": c.scoring,
                "task": task, "limit": c.limit, "gen_kwargs": c.gen_kwargs, "num_fewshot": c.num_fewshot,
                "apply_chat_template": c.apply_chat_template, "model_args": c.model_args,
                "data": self.data_digest.get(task), "synthetic": c.synthetic}

    def run_one(self, policy: str, task: str, lm_tasks: list[str], tm) -> dict | None:
        """Evaluate one (policy, task) unless a matching run file exists. Returns the run record
        (rank 0) or None (other data-parallel ranks)."""
        path = self.run_path(policy, task)
        fp = self.fingerprint(policy, task)
        if path.exists():
            rec = json.loads(path.read_text())
            if rec.get("fingerprint") == fp:
                log.info("reusing %s", path)
                return rec
            log.warning("%s was made with other settings; rerunning", path)
        import time

        from lm_eval import simple_evaluate

        lm = self.lm()
        t0 = time.perf_counter()
        lm.set_policy(policy, seed=self.cfg.seed)
        lm.generation_lengths.clear()
        served_before = _served_calls(lm)
        res = simple_evaluate(model=lm, tasks=lm_tasks, task_manager=tm, limit=self.cfg.limit,
                              gen_kwargs=self.cfg.gen_kwargs, num_fewshot=self.cfg.num_fewshot,
                              apply_chat_template=self.cfg.apply_chat_template, log_samples=True,
                              bootstrap_iters=0)
        # Data parallel: each rank knows the generation lengths of its own shard; rank 0 gathers them.
        parts = lm.gather_object(dict(lm.generation_lengths), dst=0)
        if res is None:  # non-zero rank
            return None
        for part in parts or []:
            lm.generation_lengths.update(part or {})
        rec = {"fingerprint": fp, "policy": policy, "task": task,
               "lm_eval_results": res["results"], "n_shot": res.get("n-shot"),
               "samples": self._extract(task, res["samples"], lm),
               "served": _served_calls(lm, since=served_before),
               "seconds": time.perf_counter() - t0}
        _atomic_write_json(path, rec)
        return rec

    def _extract(self, task: str, samples: dict, lm) -> list[dict]:
        """Per-item records (one per doc of each subtask) under the preset's filter and metric."""
        preset = self.presets.get(task) or task_presets.preset_of_task(task)
        out = []
        for sub, rows in sorted(samples.items()):
            want = preset.filter if preset else (rows[0]["filter"] if rows else None)
            for s in rows:
                if s["filter"] != want:
                    continue
                resp = s["resps"][0][0] if s["resps"] and s["resps"][0] else None
                gen = isinstance(resp, str)
                doc = s.get("doc") if isinstance(s.get("doc"), dict) else {}
                lls = _choice_loglikelihoods(s) if not gen else None
                out.append({
                    "task": sub, "doc_id": s["doc_id"], "prompt_hash": s.get("prompt_hash"),
                    "score": task_presets.sample_score(preset, s),
                    "response": resp if gen else None,
                    "filtered": s["filtered_resps"][0] if s["filtered_resps"] else None,
                    "target": s.get("target"),
                    # tokens generated until the stream finished (EOS, stop sequence or max_gen_toks)
                    "gen_tokens": lm.generation_lengths.get(s["arguments"][0][0]) if gen else None,
                    # per-item buckets of tasks that define them (e.g. context length)
                    "bucket": doc.get("bucket"),
                    "item_id": doc.get("id"),
                    # loglikelihood tasks: every choice's log-likelihood and the chosen one (argmax)
                    "loglikelihoods": lls,
                    "pred": None if not lls else max(range(len(lls)), key=lls.__getitem__),
                })
        if not out:
            raise RuntimeError(f"task {task}: lm-eval logged no samples under filter "
                               f"{preset.filter if preset else '?'!r}")
        return out

    # -- the whole study -----------------------------------------------------------------------
    def run(self) -> dict | None:
        tasks = self.prepare_tasks()
        tm = self.task_manager()
        records: dict[str, dict[str, dict]] = {}
        summary = None
        for policy in self.cfg.policies:
            for task, lm_tasks in tasks.items():
                rec = self.run_one(policy, task, lm_tasks, tm)
                if rec is not None:
                    records.setdefault(task, {})[policy] = rec
            if records:
                # rewritten after every policy: a run cut short leaves the summary of the policies it finished
                summary = self.summarize(records)
                _atomic_write_json(self.out / "lmeval.json", summary)
        return summary

    def summarize(self, records: dict[str, dict[str, dict]]) -> dict:
        from precision_lab.provenance import provenance

        c = self.cfg
        out_tasks = {}
        for task, by_policy in records.items():
            base = by_policy["fp32"]["samples"]
            key = lambda r: (r["task"], r["doc_id"])
            base_idx = {key(r): r for r in base}
            items = sorted(base_idx)
            b_scores = [base_idx[k]["score"] for k in items]
            b_len = [base_idx[k]["gen_tokens"] for k in items]
            has_len = all(x is not None for x in b_len)
            entry = {"n": len(items), "lm_eval_tasks": sorted({k[0] for k in items}),
                     "fp32": {"accuracy": sum(b_scores) / len(b_scores),
                              "accuracy_ci": st.accuracy_interval(b_scores, n_boot=c.n_boot, seed=c.stats_seed),
                              "generation_length": st.length_stats(b_len) if has_len else None},
                     "policies": {}}
            preset = self.presets.get(task)
            if preset:
                entry["preset"] = {"name": preset.name, "metric": preset.metric, "filter": preset.filter,
                                   "describe": preset.describe}
            for policy, rec in by_policy.items():
                if policy == "fp32":
                    continue
                idx = {key(r): r for r in rec["samples"]}
                if sorted(idx) != items:
                    raise RuntimeError(f"{task}: policy {policy} answered other items than fp32 "
                                       f"({len(idx)} vs {len(items)}); rerun both with the same settings")
                bad = [k for k in items if idx[k]["prompt_hash"] != base_idx[k]["prompt_hash"]]
                if bad:
                    raise RuntimeError(f"{task}: prompts differ between fp32 and {policy} for {len(bad)} items "
                                       f"(e.g. {bad[0]}); the comparison would not be paired")
                v_len = [idx[k]["gen_tokens"] for k in items]
                entry["policies"][policy] = st.compare_runs(
                    b_scores, [idx[k]["score"] for k in items],
                    base_lengths=b_len if has_len else None, var_lengths=v_len if has_len else None,
                    n_boot=c.n_boot, seed=c.stats_seed)
                # a changed response: another generated text, or another chosen answer (multiple choice)
                entry["policies"][policy]["changed_responses"] = sum(
                    (idx[k]["response"], idx[k].get("pred")) != (base_idx[k]["response"], base_idx[k].get("pred"))
                    for k in items)
                buckets = [base_idx[k].get("bucket") for k in items]
                if all(b is not None for b in buckets):
                    entry["policies"][policy]["by_bucket"] = st.compare_by_bucket(
                        buckets, b_scores, [idx[k]["score"] for k in items], n_boot=c.n_boot, seed=c.stats_seed)
                ref = StatePolicy.parse(policy).matched_reference().short_str()
                if ref != policy and ref in by_policy and ref != "fp32":
                    r_idx = {key(r): r for r in by_policy[ref]["samples"]}
                    if sorted(r_idx) == items:
                        r_scores = [r_idx[k]["score"] for k in items]
                        vs = st.compare_runs(r_scores, [idx[k]["score"] for k in items], n_boot=c.n_boot,
                                             seed=c.stats_seed)
                        if all(b is not None for b in buckets):
                            vs["by_bucket"] = st.compare_by_bucket(buckets, r_scores, [idx[k]["score"] for k in items],
                                                                   n_boot=c.n_boot, seed=c.stats_seed)
                        entry["policies"][policy]["vs_reference"] = {"reference": ref, **vs}
            buckets = [base_idx[k].get("bucket") for k in items]
            if all(b is not None for b in buckets):
                counts: dict = {}
                for bk, sc in zip(buckets, b_scores):
                    counts.setdefault(bk, []).append(sc)
                entry["fp32"]["by_bucket"] = [
                    {"bucket": bk, "n": len(v), "accuracy": sum(v) / len(v),
                     "accuracy_ci": st.accuracy_interval(v, n_boot=c.n_boot, seed=c.stats_seed)}
                    for bk, v in sorted(counts.items(), key=lambda kv: st._bucket_order(kv[0]))]
            for policy, rec in by_policy.items():
                # which implementations served the SSM layers in this run (engine:implementation -> calls)
                served: dict[str, int] = {}
                for calls in (rec.get("served") or {}).values():
                    for name, n in calls.items():
                        served[name] = served.get(name, 0) + n
                (entry["fp32"] if policy == "fp32" else entry["policies"][policy])["served"] = served
            out_tasks[task] = entry
        done = [p for p in c.policies if all(p in by_policy for by_policy in records.values())]
        summary = {"kind": "lmeval", "schema_version": lmeval_schema.SCHEMA_VERSION,
                   "provenance": provenance(config=asdict(c), data_digest=self.data_digest,
                                            policies=c.policies, model=c.model, seed=c.seed),
                   "model": c.model, "policies": done, "tasks": out_tasks,
                   "runs": {t: {p: str(self.run_path(p, t).relative_to(self.out)) for p in ps}
                            for t, ps in records.items()}}
        # through the summary's class (evals/lmeval_schema.py): a layout the report would refuse fails here
        try:
            return lmeval_schema.to_json(lmeval_schema.load(summary))
        except lmeval_schema.SchemaError as e:
            raise RuntimeError(f"the lm-eval summary does not fit its schema ({e})") from e


def run_study(cfg: LMEvalConfig) -> dict | None:
    """Run (or resume) a study; returns the summary dict on rank 0."""
    return Study(cfg).run()


def format_summary(summary: dict) -> str:
    """A plain-text table: task, policy, accuracy, delta [CI] in points, McNemar p."""
    lines = [f"{'task':<14} {'policy':<26} {'n':>5} {'acc':>7} {'delta (pts) [95% CI]':>26} {'McNemar p':>10}"]
    for task, e in summary["tasks"].items():
        lines.append(f"{task:<14} {'fp32':<26} {e['n']:>5} {100 * e['fp32']['accuracy']:>7.2f}")
        for pol, r in e["policies"].items():
            d = r["delta"]
            ci = f"{100 * d['delta']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}]"
            lines.append(f"{'':<14} {pol:<26} {r['n']:>5} {100 * r['accuracy']:>7.2f} {ci:>26} "
                         f"{r['mcnemar']['p_value']:>10.3g}")
    return "\n".join(lines)
