"""Offline task presets for the lm-eval studies (docs/design.md §9): GPQA-Diamond (CoT zero-shot),
MMLU-Pro, MATH level 5 (the Open LLM Leaderboard "hard" set) and RULER needle-in-a-haystack.

Each local task is a two-key override of the task YAML that lm-eval ships:

    include: <site-packages>/lm_eval/tasks/gpqa/cot_zeroshot/gpqa_diamond_cot_zeroshot.yaml
    task: gpqa_diamond_cot_zeroshot_local
    dataset_path: json
    dataset_kwargs: {data_files: {train: <data_dir>/gpqa/gpqa_diamond.jsonl}}

so the prompt template, few-shot setup, generation kwargs, filters and metrics are the upstream
ones by construction; only where the rows come from changes. ``include:`` needs the absolute path of
the installed lm-eval, so the YAMLs are written at run time (``write_task_configs``) into a folder
that is then passed to lm-eval as ``--include_path``.

Local data files hold rows in the upstream dataset's own format (``<data_dir>`` layout):

    gpqa/gpqa_diamond.jsonl            Idavidrein/gpqa (gpqa_diamond): Question, Correct Answer,
                                       Incorrect Answer 1..3 (other columns ignored)
    mmlu_pro/test.jsonl, validation.jsonl   TIGER-Lab/MMLU-Pro: question_id, question, options,
                                       answer, answer_index, cot_content, category, src
    math_hard/<subject>.jsonl          DigitalLearningGmbH/MATH-lighteval (<subject> = algebra,
                                       counting_and_probability, ...): problem, level, type, solution
    ruler/<task>.jsonl                 rows as RULER's generator writes them: index, input, outputs,
                                       length, max_length, gen_prefix (see ``prepare_ruler``)

``evals/tasks/synthetic/`` ships a handful of SYNTHETIC rows in each format (made-up questions, no
benchmark content) for tests and smoke runs; real studies point ``data_dir`` at exported copies of
the real datasets.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SYNTHETIC_DIR = Path(__file__).resolve().parent / "synthetic"

MMLU_PRO_SUBJECTS = ("biology", "business", "chemistry", "computer_science", "economics", "engineering",
                     "health", "history", "law", "math", "other", "philosophy", "physics", "psychology")
# leaderboard task suffix -> MATH-lighteval config name
MATH_SUBJECTS = {"algebra": "algebra", "counting_and_prob": "counting_and_probability",
                 "geometry": "geometry", "intermediate_algebra": "intermediate_algebra",
                 "num_theory": "number_theory", "prealgebra": "prealgebra", "precalculus": "precalculus"}
RULER_NIAH = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
              "niah_multikey_3", "niah_multivalue", "niah_multiquery")
LOCAL_SUFFIX = "_local"


@dataclass(frozen=True)
class LocalTask:
    """One upstream task re-pointed at local files."""

    name: str                   # local task name (upstream name + "_local")
    upstream_yaml: str          # path under lm_eval/tasks/
    data_files: dict            # split -> path relative to data_dir
    extra: dict                 # further keys that must change for local files (never prompt/filter keys)


@dataclass(frozen=True)
class TaskPreset:
    """A benchmark as the study runs it: its local tasks, the group name lm-eval reports, and the
    per-sample metric/filter the paired statistics use."""

    name: str
    group: str | None           # lm-eval group of the local tasks (None: a single task)
    tasks: tuple[LocalTask, ...]
    group_aggregate: tuple = ()
    metric: str = "exact_match"  # per-sample key in lm-eval's logged samples; "max_length" = RULER's
    filter: str = "none"         # the filter whose output is scored
    describe: str = ""

    @property
    def task_names(self) -> list[str]:
        return [self.group] if self.group else [t.name for t in self.tasks]


def _gpqa() -> TaskPreset:
    t = LocalTask("gpqa_diamond_cot_zeroshot" + LOCAL_SUFFIX, "gpqa/cot_zeroshot/gpqa_diamond_cot_zeroshot.yaml",
                  {"train": "gpqa/gpqa_diamond.jsonl"}, {"dataset_name": None, "tag": []})
    return TaskPreset("gpqa", None, (t,), metric="exact_match", filter="flexible-extract",
                      describe="GPQA-Diamond, chain-of-thought zero-shot (198 questions upstream)")


def _mmlu_pro() -> TaskPreset:
    files = {"test": "mmlu_pro/test.jsonl", "validation": "mmlu_pro/validation.jsonl"}
    tasks = tuple(LocalTask(f"mmlu_pro_{s}{LOCAL_SUFFIX}", f"mmlu_pro/mmlu_pro_{s}.yaml", files, {}) for s in MMLU_PRO_SUBJECTS)
    agg = ({"aggregation": "mean", "metric": "exact_match", "weight_by_size": True, "filter_list": "custom-extract"},)
    return TaskPreset("mmlu_pro", "mmlu_pro" + LOCAL_SUFFIX, tasks, agg, metric="exact_match", filter="custom-extract",
                      describe="MMLU-Pro, 5-shot chain of thought (14 subjects)")


def _math_hard() -> TaskPreset:
    tasks = tuple(LocalTask(f"leaderboard_math_{s}_hard{LOCAL_SUFFIX}", f"leaderboard/math/math_{s}.yaml",
                            # the upstream YAML names a train split (few-shot samples come from a
                            # function, so its rows are never read); point it at the same file
                            {"test": f"math_hard/{cfg}.jsonl", "train": f"math_hard/{cfg}.jsonl"},
                            {"dataset_name": None})
                  for s, cfg in MATH_SUBJECTS.items())
    agg = ({"metric": "exact_match", "aggregation": "mean", "weight_by_size": True},)
    return TaskPreset("math_hard", "leaderboard_math_hard" + LOCAL_SUFFIX, tasks, agg, metric="exact_match",
                      filter="none", describe="MATH level 5 (Open LLM Leaderboard v2 'hard'), 4-shot")


def _ruler() -> TaskPreset:
    tasks = tuple(LocalTask(f"{n}{LOCAL_SUFFIX}", f"ruler/{n}.yaml", {"test": f"ruler/{n}.jsonl"},
                            # rows come from a file instead of the generator function
                            {"custom_dataset": None, "dataset_name": None, "tag": []})
                  for n in RULER_NIAH)
    return TaskPreset("ruler_niah", "ruler_niah" + LOCAL_SUFFIX, tasks, (), metric="max_length", filter="none",
                      describe="RULER needle-in-a-haystack (8 NIAH tasks), scored at each row's max_length")


PRESETS: dict[str, TaskPreset] = {p.name: p for p in (_gpqa(), _mmlu_pro(), _math_hard(), _ruler())}


def lm_eval_tasks_dir() -> Path:
    """Folder of the task YAMLs shipped with the installed lm-eval."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


