"""The result files of the four benchmarks: one dataclass per kind, written by the benchmark and read
by ``precision-lab report`` through the same classes.

Every file is a JSON object ``{"kind": ..., "schema_version": 2, <the fields of its class>}``:

================  =====================  ==========================================================
kind              class                  written by
================  =====================  ==========================================================
bench-kernels     ``DecodeKernelsResult``  ``decode_kernels`` (scripts/bench_kernels.py)
bench-quant       ``QuantKernelsResult``   ``quant_kernels`` (scripts/bench_quant.py)
bench-scan        ``ScanKernelsResult``    ``scan_kernels`` (scripts/bench_scan.py)
bench-kl          ``KLEngineResult``       ``kl_engine`` (scripts/bench_kl.py)
================  =====================  ==========================================================

What every kind carries: ``provenance`` (``Provenance``: creation time, command, git commit — never
null outside smoke runs —, package versions, device, the run's settings), ``ceiling`` (the copy
bandwidth measured in the same run; null only in smoke runs), ``peers`` (version of every peer
package the run timed, e.g. ``{"flash-linear-attention": "0.6.0"}``).

Version 1 (the files written before these classes existed) is read explicitly: ``load`` converts
each kind's version-1 layout field by field (``_v1_*``), numbers unchanged. No field is ever looked
up under more than one name.

``dump(result)`` checks the object against its class before it is written (the same check ``load``
makes), so a benchmark cannot write a file the report would refuse.
"""
from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = 2


class SchemaError(ValueError):
    """A result that does not match its kind's class (the message names the field)."""


# ---------------------------------------------------------------------------------------------
# what every kind carries
# ---------------------------------------------------------------------------------------------
@dataclass
class Device:
    """Where the run happened (``precision_lab.provenance.device_info``); ``gpu`` None on the CPU."""

    gpu: str | None = None
    gpu_count: int | None = None
    cuda: str | None = None
    host: str | None = None
    cpu: str | None = None
    triton_interpret: bool = False


@dataclass
class Provenance:
    """What produced a result. ``settings``: the run's options as given; ``merged_from``: the
    provenance of each run a merged result was joined from (a run split by operator)."""

    created: str
    command: str | None
    git: str | None
    versions: dict[str, str | None]
    device: Device
    smoke: bool = False
    seconds: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    merged_from: list[Provenance] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class CopyTry:
    """One way of timing a device-to-device copy (bytes read + written)."""

    method: str
    bytes: int
    us: float
    GBps: float
    timing: str


@dataclass
class Ceiling(CopyTry):
    """The copy ceiling of a run: its best try, every try under ``tries``."""

    tries: list[CopyTry] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# bench-kernels
# ---------------------------------------------------------------------------------------------
@dataclass
class KernelCheck:
    """A kernel family against its torch reference at the benchmark shapes. ``writes``: state
    writes of the kernel stream and of the reference (stream checks only)."""

    rel_err: dict[str, float]
    tol: float
    ok: bool
    writes: list[int] | None = None


@dataclass
class KernelRow:
    """One measured (or failed) launch configuration. ``tag``: which sweep it belongs to (tune,
    batch, batch1-round<i>, fused, L<L>, T<T>, read, update, convfmt); ``kernel``: conventional,
    nonflush, flush or fla. ``fused_scores``: the launch form of a ReplaySSM row — True one launch
    (every program computes its scores), False a scores kernel then the step kernel; None for other
    kernels and for files written before the field existed."""

    op: str
    kernel: str
    tag: str
    batch: int
    update: str | None = None
    read: str | None = None
    W: int | None = None
    T: int | None = None
    ring: int | None = None
    cfg: dict[str, Any] = field(default_factory=dict)
    us: float | None = None
    bytes: float | None = None
    GBps: float | None = None
    pct_ceiling: float | None = None
    timing: str | None = None
    buffer_sets: int | None = None
    error: str | None = None
    autotuned_at_this_batch: dict[str, str] | None = None
    implementation: str | None = None
    fused_scores: bool | None = None


@dataclass
class BatchPoint:
    conventional_us: float
    conventional_pct_ceiling: float
    nonflush_us: float
    flush_us: float
    replay_amortised_us: float
    fla_us: float | None = None
    speedup_vs_conventional: float | None = None
    speedup_vs_fla: float | None = None


