"""Loading result JSON for reports: every file must say what it is (``kind``, ``schema_version``,
``provenance``) and carry the fields its kind's section shows; anything else is refused with a
message naming the file.

What "mixed" means (``check_mixed``), i.e. which sets of inputs a report refuses:

- the same result given twice (same path, or byte-identical content under two names);
- two results of the same kind and the same *setup* that both hold a given policy — e.g. two KL
  summaries of the same model, data and settings that both measured ``shared:nvfp4-sr``, or two
  lm-eval summaries of the same model and task that both hold ``fp32``. The report could only show
  one of them, and picking one silently would hide a rerun that disagrees;
- benchmark files from a smoke run (the Triton interpreter on a CPU): their timings are not
  measurements, so the report refuses to plot them.

Benchmark, simulator and lm-eval files are read through their result classes
(``precision_lab.bench.schema``, with version-1 benchmark files converted there;
``precision_lab.bench.generate_schema`` for the generation benchmark, whose files name their schema
in a ``schema`` string instead of ``kind``/``schema_version``; ``precision_lab.sim_schema``;
``evals/lmeval_schema.py``): ``Result.typed`` is the result object and ``Result.data`` the class's
JSON form. KL files are checked by ``evals/kl_schema.py``.

The setup of a result is everything that changes its numbers except the policy (``setup_key``):
results of the same kind and setup are drawn in one figure (their policies side by side); results
of the same kind but another setup (another model, architecture, length, task, GPU) get their own
figure. That is a study design, not a mix.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precision_lab.bench.generate_schema import PLAIN, is_generate_file

KINDS = ("sim", "kl", "kl-layers", "lmeval", "bench-quant", "bench-kernels", "bench-scan", "bench-kl",
         "bench-generate")
BENCH_KINDS = ("bench-quant", "bench-kernels", "bench-scan", "bench-kl")
# the generation benchmark (precision_lab/bench/generate_schema.py): recognised by its ``schema`` string
GENERATE_KIND = "bench-generate"
# kinds read through a result class of their own (every field checked), besides the benchmarks
CLASS_KINDS = ("sim", "lmeval")
SCHEMA_VERSION = 1
# Versions each kind can be read in (others: SCHEMA_VERSION only). KL summaries of version 1 compare
# with the fp32 run and carry no floor; they are lifted by evals/kl_schema.read_kl_summary.
READABLE_VERSIONS: dict[str, tuple[int, ...]] = {"kl": (1, 2)}

# Keys each kind must have for its section to say anything (optional fields are checked where used).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "kl": ("model", "data", "policies", "results"),
    "kl-layers": ("model", "data", "policies", "results", "ssm_layers", "references"),
}


class ResultError(ValueError):
    """A result file that cannot be used (corrupted, foreign, incompatible, or conflicting)."""


@dataclass
class Result:
    path: Path
    kind: str
    data: dict[str, Any]
    digest: str = ""
    typed: Any = None  # the result object of a kind read through its class (BENCH_KINDS, CLASS_KINDS)

    @property
    def provenance(self) -> dict[str, Any]:
        return self.data.get("provenance", {})

    @property
    def name(self) -> str:
        return self.path.name if self.path.name not in ("summary.json", "results.json", "lmeval.json") \
            else f"{self.path.parent.name}/{self.path.name}"


def load_result(path: str | Path) -> Result:
    """Read and validate one result file (or a run folder holding summary.json / lmeval.json)."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / n for n in ("summary.json", "lmeval.json", "results.json")]
        found = [c for c in candidates if c.exists()]
        if not found:
            raise ResultError(f"{path}: a folder without summary.json, lmeval.json or results.json")
        path = found[0]
    if not path.exists():
        raise ResultError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultError(f"{path}: not valid JSON ({e}); the file is corrupted or not a result file") from e
    except _NonFinite as e:
        raise ResultError(f"{path}: holds {e} where a number should be; a result with non-finite numbers "
                          "is refused") from e
    if is_generate_file(data):
        return _load_generate(path, raw, data)
    if not isinstance(data, dict) or "kind" not in data:
        raise ResultError(f"{path}: not a precision-lab result (no 'kind' key)")
    kind = data["kind"]
    if kind == GENERATE_KIND:
        raise ResultError(f"{path}: kind {kind!r} without the generation benchmark's schema string; its files name "
                          "their layout in 'schema' (precision_lab/bench/generate_schema.py), not in 'kind'")
    if kind not in KINDS:
        raise ResultError(f"{path}: unknown result kind {kind!r}; reports read {', '.join(KINDS)}")
    if kind in BENCH_KINDS:
        return _load_bench(path, raw)
    if kind in CLASS_KINDS:
        result = _load_class_kind(path, raw, data)
        _check_policy_names(result)
        return result
    readable = READABLE_VERSIONS.get(kind, (SCHEMA_VERSION,))
    if data.get("schema_version") not in readable:
        raise ResultError(f"{path}: schema_version {data.get('schema_version')!r} of kind {kind!r}; this version "
                          f"reads {', '.join(map(str, readable))}")
    if not isinstance(data.get("provenance"), dict):
        raise ResultError(f"{path}: no provenance; reports only use results that say what produced them")
    missing = [k for k in _REQUIRED[kind] if k not in data]
    if missing:
        raise ResultError(f"{path}: a {kind!r} result without {', '.join(repr(m) for m in missing)}; "
                          "the file is truncated or was not written by precision-lab")
    result = Result(path, kind, data, hashlib.sha256(raw).hexdigest())
    _check_policy_names(result)
    return result


