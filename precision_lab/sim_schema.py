"""The result file of ``precision-lab sim`` (``precision_lab/sim.py``): one dataclass per shape,
written by the simulator and read by ``precision-lab report`` through the same classes.

A file is ``{"kind": "sim", "schema_version": 1, <the fields of its class>}`` in one of two shapes:

=====================  ============================  ==============================================
shape                  class                         written by
=====================  ============================  ==============================================
error study            ``SimResult``                 ``run_sim`` (``precision-lab sim``)
float64 equivalence    ``SimEquivalenceResult``      ``equivalence_result`` (``sim --mode
                                                     equivalence``); the only shape with ``mode``
=====================  ============================  ==============================================

Version 1 is the layout every committed simulator file has; it is read as written, field by field
(the reader of ``precision_lab.bench.schema``: an unknown or missing field, or a value of the wrong
type, is refused with the field named). The one-architecture equivalence layout of the first
simulator (``arch``, ``decode`` and ``speculative`` at the top level) is not read.

``dump(result)`` checks the object against its class before it is written (the same check ``load``
makes), so the simulator cannot write a file the report would refuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from precision_lab.bench.schema import Device, SchemaError, plain, read_as, result_body

KIND = "sim"
SCHEMA_VERSION = 1
EQUIVALENCE = "equivalence"


# ---------------------------------------------------------------------------------------------
# the error study
# ---------------------------------------------------------------------------------------------
@dataclass
class SimSettings:
    """The ``SimConfig`` of the run (``policies`` in short_str() form) and the per-head mean decays
    it implies (``head_decays``, float64 values of ``sim.head_decays``)."""

    arch: str
    steps: int
    batch: int
    heads: int
    rows: int
    cols: int
    groups: int
    decay: list[float]
    jitter: float
    input_scale: float
    seed: int
    sr_seed: int
    policies: list[str]
    avg: int
    bins: int
    engine: str
    head_decays: list[float]


@dataclass
class SimProvenance:
    """``precision_lab.provenance.provenance`` of the run: creation time, command, git commit,
    package versions, device; the settings and seeds are repeated here so the provenance alone
    says how to rerun."""

    created: str
    command: str | None
    git: str | None
    versions: dict[str, str | None]
    device: Device
    settings: SimSettings
    policies: list[str]
    seed: int
    sr_seed: int


@dataclass
class SimMetric:
    """What the numbers mean, in words (the module docstring of ``precision_lab/sim.py``)."""

    error: str
    window_stat: str
    reference: str
    compute_dtype: str
    engine: str


@dataclass
class ErrorCurve:
    """The per-step error averaged in log-spaced bins: ``step`` is each bin's last step."""

    step: list[int]
    mean_rel_error: list[float]


@dataclass
class PolicyErrors:
    """One policy: its error at every window end (the mean over the ``avg`` steps ending there, and
    over the whole window), the binned curve, its write counts and the policy's parts."""

    window_ends: list[int]
    mean_rel_error_last: list[float]
    mean_rel_error_window: list[float]
    curve: ErrorCurve
    state_writes: int
    record_writes: int
    copy_writes: int
    engine: str
    implementation: str
    seconds: float
    policy: str
    mode: str
    update: str
    read: str
    buffer_len: int
    gdn_fold: str


@dataclass
class SimResult:
    KIND: ClassVar[str] = KIND

    provenance: SimProvenance
    settings: SimSettings
    metric: SimMetric
    window_ends: list[int]
    seconds: float
    results: dict[str, PolicyErrors]


# ---------------------------------------------------------------------------------------------
# --mode equivalence
# ---------------------------------------------------------------------------------------------
@dataclass
class DecodeEquivalence:
    """ReplaySSM (``shared:fp32@L<L>``) against conventional decode in float64."""

    steps: int
    L: int
    state: list[int]
    max_rel_diff: float
    replay_state_writes: int
    conventional_state_writes: int
    replay_record_writes: int


@dataclass
class SpeculativeEquivalence:
    """Speculative decoding against token-by-token decode of the accepted stream, in float64."""

    drafts: int
    tokens_per_round: int
    rounds: int
    L: int
    accepted_tokens: int
    max_rel_diff: float
    snapshot_max_rel_diff: float
    replay_state_writes: int
    snapshot_state_writes: int
    replay_record_writes: int


@dataclass
class ArchEquivalence:
    decode: DecodeEquivalence
    speculative: SpeculativeEquivalence


@dataclass
class EquivalenceProvenance:
    """``precision_lab.provenance.provenance`` of the run; ``settings``: the options given to
    ``run_equivalence`` (steps, rows, cols, L, drafts, rounds), empty when all were defaults."""

    created: str
    command: str | None
    git: str | None
    versions: dict[str, str | None]
    device: Device
    mode: str
    archs: list[str]
    seed: int
    settings: dict[str, int]


@dataclass
class SimEquivalenceResult:
    KIND: ClassVar[str] = KIND

    provenance: EquivalenceProvenance
    mode: str
    results: dict[str, ArchEquivalence]


AnySimResult = SimResult | SimEquivalenceResult


# ---------------------------------------------------------------------------------------------
# reading and writing
# ---------------------------------------------------------------------------------------------
def load(data: dict) -> AnySimResult:
    """The typed result of a simulator file's JSON object; ``mode: "equivalence"`` selects the
    equivalence shape. Raises SchemaError naming the first field that does not fit."""
    body = result_body(data, KIND, SCHEMA_VERSION, "a simulator result")
    cls = SimEquivalenceResult if "mode" in body else SimResult
    result = read_as(cls, body)
    _check(result)
    return result


def _check(result: AnySimResult) -> None:
    if isinstance(result, SimEquivalenceResult):
        if result.mode != EQUIVALENCE:
            raise SchemaError(f"mode: {result.mode!r}; the only simulator mode with its own shape is {EQUIVALENCE!r}")
        return
    n = len(result.window_ends)
    for name, r in result.results.items():
        if r.window_ends != result.window_ends:
            raise SchemaError(f"results[{name!r}].window_ends: {r.window_ends} differ from window_ends "
                              f"{result.window_ends}")
        for field in ("mean_rel_error_last", "mean_rel_error_window"):
            if len(getattr(r, field)) != n:
                raise SchemaError(f"results[{name!r}].{field}: {len(getattr(r, field))} values for {n} window ends")
        if len(r.curve.step) != len(r.curve.mean_rel_error):
            raise SchemaError(f"results[{name!r}].curve: {len(r.curve.step)} steps but "
                              f"{len(r.curve.mean_rel_error)} errors")


def to_json(result: AnySimResult) -> dict:
    """The JSON object ``dump`` writes, checked against its class as ``load`` checks it."""
    out = {"kind": KIND, "schema_version": SCHEMA_VERSION, **plain(result)}
    load(out)
    return out


def dump(result: AnySimResult, path) -> None:
    """Write ``result`` as JSON to ``path`` (its folder created)."""
    import json
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(result), indent=1, allow_nan=False) + "\n")