@dataclass
class LaunchFormPoint:
    """The one-token ReplaySSM steps (shared:fp32, L = 16) in their two launch forms at one batch
    size, with the conventional step; ``*_vs_conventional``: conventional µs / non-flush µs (only
    where the kernels involved passed their checks)."""

    conventional_us: float
    nonflush_one_launch_us: float
    nonflush_two_launch_us: float
    flush_one_launch_us: float
    flush_two_launch_us: float
    nonflush_one_launch_vs_conventional: float | None = None
    nonflush_two_launch_vs_conventional: float | None = None


@dataclass
class WindowPoint:
    nonflush_us: float
    flush_us: float
    replay_amortised_us: float
    speedup_vs_conventional: float | None
    bound: float


@dataclass
class DraftPoint:
    verify_us: float
    spec_flush_us: float
    per_round_amortised_us: float
    rounds_per_flush: int
    ratio_to_one_conventional_step: float | None
    snapshot_baseline_estimate_us: float


@dataclass
class ReadFormatPoint:
    nonflush_us: float
    nonflush_GBps: float
    flush_us: float
    replay_amortised_us: float


@dataclass
class UpdateFormatPoint:
    flush_us: float
    GBps: float


@dataclass
class StorageFormatPoint:
    us: float
    GBps: float
    pct_ceiling: float


@dataclass
class Target:
    """A target's measured ratio (``value``), its threshold and whether it is met. ``byte_bound``: the
    ratio if every ReplaySSM kernel in it moved its counted bytes at the copy ceiling and the baseline
    kept its measured time: the best the bytes allow (the lowest for an "at most" target). A target
    beyond its byte bound cannot be met by faster kernels alone, only by moving fewer bytes. None
    where bytes do not bound the ratio (batch 1: launch and memory latency; the targets that are
    themselves a fraction of a byte bound) and in summaries written before the field existed.
    ``spread``: [lowest, highest] of the ratio over the interleaved rounds its rows were timed in
    (batch 1: tags batch1-round<i>); None where they were timed once and in files written before
    the field existed."""

    value: float | None
    target: float
    met: bool | None
    byte_bound: float | None = None
    spread: list[float] | None = None


@dataclass
class OperatorSummary:
    """One operator's sweeps reduced to amortised costs and speedups (a speedup only where the
    kernels involved passed their checks), and the targets."""

    batch: dict[int, BatchPoint]
    L: dict[int, WindowPoint]
    drafts: dict[int, DraftPoint]
    read: dict[str, ReadFormatPoint]
    update: dict[str, UpdateFormatPoint]
    conventional_formats: dict[str, StorageFormatPoint]
    ceiling_for_targets_GBps: float
    targets: dict[str, Target]
    nvfp4_vs_fp32_read_nonflush: float | None = None
    launch_forms: dict[int, LaunchFormPoint] = field(default_factory=dict)


@dataclass
class DecodeKernelsResult:
    KIND: ClassVar[str] = "bench-kernels"

    provenance: Provenance
    ceiling: Ceiling
    peers: dict[str, str | None]
    correctness: dict[str, KernelCheck]
    rows: list[KernelRow]
    summary: dict[str, OperatorSummary] | None = None
    partial: bool = False
    incomplete: str | None = None
    summary_recomputed_by: str | None = None


# ---------------------------------------------------------------------------------------------
# bench-quant
# ---------------------------------------------------------------------------------------------
@dataclass
class QuantKernel:
    """One quantizer kernel: its bit-exact check (``"pass"`` / ``"FAIL"``) and, if it passed, its time."""

    check: str
    check_detail: str
    bytes: int
    median_ms: float | None = None
    GBps: float | None = None
    frac_of_copy: float | None = None
    elements_per_s: float | None = None


@dataclass
class ReferenceTime:
    median_ms_chunk: float
    chunk_shape: list[int]
    median_ms_full_extrapolated: float


@dataclass
class QuantTarget:
    kernel: str
    fraction_of_copy: float
    achieved_fraction: float | None
    met: bool


@dataclass
class QuantKernelsResult:
    KIND: ClassVar[str] = "bench-quant"

    provenance: Provenance
    ceiling: Ceiling | None
    peers: dict[str, str | None]
    shape: list[int]
    dtype: str
    timing: str
    implementation: str
    sr_seed: int
    state_bytes: int
    n_elements: int
    n_matrices: int
    kernels: dict[str, QuantKernel]
    torch_reference_nvfp4: ReferenceTime | None
    target: QuantTarget
    bytes_model: dict[str, str]