def _load_bench(path: Path, raw: bytes) -> Result:
    from precision_lab.bench.schema import SchemaError, encode, load

    data = json.loads(raw.decode("utf-8"))
    try:
        typed = load(data)
    except SchemaError as e:
        raise ResultError(f"{path}: a {data['kind']!r} result without the layout this version reads ({e}); the file "
                          "is truncated, edited or was not written by precision-lab") from e
    return Result(path, data["kind"], encode(typed), hashlib.sha256(raw).hexdigest(), typed)


def _load_generate(path: Path, raw: bytes, data: dict) -> Result:
    from precision_lab.bench import generate_schema
    from precision_lab.bench.schema import SchemaError

    try:
        typed = generate_schema.load(data)
    except SchemaError as e:
        raise ResultError(f"{path}: a {GENERATE_KIND!r} result (schema {data['schema']!r}) without the layout this "
                          f"version reads ({e}); the file is truncated, edited or was not written by precision-lab") from e
    result = Result(path, GENERATE_KIND, generate_schema.to_json(typed), hashlib.sha256(raw).hexdigest(), typed)
    _check_policy_names(result)
    return result


def _load_class_kind(path: Path, raw: bytes, data: dict) -> Result:
    from precision_lab import sim_schema
    from precision_lab.bench.schema import SchemaError
    from precision_lab.evals import lmeval_schema

    schema = {"sim": sim_schema, "lmeval": lmeval_schema}[data["kind"]]
    try:
        typed = schema.load(data)
    except SchemaError as e:
        raise ResultError(f"{path}: a {data['kind']!r} result without the layout this version reads ({e}); the file "
                          "is truncated, edited or was not written by precision-lab") from e
    return Result(path, data["kind"], schema.to_json(typed), hashlib.sha256(raw).hexdigest(), typed)


