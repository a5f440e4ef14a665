"""The result file of the generation benchmark (``precision_lab/bench/generate.py``,
``scripts/bench_generate.py``): its classes, written by the benchmark and read by
``precision-lab report`` (kind ``bench-generate``) through the same classes.

A file is ``{"schema": "precision-lab.bench_generate/1", <the fields of GenerateResult>}``; the
schema string names both the kind and the version (the file has no ``kind`` key). It is read field
by field with the reader of ``precision_lab.bench.schema`` (an unknown or missing field, or a value
of the wrong type, is refused with the field named), and then checked as a whole (``_check``):

- every row belongs to a preset, batch and row name of ``settings``, and no (preset, batch, row)
  appears twice; a row that failed (``error``) has no times, a row that ran has all of them;
- the check says what it is: skipped (``ok`` false, no verdicts), or run with a verdict per preset
  and policy and ``ok`` equal to all of them;
- ``ratios`` are exactly what ``ratios(rows, ...)`` gives for those rows and that check (the same
  numbers, targets, ``met`` flags and check labels): a ratio is never read that its rows do not give.

No module here imports torch, so the report reads these files without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from precision_lab.bench.schema import Device, SchemaError, plain, read_as

SCHEMA = "precision-lab.bench_generate/1"
SCHEMA_PREFIX = "precision-lab.bench_generate/"
KIND = "bench-generate"          # the report's name for these files
PLAIN = "plain transformers"     # the row of the unadapted model (``model.generate``)

# the targets: each lossy policy at most LOSSY_MAX x the fp32 policy at every batch; the fp32 policy
# (fast path) at most FP32_MAX x plain transformers at batch FP32_BATCH
LOSSY_MAX = 1.15
FP32_MAX = 0.25
FP32_BATCH = 8
LOSSY_TARGET = f"<= {LOSSY_MAX:g}"
FP32_TARGET = f"<= {FP32_MAX:g} at batch {FP32_BATCH}"

# what a ratio entry says about the check of its run
CHECK_LABELS = {"passed": "passed", "failed": "FAILED (ratio not a result)",
                "skipped": "SKIPPED (ratio unverified)"}


@dataclass
class GenerateProvenance:
    """``precision_lab.provenance.provenance()`` of the run (no extra keys)."""

    created: str
    command: str | None
    git: str | None
    versions: dict[str, str | None]
    device: Device

    @property
    def smoke(self) -> bool:
        """No GPU, or the Triton interpreter: its timings are not measurements."""
        return self.device.gpu is None or bool(self.device.triton_interpret)


@dataclass
class Settings:
    presets: list[str]
    batches: list[int]
    rows: list[str]                   # policy strings and/or PLAIN
    prompt: int
    new_tokens: int
    plain_transformers_tokens: int
    weights: str
    policy_prefill: str | None = None   # how a policy row's prefill was timed (absent in older files)


@dataclass
class Graphs:
    """How the decode steps ran (``GenerationResult.graphs``); only ``enabled`` for plain transformers."""

    enabled: bool
    captured: int | None = None
    replays: int | None = None
    disabled_reason: str | None = None


@dataclass
class CheckVerdict:
    """The fast path against the torch decode engine for one policy on one tiny preset
    (``teacher_forced.compare_engines``; ``disagreement`` / ``effect`` null where not finite)."""

    ok: bool
    disagreement: float | None
    effect: float | None
    criterion: str
    greedy_tokens_identical: float
    graphs: Graphs
    served: dict[str, int]


@dataclass
class Check:
    """The GPU correctness check of the run: skipped (``skipped`` true, ``ok`` false, no verdicts)
    or run (``criterion``, a verdict per preset and policy)."""

    ok: bool
    skipped: bool = False
    criterion: str | None = None
    presets: dict[str, dict[str, CheckVerdict]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """"passed", "failed" or "skipped"."""
        return "skipped" if self.skipped else ("passed" if self.ok else "failed")


@dataclass
class Row:
    """One timed generation (a failed one: ``error`` and no times)."""

    preset: str
    batch: int
    row: str                          # a policy string, or PLAIN
    step_ms_median: float | None
    step_ms_p90: float | None
    steps: int
    prefill_s: float | None
    tokens_per_s: float | None
    graphs: Graphs = field(default_factory=lambda: Graphs(enabled=False))
    served: dict[str, int | str] = field(default_factory=dict)   # implementation -> SSM layers it served
    error: str | None = None


@dataclass
class Ratio:
    """A target ratio from rows of the same run: ``row`` ÷ ``over`` at one preset and batch."""

    preset: str
    batch: int
    row: str
    over: str
    ratio: float
    target: str
    met: bool
    check: str


@dataclass
class GenerateResult:
    KIND: ClassVar[str] = KIND

    schema: str
    provenance: GenerateProvenance
    settings: Settings
    check: Check
    rows: list[Row]
    ratios: list[Ratio]


def ratios(rows: list[Row], check_ok: bool, *, skipped: bool = False) -> list[dict]:
    """The target ratios from rows of one run: each lossy row ÷ fp32, and fp32 ÷ plain transformers.
    None is counted as met unless the check passed; ``check`` labels each with the check's outcome.
    Rows without a time (failed) give no ratio."""
    status = "skipped" if skipped else ("passed" if check_ok else "failed")
    ok = status == "passed"
    by = {(r.preset, r.batch, r.row): r for r in rows if r.step_ms_median is not None}
    out = []
    for (preset, batch, row), r in by.items():
        base = by.get((preset, batch, "fp32"))
        if row not in (PLAIN, "fp32") and base is not None:
            out.append({"preset": preset, "batch": batch, "row": row, "over": "fp32",
                        "ratio": r.step_ms_median / base.step_ms_median, "target": LOSSY_TARGET,
                        "met": bool(ok and r.step_ms_median <= LOSSY_MAX * base.step_ms_median),
                        "check": CHECK_LABELS[status]})
        if row == "fp32" and (preset, batch, PLAIN) in by:
            p = by[(preset, batch, PLAIN)]
            out.append({"preset": preset, "batch": batch, "row": "fp32", "over": PLAIN,
                        "ratio": r.step_ms_median / p.step_ms_median, "target": FP32_TARGET,
                        "met": bool(ok and r.step_ms_median <= FP32_MAX * p.step_ms_median),
                        "check": CHECK_LABELS[status]})
    return out


# ---------------------------------------------------------------------------------------------
# reading and writing
# ---------------------------------------------------------------------------------------------
def is_generate_file(data) -> bool:
    """Whether a parsed JSON object claims to be a generation benchmark result (any version)."""
    return isinstance(data, dict) and isinstance(data.get("schema"), str) and \
        data["schema"].startswith(SCHEMA_PREFIX)


def load(data: dict) -> GenerateResult:
    """The typed result of a generation benchmark file's JSON object. Raises SchemaError naming the
    first field that does not fit, or what does not add up (module docstring)."""
    if not isinstance(data, dict):
        raise SchemaError(f"a generation benchmark result is a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise SchemaError(f"schema {data.get('schema')!r}; this version reads {SCHEMA!r}")
    result = read_as(GenerateResult, data)
    _check(result)
    return result


def to_json(result: GenerateResult | dict) -> dict:
    """The JSON object the benchmark writes (from the result object or its dict form), checked as
    ``load`` checks it."""
    out = plain(result) if isinstance(result, GenerateResult) else plain(dict(result))
    load(out)
    return out


def _check(t: GenerateResult) -> None:
    prov, s, chk = t.provenance, t.settings, t.check
    if not prov.smoke and not prov.git:
        raise SchemaError("provenance.git: null in a GPU result; run from a git checkout or name the commit "
                          "in PRECISION_LAB_GIT")
    # the check
    if chk.skipped:
        if chk.ok or chk.presets:
            raise SchemaError("check: marked skipped but holds " + ("ok: true" if chk.ok else "verdicts"))
    else:
        if not chk.presets or not all(chk.presets.values()):
            raise SchemaError("check: neither skipped nor holding a verdict per preset and policy")
        if chk.criterion is None:
            raise SchemaError("check.criterion: null in a check that ran")
        every = all(v.ok for verdicts in chk.presets.values() for v in verdicts.values())
        if chk.ok != every:
            raise SchemaError(f"check.ok: {chk.ok} but the verdicts say {every}")
    # the rows
    seen = set()
    for i, r in enumerate(t.rows):
        at = f"rows[{i}]"
        for name, value, where in (("preset", r.preset, "presets"), ("batch", r.batch, "batches"),
                                   ("row", r.row, "rows")):
            if value not in getattr(s, where):
                raise SchemaError(f"{at}.{name}: {value!r} is not in settings.{where} {getattr(s, where)}")
        key = (r.preset, r.batch, r.row)
        if key in seen:
            raise SchemaError(f"{at}: a second row for {r.preset}, batch {r.batch}, {r.row!r}")
        seen.add(key)
        times = (r.step_ms_median, r.step_ms_p90, r.prefill_s, r.tokens_per_s)
        if r.error is None:
            if any(x is None for x in times):
                raise SchemaError(f"{at}: a row without an error whose times are null")
            if r.step_ms_median <= 0:
                raise SchemaError(f"{at}: {r.step_ms_median} ms per step is not a timing")
        elif any(x is not None for x in times):
            raise SchemaError(f"{at}: a failed row ({r.error[:60]!r}) that holds times")
    # the ratios: exactly those of the rows and the check
    want = ratios(t.rows, chk.ok, skipped=chk.skipped)
    got = [plain(x) for x in t.ratios]
    keyed = {(x["preset"], x["batch"], x["row"], x["over"]): x for x in want}
    for i, x in enumerate(got):
        k = (x["preset"], x["batch"], x["row"], x["over"])
        w = keyed.pop(k, None)
        if w is None:
            raise SchemaError(f"ratios[{i}]: {x['row']} over {x['over']} at {x['preset']}, batch {x['batch']} "
                              "does not follow from the rows")
        for name in ("target", "met", "check"):
            if x[name] != w[name]:
                raise SchemaError(f"ratios[{i}].{name}: {x[name]!r}, but the rows and the check give {w[name]!r}")
        if not math.isclose(x["ratio"], w["ratio"], rel_tol=1e-9):
            raise SchemaError(f"ratios[{i}].ratio: {x['ratio']!r}, but the rows give {w['ratio']!r}")
    if keyed:
        preset, batch, row, over = next(iter(keyed))
        raise SchemaError(f"ratios: none for {row} over {over} at {preset}, batch {batch}, which the rows give")