# ---------------------------------------------------------------------------------------------
# bench-scan
# ---------------------------------------------------------------------------------------------
@dataclass
class ScanLayer:
    model: str
    dims: dict[str, int]


@dataclass
class ScanCheck:
    arch: str
    policy: str
    against: str
    T: int
    B: int
    ok: bool
    rel_rms: dict[str, float] | None = None
    first_call_s: float | None = None
    error: str | None = None


@dataclass
class ScanRow:
    """One timed (or failed) configuration; ``kernel`` is the scan that served it (replay,
    recurrent) or the whole engine (``run_layer(engine='triton')``, no bytes model)."""

    arch: str
    policy: str
    B: int
    T: int
    kernel: str | None = None
    ms: float | None = None
    tokens_per_s: float | None = None
    bytes: int | None = None
    GBps: float | None = None
    pct_of_copy: float | None = None
    error: str | None = None


@dataclass
class ScanKernelsResult:
    KIND: ClassVar[str] = "bench-scan"

    provenance: Provenance
    ceiling: Ceiling | None
    peers: dict[str, str | None]
    T: int
    layers: dict[str, ScanLayer]
    bytes_model: str
    checks: list[ScanCheck]
    rows: list[ScanRow]


# ---------------------------------------------------------------------------------------------
# bench-kl
# ---------------------------------------------------------------------------------------------
@dataclass
class EngineVerdict:
    ok: bool
    disagreement: float
    effect: float
    criterion: str | None = None


@dataclass
class EngineCheck:
    prefill: int
    decode_tokens: int
    segment: int
    weights: str
    verdicts: dict[str, EngineVerdict]
    all_ok: bool
    seconds: float
    implementations: list[str] = field(default_factory=list)


@dataclass
class SideBySide:
    prefill: int
    decode_tokens: int
    rows: int
    weights: str
    prefill_seconds: float
    teacher_forced_seconds: float
    teacher_forced_tok_per_s: float
    token_by_token_steps_timed: int
    token_by_token_seconds_per_step: float
    token_by_token_seconds_per_step_stat: str
    token_by_token_seconds_for_stream: float
    token_by_token_note: str
    speedup: float
    speedup_valid: bool | None
    implementations: list[str] = field(default_factory=list)


@dataclass
class Segment:
    start: int
    tokens: int
    seconds: float


@dataclass
class LongRun:
    tokens: int
    prefill: int
    segment: int
    rows: int
    weights: str
    decode_tokens_done: int
    seconds: float
    tokens_per_s_per_row: float
    estimated_seconds_full: float
    estimate_note: str
    target_seconds: float
    segments: list[Segment]
    peak_gpu_mem_gib: float | None
    mean_kl_by_policy_random_weights: dict[str, float]
    implementations: list[str] = field(default_factory=list)


@dataclass
class KLEngineResult:
    KIND: ClassVar[str] = "bench-kl"

    provenance: Provenance
    ceiling: Ceiling | None
    peers: dict[str, str | None]
    model: str
    policies: list[str]
    engine: str
    build_seconds: float | None = None
    model_params: int | None = None
    side_by_side: SideBySide | None = None
    long_run: LongRun | None = None
    check: EngineCheck | None = None


RESULT_CLASSES = {c.KIND: c for c in (DecodeKernelsResult, QuantKernelsResult, ScanKernelsResult, KLEngineResult)}
BenchResult = DecodeKernelsResult | QuantKernelsResult | ScanKernelsResult | KLEngineResult