def _yaml_value(v) -> str:
    import json

    # JSON is valid YAML flow syntax and quotes every string safely.
    return json.dumps(v)


def write_task_configs(out_dir: str | Path, data_dir: str | Path, presets: list[str] | None = None) -> dict[str, TaskPreset]:
    """Write the local task YAMLs (and group YAMLs) of ``presets`` (default: all) into ``out_dir``.

    Returns preset name -> TaskPreset. Raises FileNotFoundError naming every missing data file.
    Pass ``out_dir`` to lm-eval as ``--include_path`` (or ``TaskManager(include_path=...)``).
    """
    out, data = Path(out_dir), Path(data_dir).resolve()
    names = list(PRESETS) if presets is None else presets
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(f"unknown task preset(s) {unknown}; known: {', '.join(PRESETS)}")
    upstream = lm_eval_tasks_dir()
    missing = sorted({str(data / f) for n in names for t in PRESETS[n].tasks for f in t.data_files.values()
                      if not (data / f).is_file()})
    if missing:
        raise FileNotFoundError(f"task data missing under {data}: {', '.join(missing)} "
                                f"(rows in the upstream dataset's format; see precision_lab.evals.tasks)")
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        p = PRESETS[n]
        for t in p.tasks:
            src = upstream / t.upstream_yaml
            if not src.is_file():
                raise FileNotFoundError(f"the installed lm-eval has no {t.upstream_yaml} (needed by {t.name})")
            lines = [f"# written by precision_lab.evals.tasks for preset {n!r}: upstream task, local rows",
                     f"include: {_yaml_value(str(src))}", f"task: {t.name}", "dataset_path: json"]
            lines += [f"{k}: {_yaml_value(v)}" for k, v in t.extra.items()]
            files = {split: str(data / f) for split, f in t.data_files.items()}
            lines.append(f"dataset_kwargs: {_yaml_value({'data_files': files})}")
            (out / f"{t.name}.yaml").write_text("\n".join(lines) + "\n")
        if p.group:
            lines = [f"group: {p.group}", f"task: {_yaml_value([t.name for t in p.tasks])}"]
            if p.group_aggregate:
                lines.append(f"aggregate_metric_list: {_yaml_value(list(p.group_aggregate))}")
            lines.append("metadata: {\"version\": 1}")
            (out / f"{p.group}.yaml").write_text("\n".join(lines) + "\n")
    return {n: PRESETS[n] for n in names}


def sample_score(preset: TaskPreset | None, sample: dict) -> float:
    """The per-item score of one logged lm-eval sample under the preset's metric.

    RULER logs one key per context length with -1 for the lengths a row does not have: the row's
    own ``max_length`` picks its score. For other tasks the preset's metric key is read; tasks
    without a preset use the first numeric metric in the sample.
    """
    if preset is not None and preset.metric == "max_length":
        return float(sample[str(sample["doc"]["max_length"])])
    if preset is not None:
        if preset.metric not in sample:
            raise KeyError(f"sample of {preset.name} has no metric {preset.metric!r} (keys: {sorted(sample)})")
        return float(sample[preset.metric])
    skip = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
            "doc_hash", "prompt_hash", "target_hash"}
    for k, v in sample.items():
        if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    raise KeyError(f"no numeric metric in sample keys {sorted(sample)}")


def preset_of_task(task_name: str) -> TaskPreset | None:
    """The preset a (local) task name belongs to, or None."""
    for p in PRESETS.values():
        if task_name == p.group or any(task_name == t.name for t in p.tasks):
            return p
    return None