def _check_policy_names(r: Result) -> None:
    """Policies must be named by StatePolicy.short_str(): legends and colours key on those names, and
    two spellings of one policy would be drawn as two policies."""
    from precision_lab.policy import StatePolicy

    if is_equivalence(r):
        return  # keyed by architecture, not by policy
    for _, name in policies_of(r):
        if r.kind == GENERATE_KIND and name == PLAIN:
            continue  # the unadapted model's row, not a policy
        try:
            canon = StatePolicy.parse(name).short_str()
        except (ValueError, TypeError) as e:
            raise ResultError(f"{r.path}: {name!r} is not a policy string ({e})") from e
        if canon != name:
            raise ResultError(f"{r.path}: policy {name!r} is not in its short_str() form {canon!r}; the file was "
                              "not written by precision-lab (or was edited)")


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str):
    # json.loads accepts NaN/Infinity by default; a NaN mean KL would plot as a gap and print as
    # "nan" in a table, so a result holding one is treated as corrupted.
    raise _NonFinite(name)


def load_results(paths) -> list[Result]:
    """Load every path, then refuse mixed inputs (see the module docstring)."""
    results = [load_result(p) for p in paths]
    if not results:
        raise ResultError("no result files given")
    check_mixed(results)
    return results


# ------------------------------------------------------------------------------------------------
# setups and conflicts
# ------------------------------------------------------------------------------------------------
def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def setup_key(r: Result) -> str:
    """A string naming everything but the policy that a result's numbers depend on."""
    d, prov = r.data, r.provenance
    if r.kind == "sim":
        if is_equivalence(r):
            return _canon({"mode": "equivalence", "settings": r.typed.provenance.settings,
                           "seed": r.typed.provenance.seed})
        s = {k: v for k, v in d["settings"].items() if k != "policies"}
        return _canon(s)
    if r.kind in ("kl", "kl-layers"):
        s = dict(prov.get("settings") or {})
        for k in ("policies", "batch_size", "segment", "engine", "layout", "sr_seeds", "schema_version"):
            s.pop(k, None)
        s.setdefault("model", d["model"].get("name") if isinstance(d["model"], dict) else d["model"])
        s["doc_ids"] = d["data"].get("doc_ids")
        return _canon(s)
    if r.kind == "lmeval":
        # per task: handled by conflicts() on (task, policy); the setup is the model and run settings
        cfg = dict(prov["config"])
        for k in ("policies", "out", "tasks", "batch_size", "device", "n_boot", "stats_seed"):
            cfg.pop(k)
        return _canon(cfg)
    if r.kind == GENERATE_KIND:
        # the device and the run's settings other than which presets, batches and rows it timed
        s = r.typed.settings
        return _canon({"gpu": gpu_name(prov), "prompt": s.prompt, "new_tokens": s.new_tokens,
                       "plain_transformers_tokens": s.plain_transformers_tokens, "weights": s.weights})
    # benchmarks: the device and the shapes the benchmark ran at
    t = r.typed
    shape = {"bench-quant": lambda: t.shape, "bench-scan": lambda: {"T": t.T, "layers": d["layers"]},
             "bench-kl": lambda: {"model": t.model, "tokens": t.long_run.tokens if t.long_run else None},
             "bench-kernels": lambda: None}[r.kind]()
    return _canon({"gpu": gpu_name(prov), "shape": shape})


def policies_of(r: Result) -> list[tuple[str, str]]:
    """(scope, policy) pairs a result holds; two results of the same kind and setup must not share one."""
    d = r.data
    if r.kind == "sim":
        if is_equivalence(r):
            return [(arch, "equivalence") for arch in r.typed.results]
        return [("", p) for p in r.typed.results]
    if r.kind in ("kl", "kl-layers"):
        return [("", p) for p in d["results"]]
    if r.kind == "lmeval":
        out = []
        for task, e in r.typed.tasks.items():
            out.append((task, "fp32"))
            out += [(task, p) for p in e.policies]
        return out
    if r.kind == "bench-quant":
        return [("", k) for k in r.typed.kernels]
    if r.kind == "bench-scan":
        return sorted({(x.arch, x.policy) for x in r.typed.rows})
    if r.kind == GENERATE_KIND:
        return [(f"{x.preset}, batch {x.batch}", x.row) for x in r.typed.rows]
    return [("", "*")]  # other benchmarks: one file per setup