# ---------------------------------------------------------------------------------------------
# reading and writing
# ---------------------------------------------------------------------------------------------
def load(data: dict) -> BenchResult:
    """The typed result of a benchmark file's JSON object (version 2, or version 1 converted).
    Raises SchemaError naming the first field that does not fit."""
    if not isinstance(data, dict):
        raise SchemaError(f"a benchmark result is a JSON object, got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in RESULT_CLASSES:
        raise SchemaError(f"kind {kind!r} is not a benchmark kind ({', '.join(RESULT_CLASSES)})")
    version = data.get("schema_version")
    if version == 1:
        return _V1[kind](data)
    if version != SCHEMA_VERSION:
        raise SchemaError(f"schema_version {version!r} of {kind!r}; this version reads 1 and {SCHEMA_VERSION}")
    body = {k: v for k, v in data.items() if k not in ("kind", "schema_version")}
    result = _decode(RESULT_CLASSES[kind], body, "")
    _check_v2(result)
    return result


def encode(result: BenchResult) -> dict:
    """The JSON object of a result in the current version (a version-1 result read by ``load`` too)."""
    return {"kind": result.KIND, "schema_version": SCHEMA_VERSION, **_encode(result)}


def to_json(result: BenchResult) -> dict:
    """The JSON object ``dump`` writes: ``encode``, checked against the class as ``load`` checks it."""
    out = encode(result)
    _check_v2(_decode(type(result), {k: v for k, v in out.items() if k not in ("kind", "schema_version")}, ""))
    return out


def dump(result: BenchResult, path) -> None:
    """Write ``result`` as JSON to ``path`` (its folder created)."""
    import json
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(result), indent=1, allow_nan=False) + "\n")


def result_body(data, kind: str, version: int, what: str) -> dict:
    """The fields of a single-kind result file's JSON object, its ``kind`` and ``schema_version``
    checked and removed (``what`` names the file kind in errors)."""
    if not isinstance(data, dict):
        raise SchemaError(f"{what} is a JSON object, got {type(data).__name__}")
    if data.get("kind") != kind:
        raise SchemaError(f"kind {data.get('kind')!r} is not {kind!r}")
    if data.get("schema_version") != version:
        raise SchemaError(f"schema_version {data.get('schema_version')!r} of {kind!r}; this version reads {version}")
    return {k: v for k, v in data.items() if k not in ("kind", "schema_version")}


def read_as(tp, value, where: str = ""):
    """``value`` (parsed JSON) as type ``tp`` (a result class, or a list/dict/union of them), checked
    the way ``load`` checks a benchmark file: unknown or missing fields and wrong types raise
    SchemaError naming the field; numbers are kept exactly as written. The other result kinds
    (``precision_lab.sim_schema``, ``evals/lmeval_schema.py``) read their files with it."""
    return _decode(tp, value, where)


def plain(obj):
    """The JSON form of a result object (dataclasses as objects, integer keys as strings); a
    non-finite number raises SchemaError."""
    return _encode(obj)


def _check_v2(result) -> None:
    prov = result.provenance
    if not prov.smoke and not prov.git:
        raise SchemaError("provenance.git: null in a GPU result; run from a git checkout or name the commit "
                          "in PRECISION_LAB_GIT")
    if not prov.smoke and result.ceiling is None:
        raise SchemaError("ceiling: null in a GPU result; every GPU run measures its copy ceiling")


