"""The summary file of an lm-eval study (``evals/lmeval_runner.py``, ``OUT/lmeval.json``): one
dataclass, written by the study and read by ``precision-lab report`` through the same classes.

A file is ``{"kind": "lmeval", "schema_version": 1, <the fields of LMEvalResult>}``. Per task it
holds the fp32-state run (``Baseline``) and, per policy, the paired comparison with it
(``PolicyComparison``: accuracy, bootstrap CI of the difference, exact McNemar test, accuracy by
quartile of the fp32 generation length, per item bucket, and against the policy's matched
reference where that was run). The statistics are those of ``evals/stats.py``.

Version 1 is the layout every committed summary has; it is read as written, field by field (the
reader of ``precision_lab.bench.schema``: an unknown or missing field, or a value of the wrong type,
is refused with the field named). Fields added to version 1 later have defaults and are absent from
older files: ``accuracy_ci`` (a run's own accuracy CI, ``AccuracyInterval``) on the baseline, the
policy comparisons and every bucket. ``to_json`` checks a summary against its class before the study
writes it, so a study cannot write a file the report would refuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from precision_lab.bench.schema import Device, plain, read_as, result_body

KIND = "lmeval"
SCHEMA_VERSION = 1


@dataclass
class LMEvalSettings:
    """The study's ``LMEvalConfig`` as given (every field a flag of ``precision-lab lm-eval``)."""

    model: str
    tasks: list[str]
    out: str
    policies: list[str]
    data_dir: str | None
    synthetic: bool
    include_path: list[str]
    seed: int
    engine: str
    scoring: str
    batch_size: str | int
    limit: float | None
    gen_kwargs: str | None
    num_fewshot: int | None
    apply_chat_template: bool
    model_args: str
    device: str | None
    n_boot: int
    stats_seed: int


@dataclass
class LMEvalProvenance:
    """``precision_lab.provenance.provenance`` of the summary: creation time, command, git commit,
    package versions, device; the settings, a digest of each preset task's local rows, and the
    policies, model and SR seed."""

    created: str
    command: str | None
    git: str | None
    versions: dict[str, str | None]
    device: Device
    config: LMEvalSettings
    data_digest: dict[str, str]
    policies: list[str]
    model: str
    seed: int


@dataclass
class LengthStats:
    """Generation lengths in tokens (``stats.length_stats``)."""

    n: int
    mean: float
    median: float
    q90: float
    q99: float
    min: int
    max: int


@dataclass
class PairedDelta:
    """Accuracy difference (policy − baseline, score units) with its paired percentile-bootstrap
    CI over items (``stats.paired_bootstrap``)."""

    delta: float
    ci_low: float
    ci_high: float
    se: float
    n: int
    n_boot: int
    confidence: float
    seed: int


@dataclass
class McNemar:
    """Exact McNemar test (``stats.mcnemar_exact``): b = items only the baseline answered correctly,
    c = items only the policy did."""

    b: int
    c: int
    n_discordant: int
    p_value: float


@dataclass
class AccuracyInterval:
    """A CI of one run's accuracy over items, not paired (``stats.accuracy_interval``): ``method``
    "wilson" (Wilson score interval, 0/1 scores) or "bootstrap" (percentile, fractional scores)."""

    low: float
    high: float
    confidence: float
    method: str


@dataclass
class LengthQuartile:
    """Accuracy within one quartile of the fp32 run's generation length; ``accuracy`` keyed
    ``fp32`` and ``policy``, null (and no length range) for an empty quartile."""

    quartile: int
    n: int
    accuracy: dict[str, float | None]
    len_min: int | None = None
    len_max: int | None = None


@dataclass
class BucketCount:
    """The fp32 run's accuracy within one item bucket."""

    bucket: str
    n: int
    accuracy: float
    accuracy_ci: AccuracyInterval | None = None


@dataclass
class BucketComparison:
    """A paired comparison within one item bucket (``stats.compare_by_bucket``); ``accuracy_ci``:
    the CI of ``accuracy`` on its own."""

    bucket: str
    n: int
    accuracy: float
    baseline_accuracy: float
    delta: PairedDelta
    mcnemar: McNemar
    accuracy_ci: AccuracyInterval | None = None


@dataclass
class ReferenceComparison:
    """A policy against its matched reference (``reference``, short_str form) on the same items."""

    reference: str
    n: int
    accuracy: float
    baseline_accuracy: float
    delta: PairedDelta
    mcnemar: McNemar
    by_bucket: list[BucketComparison] | None = None
    accuracy_ci: AccuracyInterval | None = None


@dataclass
class PolicyComparison:
    """One policy against the fp32-state run (``stats.compare_runs``); ``served``: the
    engine:implementation that served its SSM layers, with call counts."""

    n: int
    accuracy: float
    baseline_accuracy: float
    delta: PairedDelta
    mcnemar: McNemar
    changed_responses: int
    served: dict[str, int]
    by_fp32_length_quartile: list[LengthQuartile] | None = None
    generation_length: LengthStats | None = None
    by_bucket: list[BucketComparison] | None = None
    vs_reference: ReferenceComparison | None = None
    accuracy_ci: AccuracyInterval | None = None


@dataclass
class Baseline:
    """The fp32-state run of a task."""

    accuracy: float
    generation_length: LengthStats | None
    served: dict[str, int]
    by_bucket: list[BucketCount] | None = None
    accuracy_ci: AccuracyInterval | None = None


@dataclass
class Preset:
    """The task preset the items came from (``evals/tasks``)."""

    name: str
    metric: str
    filter: str
    describe: str


@dataclass
class TaskSummary:
    n: int
    lm_eval_tasks: list[str]
    fp32: Baseline
    policies: dict[str, PolicyComparison]
    preset: Preset | None = None


@dataclass
class LMEvalResult:
    KIND: ClassVar[str] = KIND

    provenance: LMEvalProvenance
    model: str
    policies: list[str]
    tasks: dict[str, TaskSummary]
    runs: dict[str, dict[str, str]]  # task -> policy -> per-item run file, relative to the summary


def load(data: dict) -> LMEvalResult:
    """The typed summary of an lm-eval file's JSON object. Raises SchemaError naming the first field
    that does not fit."""
    return read_as(LMEvalResult, result_body(data, KIND, SCHEMA_VERSION, "an lm-eval summary"))


def to_json(result: LMEvalResult) -> dict:
    """The JSON object the study writes, checked against its class as ``load`` checks it."""
    out = {"kind": KIND, "schema_version": SCHEMA_VERSION, **plain(result)}
    load(out)
    return out
