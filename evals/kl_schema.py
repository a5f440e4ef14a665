"""The layout of the KL driver's result files (``evals/kl.py``), versioned.

``summary.json`` of a KL run is ``kind: "kl"``. Two versions exist:

- **1** — every policy against the ``fp32`` run (``reference: "fp32"``); no floor. Files of this
  version are still read (``read_kl_summary`` lifts them into the version-2 layout with the floor
  marked absent), so reports built from them keep working.
- **2** — every policy against its *matched reference* (``StatePolicy.matched_reference``: the same
  arithmetic with fp32 storage), with the arithmetic-order floor of that reference (KL between the
  ``fp32`` run and the reference), each policy's KL set against its floor, and the KL against the
  ``fp32`` run kept beside it (``vs_fp32``).

A per-layer sensitivity run writes ``kind: "kl-layers"`` (version 1): each lossy policy in one SSM
layer at a time, the other layers on the policy's matched reference.

The TypedDicts below document the keys; they are checked by the tests against what the driver
writes, and the report reads files through ``read_kl_summary``.
"""
from __future__ import annotations

from typing import TypedDict

KL_SCHEMA_VERSION = 2
KL_READABLE_VERSIONS = (1, 2)
LAYERS_SCHEMA_VERSION = 1

WITHIN_FLOOR = "within floor"
CLEARS_FLOOR = "clears floor"


class Interval(TypedDict, total=False):
    delta: float                 # mean over documents of (policy − floor) per-document means
    ci95: list[float] | None     # 95 % paired percentile-bootstrap interval over documents


class FloorCheck(TypedDict, total=False):
    floor_mean: float            # mean KL(fp32 ‖ matched reference) over the same positions
    floor_ci95: list[float] | None
    excess: Interval             # the policy's KL minus its floor, paired over documents
    verdict: str                 # CLEARS_FLOOR when the excess interval lies above 0, else WITHIN_FLOOR


class Stats(TypedDict, total=False):
    mean: float                  # over all positions (documents have equal length)
    median: float
    q90: float
    q95: float
    q99: float
    max: float
    top1_agreement: float        # fraction of positions whose argmax equals the reference's


class Bucket(Stats, FloorCheck, total=False):
    lo: int                      # first length of the bucket (length 1 = first decode token)
    hi: int                      # last length of the bucket (inclusive)
    n_positions: int
    mean_over_docs: float        # mean of per-document means (the bootstrap's statistic)
    ci95: list[float] | None     # 95 % percentile-bootstrap interval, documents resampled
    n_docs: int
    ci_method: str


class Overall(Stats, FloorCheck, total=False):
    doc_mean_over_docs: float
    doc_ci95: list[float] | None
    doc_n_docs: int
    doc_ci_method: str
    nll: float                   # mean next-token NLL of the policy run (nats per token)
    nll_ci95: list[float] | None  # over documents
    nll_ref: float               # the same for the run it is compared with


class Comparison(TypedDict, total=False):
    overall: Overall
    buckets: dict[str, list[Bucket]]   # "log2" and "linear"


class PolicyResult(Comparison, total=False):
    reference: str                     # short_str of the matched reference
    lossless: bool
    vs_fp32: Comparison                # KL(fp32 ‖ policy): the unmatched comparison
    implementations: list[str] | None  # engine:implementation names that served the policy's rows
    arithmetic_matched: bool | None    # same implementations as the reference (formats aside)
    seeds: dict                        # SR seed spread (runs with several seeds)


class ReferenceResult(TypedDict, total=False):
    floor: Comparison                  # KL(fp32 ‖ reference): the arithmetic-order floor
    policies: list[str]
    implementations: list[str] | None


class KLSummary(TypedDict, total=False):
    kind: str                          # "kl"
    schema_version: int                # KL_SCHEMA_VERSION
    provenance: dict
    model: dict
    data: dict
    reference: str                     # "matched" (version 2) or "fp32" (version 1)
    base: str                          # "fp32": the run the floors are measured from
    policies: list[str]
    references: dict[str, ReferenceResult]
    results: dict[str, PolicyResult]
    layout: dict                       # {"name": "grouped" | "lockstep", "check": {...} | None}
    seed: int
    engine: dict
    length_definition: str
    timing: dict


def read_kl_summary(data: dict) -> dict:
    """A ``kind: "kl"`` summary in the version-2 layout (a version-1 file is lifted: each policy
    compared with ``fp32``, no floor, no verdicts). Raises ValueError for other versions."""
    version = data.get("schema_version")
    if version not in KL_READABLE_VERSIONS:
        raise ValueError(f"KL summary schema_version {version!r}; this version reads {KL_READABLE_VERSIONS}")
    if version == 2:
        return data
    out = dict(data)
    out["reference"] = "fp32"
    out["base"] = "fp32"
    out["references"] = {}
    out["results"] = {p: {**r, "reference": "fp32", "vs_fp32": None} for p, r in data["results"].items()}
    out.setdefault("layout", {"name": "lockstep", "check": None})
    return out


def has_floor(summary: dict) -> bool:
    """Whether a (read) KL summary carries floors and verdicts."""
    return summary.get("schema_version") == 2