def _encode(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {(str(k) if isinstance(k, int) else k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        raise SchemaError(f"a non-finite number ({obj}) in a result; write null for a value not measured")
    return obj


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _decode(tp, v, where: str):
    """``v`` (parsed JSON) as type ``tp``; numbers are kept exactly as written (an int where a float
    is declared stays an int)."""
    at = where or "the result"
    if tp is Any:
        return v
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if v is None:
            if len(options) < len(get_args(tp)):
                return None
            raise SchemaError(f"{at}: null where a value is needed")
        first = None
        for a in options:
            try:
                return _decode(a, v, where)
            except SchemaError as e:
                first = first or e
        raise first
    if dataclasses.is_dataclass(tp):
        if not isinstance(v, dict):
            raise SchemaError(f"{at}: expected an object ({tp.__name__}), got {type(v).__name__}")
        hints = get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp)}
        unknown = sorted(set(v) - set(fields))
        if unknown:
            raise SchemaError(f"{at}: field(s) {', '.join(map(repr, unknown))} that {tp.__name__} does not have")
        kw = {}
        for name, f in fields.items():
            if name in v:
                kw[name] = _decode(hints[name], v[name], f"{where}.{name}" if where else name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SchemaError(f"{at}: missing field {name!r} ({tp.__name__})")
        return tp(**kw)
    if origin is list:
        (item,) = get_args(tp)
        if not isinstance(v, list):
            raise SchemaError(f"{at}: expected a list, got {type(v).__name__}")
        return [_decode(item, x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict:
        kt, vt = get_args(tp)
        if not isinstance(v, dict):
            raise SchemaError(f"{at}: expected an object, got {type(v).__name__}")
        out = {}
        for k, x in v.items():
            key = k
            if kt is int:  # JSON object keys are strings
                try:
                    key = int(k)
                except ValueError:
                    raise SchemaError(f"{at}: key {k!r} is not an integer") from None
            out[key] = _decode(vt, x, f"{where}[{k!r}]")
        return out
    ok = {float: lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
          int: lambda x: isinstance(x, int) and not isinstance(x, bool),
          bool: lambda x: isinstance(x, bool), str: lambda x: isinstance(x, str)}.get(tp)
    if ok is None:
        raise SchemaError(f"{at}: no reader for type {tp!r}")
    if not ok(v):
        raise SchemaError(f"{at}: expected {_type_name(tp)}, got {type(v).__name__} {v!r}"[:300])
    return v


# ---------------------------------------------------------------------------------------------
# version 1, read explicitly
# ---------------------------------------------------------------------------------------------
_V1_PROVENANCE = ("created", "command", "git", "versions", "device")


def _v1_provenance(p: dict, smoke: bool, settings_keys=None, gpu: str | None = None) -> Provenance:
    """A version-1 provenance: the common keys of ``precision_lab.provenance.provenance`` as they
    are; ``device`` either that function's dict or the GPU's name; every other key a setting
    (``settings_keys`` limits which)."""
    dev = p.get("device")
    device = _decode(Device, dev, "provenance.device") if isinstance(dev, dict) else Device(gpu=dev or gpu)
    if device.gpu is None and gpu is not None:
        device.gpu = gpu
    rest = {k: v for k, v in p.items() if k not in _V1_PROVENANCE}
    notes = [rest.pop("note")] if "note" in rest else []
    reported = rest.pop("git_reported_by_the_gpu_copy", None)
    if reported:
        notes.append(f"the GPU copy of the tree reported git {reported}")
    merged = [_v1_provenance(m, smoke) for m in rest.pop("merged_from", [])]
    seconds = rest.pop("seconds", None)
    settings = {k: v for k, v in rest.items() if settings_keys is None or k in settings_keys}
    return Provenance(created=p["created"], command=p.get("command"), git=p.get("git"),
                      versions=dict(p.get("versions") or {}), device=device, smoke=smoke, seconds=seconds,
                      settings=settings, merged_from=merged, notes=notes)


def _need(d: dict, *keys: str, kind: str) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise SchemaError(f"a version-1 {kind!r} result without {', '.join(map(repr, missing))}")


def _v1_kernels(d: dict) -> DecodeKernelsResult:
    _need(d, "provenance", "ceiling", "correctness", "rows", kind="bench-kernels")
    rows = [_decode(KernelRow, r, f"rows[{i}]") for i, r in enumerate(d["rows"])]
    # version 1 recorded which peer served a row, not its version
    peers = {"flash-linear-attention": None} if any(r.kernel == "fla" and r.us is not None for r in rows) else {}
    return DecodeKernelsResult(
        provenance=_v1_provenance(d["provenance"], smoke=False), ceiling=_decode(Ceiling, d["ceiling"], "ceiling"),
        peers=peers, correctness=_decode(dict[str, KernelCheck], d["correctness"], "correctness"), rows=rows,
        summary=_decode(dict[str, OperatorSummary] | None, d.get("summary"), "summary"),
        partial=bool(d.get("partial", False)), incomplete=d.get("incomplete"),
        summary_recomputed_by=d.get("summary_recomputed_by"))


def _v1_quant(d: dict) -> QuantKernelsResult:
    _need(d, "provenance", "copy", "kernels", "target", kind="bench-quant")
    p = d["provenance"]
    smoke = bool(p.get("smoke", False))
    copy = d["copy"]
    # version 1 timed the copy of the state itself with do_bench, in ms
    ceiling = None if smoke else Ceiling(method="torch copy_ of the state (do_bench)", bytes=copy["bytes"],
                                         us=copy["median_ms"] * 1e3, GBps=copy["gbps"], timing="do_bench median")
    kernels = {}
    for name, k in d["kernels"].items():
        kernels[name] = QuantKernel(check=k["check"], check_detail=k["check_detail"], bytes=k["bytes"],
                                    median_ms=k.get("median_ms"), GBps=k.get("gbps"),
                                    frac_of_copy=k.get("frac_of_copy"), elements_per_s=k.get("elements_per_s"))
    return QuantKernelsResult(
        provenance=_v1_provenance(p, smoke, settings_keys=("rep_ms",), gpu=p.get("gpu_name")), ceiling=ceiling,
        peers={}, shape=list(p["shape"]), dtype=p["dtype"], timing=p["timing"], implementation=p["implementation"],
        sr_seed=p["sr_seed"], state_bytes=d["state_bytes"], n_elements=d["n_elements"], n_matrices=d["n_matrices"],
        kernels=kernels, torch_reference_nvfp4=_decode(ReferenceTime | None, d.get("torch_reference_nvfp4"),
                                                       "torch_reference_nvfp4"),
        target=_decode(QuantTarget, d["target"], "target"), bytes_model=dict(d.get("bytes_model") or {}))


def _v1_scan(d: dict) -> ScanKernelsResult:
    _need(d, "provenance", "timings", "checks", "shapes", kind="bench-scan")
    p = d["provenance"]
    smoke = bool(p.get("smoke", False))
    c = d.get("copy_ceiling")
    ceiling = None if c is None else Ceiling(method="torch copy_ (events)", bytes=c["bytes"], us=c["ms"] * 1e3,
                                             GBps=c["GBps"], timing="events, median of 10")
    shapes = dict(d["shapes"])
    T = shapes.pop("T")
    layers = {arch: ScanLayer(model=s["model"], dims={k: v for k, v in s.items() if k != "model"})
              for arch, s in shapes.items()}
    prov = _v1_provenance(p, smoke)
    if "elapsed_s" in d:
        prov.seconds = d["elapsed_s"]
    return ScanKernelsResult(provenance=prov, ceiling=ceiling, peers={}, T=T, layers=layers,
                             bytes_model=str(d.get("bytes_model", "")),
                             checks=_decode(list[ScanCheck], d["checks"], "checks"),
                             rows=_decode(list[ScanRow], d["timings"], "timings"))


def _v1_kl(d: dict) -> KLEngineResult:
    _need(d, "provenance", "model", "policies", "engine", kind="bench-kl")
    p = d["provenance"]
    prov = _v1_provenance(p, smoke=not (p.get("device") or {}).get("gpu"), settings_keys=("settings",))
    prov.settings = dict(p.get("settings") or {})
    return KLEngineResult(
        provenance=prov, ceiling=None, peers={}, model=d["model"], policies=list(d["policies"]), engine=d["engine"],
        build_seconds=d.get("build_seconds"),
        model_params=d.get("model_params"),
        side_by_side=_decode(SideBySide | None, d.get("side_by_side"), "side_by_side"),
        long_run=_decode(LongRun | None, d.get("long_run"), "long_run"),
        check=_decode(EngineCheck | None, d.get("check"), "check"))


_V1 = {"bench-kernels": _v1_kernels, "bench-quant": _v1_quant, "bench-scan": _v1_scan, "bench-kl": _v1_kl}


# ---------------------------------------------------------------------------------------------
# what a run records about itself
# ---------------------------------------------------------------------------------------------
def require_commit() -> str:
    """The commit of the source tree (``precision_lab.provenance.git_hash``); raises before a GPU
    run spends device time when there is none to record."""
    from precision_lab.provenance import git_hash

    commit = git_hash()
    if not commit:
        raise RuntimeError("no git commit to record: run the benchmark from a git checkout, or name the commit "
                           "of the copied tree in PRECISION_LAB_GIT (e.g. PRECISION_LAB_GIT=$(git rev-parse HEAD))")
    return commit


def run_provenance(*, smoke: bool, settings: dict | None = None, seconds: float | None = None) -> Provenance:
    """The provenance of a benchmark run now (``precision_lab.provenance.provenance``) with its
    settings; a GPU run (not ``smoke``) must have a commit to record (``require_commit``)."""
    from precision_lab.provenance import provenance

    if not smoke:
        require_commit()
    p = provenance()
    return Provenance(created=p["created"], command=p["command"], git=p["git"], versions=dict(p["versions"]),
                      device=_decode(Device, p["device"], "provenance.device"), smoke=smoke, seconds=seconds,
                      settings=dict(settings or {}))