def check_mixed(results: list[Result]) -> None:
    """Raise ResultError for duplicates, conflicting results and smoke benchmarks (module docstring)."""
    seen: dict[str, Result] = {}
    for r in results:
        prev = seen.get(r.digest)
        if prev is not None:
            same = prev.path.resolve() == r.path.resolve()
            raise ResultError(f"{r.path}: given twice" + ("" if same else f" (identical to {prev.path})")
                              + "; give each result once")
        seen[r.digest] = r
    for r in results:
        if r.kind in (*BENCH_KINDS, GENERATE_KIND) and r.typed.provenance.smoke:
            raise ResultError(f"{r.path}: a smoke run of the benchmark (Triton interpreter, no GPU); its timings "
                              "are not measurements, so the report does not plot them. Run the benchmark on a GPU.")
    owner: dict[tuple, Result] = {}
    for r in results:
        key = setup_key(r)
        for scope, pol in policies_of(r):
            k = (r.kind, key, scope, pol)
            if k in owner:
                other = owner[k]
                noun = {"bench-quant": "kernel", "bench-scan": "policy", GENERATE_KIND: "row"}.get(r.kind, "policy")
                what = ("the same measurements" if pol == "*" else f"{noun} {pol!r}") + (f" ({scope})" if scope else "")
                raise ResultError(f"{r.path} and {other.path}: two {r.kind!r} results for {what} with the same "
                                  f"setup ({describe_setup(r)}); the report would have to pick one. Give one of them "
                                  "(or rerun both in one study).")
            owner[k] = r


def is_equivalence(r: Result) -> bool:
    """A ``sim --mode equivalence`` result (``sim_schema.SimEquivalenceResult``)."""
    from precision_lab.sim_schema import SimEquivalenceResult

    return isinstance(r.typed, SimEquivalenceResult)


def describe_setup(r: Result) -> str:
    prov = r.provenance
    if r.kind == "sim" and not is_equivalence(r):
        s = r.typed.settings
        return f"{s.arch}, {s.steps} steps, seed {s.seed}"
    if r.kind in ("kl", "kl-layers", "lmeval"):
        return f"model {model_name(r)}, data {data_name(r)}"
    return f"device {gpu_name(prov) or 'unknown'}"


# ------------------------------------------------------------------------------------------------
# provenance helpers shared by the sections
# ------------------------------------------------------------------------------------------------
def gpu_name(prov: dict) -> str | None:
    return (prov.get("device") or {}).get("gpu")


def device_str(prov: dict) -> str:
    dev = prov.get("device") or {}
    gpu = gpu_name(prov)
    if gpu:
        n = dev.get("gpu_count")
        return f"{gpu}" + (f" (×{n})" if n and n > 1 else "") + (f", CUDA {dev['cuda']}" if dev.get("cuda") else "")
    cpu = dev.get("cpu") or "unknown"
    return f"CPU ({cpu}" + (", Triton interpreter" if dev.get("triton_interpret") else "") + ")"


def model_name(r: Result) -> str | None:
    if r.kind == GENERATE_KIND:  # the presets it timed
        return ", ".join(dict.fromkeys(x.preset for x in r.typed.rows)) or None
    m = r.data.get("model", r.provenance.get("model"))
    if isinstance(m, dict):
        m = m.get("name")
    return None if m is None else str(m)


def data_name(r: Result) -> str | None:
    d = r.data
    if r.kind in ("kl", "kl-layers"):
        dd = d.get("data", {})
        return f"{dd.get('source')} ({dd.get('docs')} docs × {dd.get('tokens')} tokens, prefill {dd.get('prefill')})"
    if r.kind == "lmeval":
        cfg = r.typed.provenance.config
        src = "synthetic rows" if cfg.synthetic else (cfg.data_dir or "lm-eval task data")
        lim = cfg.limit
        return f"{', '.join(r.typed.tasks)} from {src}" + (f", limit {lim}" if lim is not None else "")
    if r.kind == "sim":
        return "synthetic random inputs"
    return None


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
