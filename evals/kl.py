"""KL-vs-length driver (docs/design.md §8): KL between a reference and each state policy per position, under
teacher forcing.

What is compared with what. Storage precision and arithmetic order are two different causes of a
logit difference: ``fp32`` (the unquantized recurrence, which the scan engines evaluate in chunks),
the conventional per-token step, and the ReplaySSM window evaluation compute the same sums in
different orders, and a bf16 model turns their last-bit differences into visible ones. So each
policy is compared with its **matched reference** (``StatePolicy.matched_reference``: the same
arithmetic with fp32 storage — ``conventional:F`` with ``conventional:fp32``, ``shared:F@Ln`` with
``shared:fp32@Ln``, ``split:H/F@Ln@fold=X`` with ``split:fp32/fp32@Ln@fold=X``), and a lossless
policy gives KL = 0 exactly. Each reference in turn is compared with the ``fp32`` run: that KL is
the **floor**, the size of the arithmetic-order effect alone. A policy's KL is reported beside its
floor; where the 95 % interval (over documents) of the excess over the floor does not lie above
zero, the effect is reported as *within floor*. KL(fp32 ‖ policy), the unmatched comparison, is
kept too (``vs_fp32``).

Rows. The ``fp32`` run, the references (each once, however many policies share it) and the policies
run on the same tokens and weights in one pass over the data, in row groups (``layout``):
``grouped`` (default) serves each group with its own forward per segment, which makes identical
computations give identical bits on every backend and records which implementation served each
group; ``lockstep`` serves all groups in one forward of ``G*B`` rows and adds a copy of the
``fp32`` group at the far end of the batch whose KL against the first (``layout.check``) measures
whether the backend treats all rows alike (on CPU it does not: see ``precision_lab.teacher_forced``).

Per position t of the decode part of the stream (t >= prefill), from fp32 logits in fp64,

    KL_t = Σ_v p_ref(v) (log p_ref(v) − log p_pol(v)),

top-1 agreement with the reference and each run's NLL of the true next token. "Length" is the number
of decode steps the state has taken when position t is predicted: ``length = t − prefill + 1``.
Statistics: mean/median/q90/q95/q99/max over positions, per log2 and linear length bucket; 95 %
percentile-bootstrap intervals resample *documents* (the unit that is independent), over the
per-document means; the excess over the floor is a paired bootstrap over documents.

Options: ``sr_seeds`` > 1 runs each stochastic-rounding policy with that many seeds and reports the
spread of its KL over seeds; ``per_layer`` runs each policy in one SSM layer at a time (the others
on its matched reference) and writes a ``kl-layers`` summary instead.

Output directory (``--out``):
    run.json                  the run's settings and fingerprint (a rerun must match it)
    batches/batch_NNNNN.npz   per-position values of one batch of documents, written atomically
                              when the batch completes: kl, agree [comparisons, docs, positions],
                              nll [rows, docs, positions]
    summary.json              kind "kl" (schema in ``evals/kl_schema.py``) or "kl-layers"
    kl_vs_length.png          mean KL per log2 length bucket with 95 % CIs over documents, floors dashed

Resuming: documents are processed in batches (by default as many as fit in
``DEFAULT_BATCH_TOKENS`` tokens, at least one), each written when complete. On a rerun, completed
batch files are verified (fingerprint, checksum, shapes), kept and listed in one log line; missing
batches are computed; a batch interrupted mid-way is recomputed from its start. A corrupted or
foreign file stops the run with a message naming it; nothing is overwritten. Data parallel:
``torchrun --nproc-per-node K`` gives batch k to rank k mod K; rank 0 merges. Batches have the same
composition in every layout, so the merged result equals the single-process one.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import sys
import time
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from .kl_schema import (
    CLEARS_FLOOR,
    KL_SCHEMA_VERSION,
    LAYERS_SCHEMA_VERSION,
    WITHIN_FLOOR,
    has_floor,
    read_kl_summary,
)

SCHEMA_VERSION = KL_SCHEMA_VERSION
# A batch of documents is the unit of checkpointing (and of data parallelism): by default as many
# documents as fit in this many tokens, at least one, so an interruption loses little work.
DEFAULT_BATCH_TOKENS = 2048
DEFAULT_POLICIES = ("conventional:bf16", "shared:nvfp4", "split:fp32/nvfp4", "split:fp16-sr/nvfp4")
LAYOUTS = ("grouped", "lockstep")
N_BOOT = 2000


@dataclass
class KLConfig:
    """Settings of a KL run (all of them but ``out``/``device``/``progress``/``plot`` enter the
    fingerprint)."""

    model: str = "tiny-nemotron-h"
    data: str = "default"
    docs: int = 4
    tokens: int = 1024
    prefill: int = 32
    policies: tuple[str, ...] = DEFAULT_POLICIES
    seed: int = 0
    batch_size: int | None = None  # documents per batch (None: DEFAULT_BATCH_TOKENS' worth; 0: all in one)
    segment: int = 512             # decode tokens per forward
    engine: str = "auto"
    dtype: str | None = None       # model weights (default: preset's / bf16 for checkpoints)
    model_seed: int = 0            # weight seed of presets
    skip_short: bool = False
    layout: str = "grouped"        # grouped | lockstep (module docstring)
    sr_seeds: int = 1              # seeds per stochastic-rounding policy (>1: seed spread)
    per_layer: bool = False        # one SSM layer at a time (a kl-layers summary)
    speaker: bool = False          # score next-speaker items of plays under teacher forcing (summary only)
    speaker_buckets: tuple[int, ...] = (256, 1024, 4096, 16384, 65536)
    out: str = "runs/kl"
    device: str = "auto"
    progress: bool = True
    plot: bool = True

    def normalized(self) -> KLConfig:
        from precision_lab.policy import StatePolicy

        pols = []
        for p in self.policies:
            s = StatePolicy.parse(p).short_str()
            if s != "fp32" and s not in pols:
                pols.append(s)
        if not pols:
            raise ValueError("no policy to compare with its reference (give e.g. --policies shared:nvfp4)")
        if self.prefill < 0 or self.prefill >= self.tokens:
            raise ValueError(f"--prefill must be in [0, tokens) = [0, {self.tokens}), got {self.prefill}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"--layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.sr_seeds < 1:
            raise ValueError(f"--sr-seeds must be >= 1, got {self.sr_seeds}")
        if self.batch_size is None:
            bs = max(1, DEFAULT_BATCH_TOKENS // self.tokens)
        elif self.batch_size < 0:
            raise ValueError(f"--batch-size must be >= 0 (0: all documents in one batch), got {self.batch_size}")
        else:
            bs = self.batch_size or self.docs
        return KLConfig(**{**asdict(self), "policies": tuple(pols), "batch_size": min(bs, self.docs)})


def _fingerprint_fields(cfg: KLConfig, engine: str) -> dict:
    return {"model": cfg.model, "model_seed": cfg.model_seed, "dtype": cfg.dtype, "data": cfg.data,
            "docs": cfg.docs, "tokens": cfg.tokens, "prefill": cfg.prefill, "policies": list(cfg.policies),
            "seed": cfg.seed, "batch_size": cfg.batch_size, "segment": cfg.segment, "engine": engine,
            "skip_short": cfg.skip_short, "layout": cfg.layout, "sr_seeds": cfg.sr_seeds,
            "per_layer": cfg.per_layer, "schema_version": SCHEMA_VERSION}


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


class ResultFileError(ValueError):
    """A file in the output directory is corrupted or belongs to another run."""


# ------------------------------------------------------------------------------------------------
# the rows of a run and what is compared with what
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One row group: what every SSM layer of the model runs.

    role:   "base" (the fp32 run), "reference", "policy", "seed" (a further SR seed of a policy),
            "layer" (a policy in one SSM layer), "check" (lockstep: a copy of the base group)
    policy: the policy the row is about
    layer:  "layer" rows: the position (in SSM-layer order) of the only layer that runs ``policy``;
            the others run ``others`` (the policy's matched reference)
    """

    role: str
    policy: object  # StatePolicy
    layer: int | None = None
    others: object | None = None

    def layer_policies(self, n_layers: int) -> list:
        if self.layer is None:
            return [self.policy] * n_layers
        return [self.policy if j == self.layer else self.others for j in range(n_layers)]

    @property
    def name(self) -> str:
        s = self.policy.short_str()
        if self.role == "seed":
            s += f" (seed {self.policy.seed})"
        if self.layer is not None:
            s += f" (SSM layer {self.layer} only)"
        if self.role in ("reference", "check"):
            s = f"{self.role}: {s}"
        return s


@dataclass
class Plan:
    """Rows and comparisons (``pairs[c] = (a, b)``: KL(p_a ‖ p_b), top-1 of b against a)."""

    rows: list[Row]
    pairs: list[tuple[int, int]]
    ref: dict[int, int]            # policy / seed / layer row -> the row of its matched reference

    def pair_index(self, a: int, b: int) -> int:
        return self.pairs.index((a, b))

    def groups(self, n_layers: int) -> list[list]:
        return [r.layer_policies(n_layers) for r in self.rows]


def build_plan(policies, *, seed: int = 0, sr_seeds: int = 1, layout: str = "grouped",
               per_layer_of: int | None = None) -> Plan:
    """The rows and comparisons of a run.

    policies:     policy strings (fp32 excluded; each is run with ``seed``)
    sr_seeds:     >1: each stochastic-rounding policy also runs with seeds seed+1 .. seed+sr_seeds-1
    layout:       "lockstep" adds the layout check (a copy of the base group, last)
    per_layer_of: number of SSM layers for a per-layer run (each policy in each layer alone, plus
                  in every layer), None for a plain run
    Rows: [fp32, references (deduplicated), policies (+ seeds / per-layer rows), check]. Pairs:
    (fp32, reference) floors; (reference, row) for every policy-like row; (fp32, policy) for the
    unmatched comparison; (fp32, check).
    """
    from precision_lab.policy import StatePolicy

    pols = [StatePolicy.parse(p, seed=seed) for p in policies]
    rows = [Row("base", StatePolicy.parse("fp32", seed=seed))]
    ref_of: dict[str, int] = {"fp32": 0}
    pairs: list[tuple[int, int]] = []
    ref: dict[int, int] = {}
    for p in pols:
        r = p.matched_reference()
        if r.short_str() not in ref_of:
            ref_of[r.short_str()] = len(rows)
            rows.append(Row("reference", r))
            pairs.append((0, len(rows) - 1))
    for p in pols:
        ri = ref_of[p.matched_reference().short_str()]
        variants = [p]
        if sr_seeds > 1 and p.is_stochastic:
            variants += [StatePolicy.parse(p, seed=(seed + k) % 2**32) for k in range(1, sr_seeds)]
        for k, v in enumerate(variants):
            rows.append(Row("policy" if k == 0 else "seed", v))
            ref[len(rows) - 1] = ri
            pairs.append((ri, len(rows) - 1))
            if k == 0:
                pairs.append((0, len(rows) - 1))
        if per_layer_of is not None:
            for j in range(per_layer_of):
                rows.append(Row("layer", p, layer=j, others=rows[ri].policy))
                ref[len(rows) - 1] = ri
                pairs.append((ri, len(rows) - 1))
    if layout == "lockstep":
        rows.append(Row("check", rows[0].policy))
        pairs.append((0, len(rows) - 1))
    return Plan(rows, pairs, ref)


# ------------------------------------------------------------------------------------------------
# per-position KL from logits
# ------------------------------------------------------------------------------------------------
def kl_pairs(logits: torch.Tensor, pairs, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-position statistics of the comparisons ``pairs`` between G runs.

    logits:  [G, B, T, V] fp32
    pairs:   [(a, b), ...]: KL(p_a ‖ p_b) and whether argmax b == argmax a
    targets: [B, T'] next-token ids (T' <= T; the stream's last position has no next token) or None
    Returns kl [C, B, T] fp64, agree [C, B, T] bool, and with targets nll [G, B, T'] fp64 and hit
    [G, B, T'] bool (the run's argmax is the true next token).
    Identical logits give KL exactly 0 (the difference of equal log-probabilities is 0).
    """
    logp = torch.log_softmax(logits.double(), dim=-1)
    top = logits.argmax(-1)
    kl = torch.stack([(logp[a].exp() * (logp[a] - logp[b])).sum(-1) for a, b in pairs])
    out = {"kl": kl.clamp_min(0.0),  # tiny negative values are fp64 rounding
           "agree": torch.stack([top[b] == top[a] for a, b in pairs])}
    if targets is not None:
        n = targets.shape[1]
        idx = targets.unsqueeze(0).unsqueeze(-1).expand(logp.shape[0], *targets.shape, 1)
        out["nll"] = -logp[:, :, :n].gather(-1, idx).squeeze(-1)
        out["hit"] = top[:, :, :n] == targets.unsqueeze(0)
    return out


def kl_from_logits(logits: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-position statistics of G runs against run 0: kl, agree [G-1, B, T], nll [G, B, T']."""
    return kl_pairs(logits, [(0, g) for g in range(1, logits.shape[0])], targets)


def _chunk_tokens(rows: int, vocab: int, budget_bytes: float) -> int:
    # log_softmax in fp64 holds ~3 copies of [rows, chunk, vocab]
    return max(1, int(budget_bytes // (rows * vocab * 8 * 3)))


# ------------------------------------------------------------------------------------------------
# batch files
# ------------------------------------------------------------------------------------------------
def _write_npz_atomic(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    buf = io.BytesIO()
    digest = hashlib.sha256()
    for k in sorted(arrays):
        digest.update(k.encode())
        digest.update(np.ascontiguousarray(arrays[k]).tobytes())
    meta = {**meta, "sha256": digest.hexdigest()}
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)


def read_batch(path: Path, fingerprint: str) -> dict:
    """Load and verify one batch file; raises ResultFileError if corrupted or foreign."""
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        meta = json.loads(bytes(data.pop("meta")).decode())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, EOFError) as e:
        raise ResultFileError(f"{path}: corrupted result file ({type(e).__name__}: {e}); it was not modified. "
                              "Delete it to recompute that batch.") from e
    if meta.get("fingerprint") != fingerprint:
        raise ResultFileError(f"{path}: belongs to another run (fingerprint {meta.get('fingerprint')} != "
                              f"{fingerprint}); it was not modified. Use another --out directory.")
    digest = hashlib.sha256()
    for k in sorted(data):
        digest.update(k.encode())
        digest.update(np.ascontiguousarray(data[k]).tobytes())
    if digest.hexdigest() != meta.get("sha256"):
        raise ResultFileError(f"{path}: checksum mismatch (corrupted); it was not modified. Delete it to recompute "
                              "that batch.")
    return {"meta": meta, **data}


# ------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------
def log2_buckets(n: int) -> list[tuple[int, int]]:
    """[lo, hi) length ranges 1-1, 2-3, 4-7, ... covering lengths 1..n."""
    out, lo = [], 1
    while lo <= n:
        out.append((lo, min(2 * lo, n + 1)))
        lo *= 2
    return out


def linear_buckets(n: int, count: int = 8) -> list[tuple[int, int]]:
    """``count`` equal-width [lo, hi) length ranges covering 1..n (fewer if n < count)."""
    count = max(1, min(count, n))
    edges = [1 + (i * n) // count for i in range(count + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _stats(x: np.ndarray) -> dict:
    if x.size == 0:
        return {}
    q = np.quantile(x, [0.5, 0.9, 0.95, 0.99])
    return {"mean": float(x.mean()), "median": float(q[0]), "q90": float(q[1]), "q95": float(q[2]),
            "q99": float(q[3]), "max": float(x.max())}


def doc_bootstrap(per_doc: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Mean over documents with a 95 % percentile-bootstrap interval.

    per_doc: [D] one value per document (e.g. its mean KL over a length bucket). Documents are
    resampled with replacement (``n_boot`` resamples, fixed ``seed``, so reruns agree); positions
    within a document are never resampled on their own: they are not independent. Percentiles of
    means of non-negative values stay non-negative, which keeps the interval drawable on a log
    axis. ``ci95`` is None with fewer than 2 documents.
    """
    per_doc = np.asarray(per_doc, dtype=np.float64)
    n = per_doc.size
    m = float(per_doc.mean())
    if n < 2:
        return {"mean_over_docs": m, "ci95": None, "n_docs": int(n)}
    rng = np.random.default_rng(seed)
    means = per_doc[rng.integers(0, n, size=(n_boot, n))].mean(1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"mean_over_docs": m, "ci95": [float(lo), float(hi)], "n_docs": int(n), "ci_method": "bootstrap-percentile"}


_ci_over_docs = doc_bootstrap


def floor_check(per_doc: np.ndarray, floor_per_doc: np.ndarray) -> dict:
    """A policy's per-document KL set against its floor's on the same positions.

    Returns ``floor_mean``, ``floor_ci95`` (bootstrap over documents), ``excess`` (mean over
    documents of policy − floor, with a paired 95 % bootstrap interval: both values of a document
    are drawn together) and ``verdict``: CLEARS_FLOOR when the excess interval lies entirely above
    0, WITHIN_FLOOR otherwise. With one document there is no interval and the verdict compares the
    two means.
    """
    from .stats import paired_bootstrap

    per_doc = np.asarray(per_doc, np.float64)
    floor_per_doc = np.asarray(floor_per_doc, np.float64)
    fb = doc_bootstrap(floor_per_doc)
    out = {"floor_mean": fb["mean_over_docs"], "floor_ci95": fb["ci95"]}
    if per_doc.size >= 2:
        pb = paired_bootstrap(floor_per_doc, per_doc, n_boot=N_BOOT, seed=0)
        out["excess"] = {"delta": pb["delta"], "ci95": [pb["ci_low"], pb["ci_high"]]}
        out["verdict"] = CLEARS_FLOOR if pb["ci_low"] > 0 else WITHIN_FLOOR
    else:
        delta = float(per_doc.mean() - floor_per_doc.mean())
        out["excess"] = {"delta": delta, "ci95": None}
        out["verdict"] = CLEARS_FLOOR if delta > 0 else WITHIN_FLOOR
    return out


def _doc_nll(nll: np.ndarray) -> np.ndarray:
    """Per-document mean NLL over the positions that have a next token (the last one has none)."""
    return np.array([np.nanmean(row) if np.isfinite(row).any() else np.nan for row in nll])


def _resampling_units(x: np.ndarray) -> np.ndarray:
    """[D, T] per-position values -> [D] per-document means: the units the bootstrap resamples."""
    return x.mean(axis=1)


def summarize_comparison(kl: np.ndarray, agree: np.ndarray, nll: np.ndarray | None = None,
                         nll_ref: np.ndarray | None = None, floor: np.ndarray | None = None,
                         linear_count: int = 8) -> dict:
    """Statistics of one comparison over D documents x T positions (length of position j is j+1).

    kl, agree: [D, T]; nll, nll_ref: [D, T] next-token NLL of the compared run and of its reference
    (NaN where there is no next token); floor: [D, T] the floor's KL on the same positions, or None.
    Returns {"overall": {...}, "buckets": {"log2": [...], "linear": [...]}} (kl_schema.Comparison).
    """
    D, T = kl.shape
    overall = {**_stats(kl.ravel()), "top1_agreement": float(agree.mean()),
               **{f"doc_{k}": v for k, v in doc_bootstrap(_resampling_units(kl)).items()}}
    if nll is not None:
        per = _doc_nll(nll)
        overall["nll"] = float(np.nanmean(nll))
        overall["nll_ci95"] = doc_bootstrap(per)["ci95"]
    if nll_ref is not None:
        overall["nll_ref"] = float(np.nanmean(nll_ref))
    if floor is not None:
        overall.update(floor_check(_resampling_units(kl), _resampling_units(floor)))
    buckets = {}
    for name, bks in (("log2", log2_buckets(T)), ("linear", linear_buckets(T, linear_count))):
        rows = []
        for lo, hi in bks:
            sl = slice(lo - 1, hi - 1)
            row = {"lo": lo, "hi": hi - 1, "n_positions": int(kl[:, sl].size), **_stats(kl[:, sl].ravel()),
                   "top1_agreement": float(agree[:, sl].mean()), **doc_bootstrap(_resampling_units(kl[:, sl]))}
            if floor is not None:
                row.update(floor_check(_resampling_units(kl[:, sl]), _resampling_units(floor[:, sl])))
            rows.append(row)
        buckets[name] = rows
    return {"overall": overall, "buckets": buckets}


def summarize(kl: np.ndarray, agree: np.ndarray, nll: np.ndarray, policies: list[str],
              linear_count: int = 8) -> dict:
    """Per-policy statistics against one reference (row 0). kl, agree: [P, D, T]; nll: [P+1, D, T]
    (row 0 = reference). Length of position j is j + 1."""
    return {pol: summarize_comparison(kl[i], agree[i], nll[i + 1], nll[0], linear_count=linear_count)
            for i, pol in enumerate(policies)}


def _strip_counts(name: str) -> str:
    """An implementation name without its parenthesised details (token counts, chunk sizes), so that
    two rows served by the same code compare equal whatever their formats."""
    prev = None
    while prev != name:
        prev, name = name, re.sub(r"\([^()]*\)", "", name)
    return name.strip()


def arithmetic_matched(policy_impls, reference_impls) -> bool | None:
    """Whether a policy's rows and its reference's were served by the same code (None: unknown)."""
    if not policy_impls or not reference_impls:
        return None
    return {_strip_counts(n) for n in policy_impls} == {_strip_counts(n) for n in reference_impls}


def _seed_spread(entries: list[tuple[int, dict]]) -> dict:
    seeds = [s for s, _ in entries]
    means = [e["overall"]["mean"] for _, e in entries]
    return {"seeds": seeds, "mean": means, "doc_ci95": [e["overall"].get("doc_ci95") for _, e in entries],
            "log2_means": [[b["mean"] for b in e["buckets"]["log2"]] for _, e in entries],
            "min": float(min(means)), "max": float(max(means)), "spread": float(max(means) - min(means)),
            "std": float(np.std(means, ddof=1)) if len(means) > 1 else 0.0}


def summarize_plan(plan: Plan, KL: np.ndarray, AG: np.ndarray, NLL: np.ndarray,
                   served: list[dict] | None = None, linear_count: int = 8) -> dict:
    """``references`` and ``results`` of a version-2 summary (or of a kl-layers summary when the plan
    has per-layer rows) from merged per-position arrays: KL, AG [C, D, T]; NLL [G, D, T]."""
    rows = plan.rows
    impl = (lambda i: sorted(served[i])) if served else (lambda i: None)
    zero = np.zeros(KL.shape[1:])

    def floor_of(ri: int) -> np.ndarray:
        return zero if ri == 0 else KL[plan.pair_index(0, ri)]

    references: dict[str, dict] = {}
    for ri, r in enumerate(rows):
        if r.role == "reference":
            c = plan.pair_index(0, ri)
            references[r.policy.short_str()] = {
                "floor": summarize_comparison(KL[c], AG[c], NLL[ri], NLL[0], linear_count=linear_count),
                "policies": [], "implementations": impl(ri)}
    results: dict[str, dict] = {}
    per_layer = any(r.role == "layer" for r in rows)
    for i, r in enumerate(rows):
        if r.role != "policy":
            continue
        name = r.policy.short_str()
        ri = plan.ref[i]
        c = plan.pair_index(ri, i)
        entry = summarize_comparison(KL[c], AG[c], NLL[i], NLL[ri], floor_of(ri), linear_count)
        ref_name = rows[ri].policy.short_str()
        if ref_name in references:
            references[ref_name]["policies"].append(name)
        head = {"reference": ref_name, "lossless": r.policy.is_lossless, "implementations": impl(i),
                "arithmetic_matched": arithmetic_matched(impl(i), impl(ri))}
        if per_layer:
            layers = []
            for k, rk in enumerate(rows):
                if rk.role == "layer" and rk.policy == r.policy:
                    ck = plan.pair_index(ri, k)
                    layers.append({"layer": rk.layer, **summarize_comparison(
                        KL[ck], AG[ck], NLL[k], NLL[ri], floor_of(ri), linear_count)})
            results[name] = {**head, "all_layers": entry, "per_layer": layers}
            continue
        c0 = plan.pair_index(0, i)
        entry["vs_fp32"] = summarize_comparison(KL[c0], AG[c0], NLL[i], NLL[0], linear_count=linear_count)
        seeds = [(r.policy.seed, entry)]
        for k, rk in enumerate(rows):
            if rk.role == "seed" and rk.policy.short_str() == name:
                ck = plan.pair_index(ri, k)
                seeds.append((rk.policy.seed, summarize_comparison(KL[ck], AG[ck], NLL[k], NLL[ri],
                                                                   linear_count=linear_count)))
        if len(seeds) > 1:
            entry["seeds"] = _seed_spread(seeds)
        results[name] = {**head, **entry}
    return {"references": references, "results": results}


# ------------------------------------------------------------------------------------------------
# text table and figure
# ------------------------------------------------------------------------------------------------
def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.2e}, {ci[1]:.2e}]" if ci else "-"


def format_table(summary: dict) -> str:
    """A plain-text table: mean KL per log2 length bucket, overall mean, the floor and the verdict,
    top-1 agreement and NLL, per policy."""
    s = read_kl_summary(summary)
    pols = s["policies"]
    res = s["results"]
    buckets = res[pols[0]]["buckets"]["log2"]
    heads = [f"{b['lo']}-{b['hi']}" if b['hi'] > b['lo'] else f"{b['lo']}" for b in buckets]
    w = max(len(p) for p in pols) + 2
    floor = has_floor(s)
    against = "its matched reference" if floor else "fp32"
    lines = [f"mean KL(reference || policy) by generated length, reference = {against} ({s['data']['docs']} docs x "
             f"{s['data']['decode_tokens']} decode tokens, model {s['model']['name']})",
             "policy".ljust(w) + "".join(h.rjust(10) for h in heads) + "      mean"
             + ("     floor  verdict     " if floor else "") + "    top1      NLL"]
    for p in pols:
        r = res[p]
        cells = "".join(f"{b['mean']:10.2e}" for b in r["buckets"]["log2"])
        o = r["overall"]
        fl = f"  {o['floor_mean']:9.2e}  {o['verdict']:<12}" if floor else ""
        nll = o.get("nll")
        lines.append(p.ljust(w) + cells + f"  {o['mean']:9.2e}" + fl + f"  {o['top1_agreement']:6.4f}"
                     + (f"  {nll:7.4f}" if nll is not None else ""))
    if floor:
        lines.append("floor = KL(fp32 || matched reference): the arithmetic-order effect alone; "
                     f"'{WITHIN_FLOOR}': the 95% interval over documents of KL - floor does not lie above 0")
        for ref, e in s["references"].items():
            lines.append(f"  reference {ref}: floor mean {e['floor']['overall']['mean']:.3e} "
                         f"(policies: {', '.join(e['policies'])})")
        bad = [p for p in pols if res[p].get("arithmetic_matched") is False]
        if bad:
            lines.append("NOT arithmetic-matched (served by other code than the reference, so the KL mixes storage "
                         "and summation-order effects and the floor does not bound the latter): " + ", ".join(bad))
        chk = (s.get("layout") or {}).get("check")
        if chk:
            lines.append(f"layout check (lockstep, fp32 group copied to the far end of the batch): max KL "
                         f"{chk['max_kl']:.3e} ({'exact' if chk['exact'] else 'NOT exact: rows differ by position'})")
    return "\n".join(lines)


def format_layers_table(summary: dict) -> str:
    """A plain-text table of a kl-layers summary: per SSM layer, the mean KL when only that layer runs
    the policy (the others its matched reference), with 95 % intervals over documents; the policy in
    every layer and its floor below. ``(within floor)`` marks an effect that does not clear the floor."""
    pols = summary["policies"]
    res = summary["results"]
    layers = summary["ssm_layers"]
    w = 24
    lines = [f"mean KL(matched reference || policy in one SSM layer) ({summary['data']['docs']} docs x "
             f"{summary['data']['decode_tokens']} decode tokens, model {summary['model']['name']})",
             "SSM layer".ljust(28) + "".join(p.rjust(w + 16) for p in pols)]

    def cell(o: dict) -> str:
        mark = "" if o.get("verdict") != WITHIN_FLOOR else " (within floor)"
        return f"{o['mean']:.3e} {_fmt_ci(o.get('doc_ci95'))}{mark}".rjust(w + 16)

    for L in layers:
        j = L["index"]
        label = f"{j} ({L['module']}, {L['kind']})"
        lines.append(label.ljust(28)[:28] + "".join(cell(next(x for x in res[p]["per_layer"] if x["layer"] == j)["overall"])
                                                    for p in pols))
    lines.append("all layers".ljust(28) + "".join(cell(res[p]["all_layers"]["overall"]) for p in pols))
    lines.append("floor".ljust(28) + "".join(f"{res[p]['all_layers']['overall']['floor_mean']:.3e}".rjust(w + 16)
                                             for p in pols))
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    """Mean KL per log2 length bucket with 95 % CI bands over documents; each policy's floor dashed
    in the policy's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = read_kl_summary(summary)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-")]
    for i, p in enumerate(s["policies"]):
        r = s["results"][p]
        rows = r["buckets"]["log2"]
        x = [math.sqrt(b["lo"] * b["hi"]) for b in rows]
        y = [max(b["mean"], 1e-16) for b in rows]
        marker, ls = styles[i % len(styles)]
        line, = ax.plot(x, y, marker=marker, linestyle=ls, label=p)  # distinct styles: curves may coincide
        lo = [max(b["ci95"][0], 1e-16) if b.get("ci95") else v for b, v in zip(rows, y)]
        hi = [b["ci95"][1] if b.get("ci95") else v for b, v in zip(rows, y)]
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
        if has_floor(s) and any(b.get("floor_mean", 0) > 0 for b in rows):
            ax.plot(x, [max(b["floor_mean"], 1e-16) for b in rows], color=line.get_color(), lw=0.8, ls=(0, (2, 2)))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length (decode steps, log2 buckets)")
    ax.set_ylabel("mean KL(reference || policy) [nats]")
    ref = "matched reference; floors dotted" if has_floor(s) else "fp32 state"
    ax.set_title(f"{s['model']['name']}: KL vs length against the {ref} ({s['data']['docs']} docs)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# the stream
# ------------------------------------------------------------------------------------------------
def kl_stream(model, toks: torch.Tensor, *, n_groups: int | None = None, prefill: int, segment: int, engine: str,
              seq_ids: torch.Tensor | None = None, budget_bytes: float = 2e9, progress=None,
              max_seconds: float | None = None, groups: list[list] | None = None,
              pairs: list[tuple[int, int]] | None = None, layout: str = "lockstep",
              served: list[Counter] | None = None, hits: list | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-force one batch of documents through an adapted model and return per-position arrays
    over the decode part: kl, agree [C, B, N-prefill] and nll [G, B, N-prefill] (NaN where there is
    no next token, or past ``max_seconds``: the stream then stops early after the segment that
    crossed it).

    groups: per row group, one policy per SSM layer (``Plan.groups``); None: the G = ``n_groups``
            policies the model's mixers hold (lockstep only)
    pairs:  comparisons (a, b) (default: every group against group 0)
    layout: "grouped" (one forward per group) or "lockstep" (one forward of G*B rows)
    served: a list that receives, per group, the implementations that served it (grouped only)
    hits:   a list that receives one array [G, B, N-prefill] (bool): whether each run's argmax is the
            true next token
    """
    from precision_lab.models import policy_mixers
    from precision_lab.teacher_forced import lm_logits, run_grouped
    from precision_lab.teacher_forced import run as tf_run

    B, N = toks.shape
    G = len(groups) if groups is not None else n_groups
    if G is None:
        raise ValueError("kl_stream needs n_groups or groups")
    pairs = pairs if pairs is not None else [(0, g) for g in range(1, G)]
    if layout == "grouped":
        if groups is None:
            raise ValueError("the grouped layout needs the row groups (groups=...)")
        stream = run_grouped(model, toks, groups, prefill_len=prefill, segment_len=segment, engine=engine,
                             seq_ids=seq_ids, progress=progress)
    elif layout == "lockstep":
        if groups is not None:
            for j, m in enumerate(policy_mixers(model)):
                m.set_policies([g[j] for g in groups])
        stream = tf_run(model, toks, prefill_len=prefill, segment_len=segment, engine=engine, seq_ids=seq_ids,
                        progress=progress)
    else:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    decode_n = N - prefill
    C = len(pairs)
    kl = np.full((C, B, decode_n), np.nan, np.float64)
    agree = np.zeros((C, B, decode_n), np.bool_)
    nll = np.full((G, B, decode_n), np.nan, np.float64)
    hit = np.zeros((G, B, decode_n), np.bool_)
    vocab = model.get_output_embeddings().weight.shape[0]
    device = next(model.parameters()).device
    targets = toks.to(device)
    step = _chunk_tokens(G * B, vocab, budget_bytes)
    if served is not None:
        served[:] = [Counter() for _ in range(G)]
    t_start = time.perf_counter()
    for seg in stream:
        if served is not None and seg.served is not None:
            for acc, calls in zip(served, seg.served):
                acc.update(calls)
        # logits at stream position t predict token t+1; the decode part starts at t = prefill
        lo = max(seg.start, prefill)
        if lo < seg.end:
            h = seg.hidden[:, lo - seg.start:]
            for c0 in range(0, h.shape[1], step):
                hc = h[:, c0:c0 + step]
                t0, t1 = lo + c0, lo + c0 + hc.shape[1]
                with torch.inference_mode():
                    # one projection per group: identical rows give identical logits on any backend
                    logits = torch.stack([lm_logits(model, hc[g * B:(g + 1) * B]) for g in range(G)])
                    r = kl_pairs(logits, pairs, targets[:, t0 + 1:min(t1 + 1, N)])
                j0, j1 = t0 - prefill, t1 - prefill
                kl[:, :, j0:j1] = r["kl"].cpu().numpy()
                agree[:, :, j0:j1] = r["agree"].cpu().numpy()
                nll[:, :, j0:j0 + r["nll"].shape[2]] = r["nll"].cpu().numpy()
                hit[:, :, j0:j0 + r["hit"].shape[2]] = r["hit"].cpu().numpy()
        if max_seconds is not None and time.perf_counter() - t_start > max_seconds:
            break
    if hits is not None:
        hits[:] = [hit]
    return kl, agree, nll


# ------------------------------------------------------------------------------------------------
# next-speaker items scored under teacher forcing
# ------------------------------------------------------------------------------------------------
def speaker_items(docs, tok, *, prefill: int, tokens: int, buckets) -> list[dict]:
    """Speaker tags (``tasks/next_speaker.speaker_turns``) of the run's documents whose name and
    closing period lie within the decode part of the stream: {"doc", "pos" (index of the name's
    first token), "n" (tokens of the name and its period), "name", "bucket"}. Token positions come
    from the tokenizer's character offsets; a tag whose name does not start and end on token
    boundaries is left out."""
    import bisect

    from .tasks.next_speaker import bucket_edges, bucket_label, speaker_turns

    edges = bucket_edges(buckets)
    out = []
    for d_i, d in enumerate(docs):
        try:
            enc = tok(d.text, add_special_tokens=False, return_offsets_mapping=True)
        except (NotImplementedError, ValueError, TypeError):
            return []  # a tokenizer without character offsets: positions cannot be located
        ids, offs = enc["input_ids"], enc["offset_mapping"]
        if ids[:tokens] != d.tokens.tolist():
            continue  # not the tokens the run used (another tokenizer call would be needed)
        starts = [a for a, _ in offs]
        for t in speaker_turns(d.text):
            pos = bisect.bisect_left(starts, t.offset)
            end = bisect.bisect_left(starts, t.offset + len(t.name) + 1)   # first token after the period
            n = end - pos
            if pos >= len(starts) or starts[pos] != t.offset or pos - 1 < prefill or end > tokens:
                continue
            hit = [bucket_label(lo, hi) for lo, hi in edges if lo <= pos < hi]
            out.append({"doc": d_i, "pos": pos, "n": n, "name": t.name,
                        "bucket": hit[0] if hit else f"<{edges[0][0]}"})
    return out


def speaker_summary(plan: Plan, HIT: np.ndarray, docs, tok, *, prefill: int, buckets) -> dict | None:
    """Exact match of the next speaker's name under teacher forcing: an item is right for a run when
    the run's argmax is the true token at every position of the name and its closing period (what
    greedy generation of the name would produce), after the whole play up to the tag has been
    decoded under the run's policy. Each policy against its matched reference and against fp32,
    paired over items, overall and per context-length bucket (``stats.compare_runs``,
    ``stats.compare_by_bucket``). None when the documents hold no speaker tags."""
    from . import stats as st

    T = HIT.shape[2]
    items = speaker_items(docs, tok, prefill=prefill, tokens=T + prefill, buckets=buckets)
    if not items:
        return None
    # positions t = pos-1 .. pos+n-2 predict the name and the period; decode index j = t - prefill
    scores = np.array([[float(HIT[g, it["doc"], it["pos"] - 1 - prefill:it["pos"] - 1 - prefill + it["n"]].all())
                        for it in items] for g in range(HIT.shape[0])])
    labels = [it["bucket"] for it in items]

    def compare(a: int, b: int) -> dict:
        out = st.compare_runs(scores[a], scores[b], n_boot=N_BOOT)
        out["by_bucket"] = st.compare_by_bucket(labels, scores[a], scores[b], n_boot=N_BOOT)
        return out

    fp32_b = st.compare_by_bucket(labels, scores[0], scores[0], n_boot=1)
    res = {"n_items": len(items), "definition": "greedy exact match of the name and its closing period under "
                                                "teacher forcing (every context token decoded under the policy)",
           "fp32": {"accuracy": float(scores[0].mean()),
                    "by_bucket": [{"bucket": b["bucket"], "n": b["n"], "accuracy": b["accuracy"]} for b in fp32_b]},
           "references": {}, "policies": {}}
    for i, r in enumerate(plan.rows):
        if r.role == "reference":
            res["references"][r.policy.short_str()] = {"accuracy": float(scores[i].mean()), "vs_fp32": compare(0, i)}
        elif r.role == "policy":
            ri = plan.ref[i]
            res["policies"][r.policy.short_str()] = {
                "reference": plan.rows[ri].policy.short_str(), "accuracy": float(scores[i].mean()),
                "vs_reference": compare(ri, i), "vs_fp32": compare(0, i)}
    return res


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------
def _dist_info() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return rank, world, local


def _pick_device(spec: str, local_rank: int) -> torch.device:
    if spec == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(spec)


def _check_run_file(out: Path, run_meta: dict) -> None:
    path = out / "run.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ResultFileError(f"{path}: corrupted run file ({e}); it was not modified. Use another --out "
                                  "directory or delete it.") from e
        if old.get("kind") != "kl-run" or old.get("fingerprint") != run_meta["fingerprint"]:
            diff = {k: (old.get("settings", {}).get(k), v) for k, v in run_meta["settings"].items()
                    if old.get("settings", {}).get(k) != v}
            raise ResultFileError(f"{out} holds a different run (settings that differ, old -> new: {diff}); nothing "
                                  "was overwritten. Use another --out directory.")
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(run_meta, indent=1))
        os.replace(tmp, path)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _spans(ks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start = [], ks[0]
    for a, b in zip(ks, [*ks[1:], None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def run_kl(cfg: KLConfig, *, rank: int | None = None, world: int | None = None,
           stop_after_batches: int | None = None, log=print, model_and_tokenizer=None) -> dict | None:
    """Run (or resume) a KL study; returns the summary dict on the merging rank, else None.

    rank/world: this process's share of the batches (default: torchrun's environment)
    stop_after_batches: compute at most this many batches and return (simulates an interruption)
    model_and_tokenizer: an already loaded ``(model, tokenizer)`` for ``cfg.model`` (a study reuses
        one model for several runs); its policies are replaced
    """
    from precision_lab.data import load_documents
    from precision_lab.models import apply_policy, load_model, policy_mixers, ssm_modules
    from precision_lab.teacher_forced import resolve_engine

    cfg = cfg.normalized()
    env_rank, env_world, local = _dist_info()
    rank = env_rank if rank is None else rank
    world = env_world if world is None else world
    device = _pick_device(cfg.device, local)
    engine = resolve_engine(cfg.engine, device)
    fp_fields = _fingerprint_fields(cfg, engine)
    out = Path(cfg.out)

    if model_and_tokenizer is None:
        model, tok = load_model(cfg.model, dtype=cfg.dtype, device=device, seed=cfg.model_seed)
    else:
        model, tok = model_and_tokenizer
        device = next(model.parameters()).device
    apply_policy(model, "fp32", engine=engine, seed=cfg.seed)
    n_ssm = len(policy_mixers(model))
    plan = build_plan(cfg.policies, seed=cfg.seed, sr_seeds=cfg.sr_seeds, layout=cfg.layout,
                      per_layer_of=n_ssm if cfg.per_layer else None)
    groups = plan.groups(n_ssm)
    docs = load_documents(cfg.data, tok, n_docs=cfg.docs, tokens=cfg.tokens, skip_short=cfg.skip_short)
    # The fingerprint covers every setting that changes results and the exact tokens of each document.
    doc_hash = _hash([hashlib.sha256(d.tokens.numpy().tobytes()).hexdigest() for d in docs])
    settings = {**fp_fields, "doc_tokens_sha": doc_hash}
    fingerprint = _hash(settings)
    run_meta = {"kind": "kl-run", "schema_version": SCHEMA_VERSION, "fingerprint": fingerprint,
                "settings": settings}
    if rank == 0:
        _check_run_file(out, run_meta)
    else:
        out.mkdir(parents=True, exist_ok=True)
    bdir = out / "batches"
    bdir.mkdir(exist_ok=True)

    bs = cfg.batch_size
    batches = [list(range(i, min(i + bs, len(docs)))) for i in range(0, len(docs), bs)]
    decode_n = cfg.tokens - cfg.prefill
    todo, found = [], []
    for k, idx in enumerate(batches):
        path = bdir / f"batch_{k:05d}.npz"
        if path.exists():
            read_batch(path, fingerprint)  # verify now; raises on corrupted / foreign files
            found.append(k)
        elif k % world == rank:
            todo.append((k, idx, path))
    if found:
        log(f"kl: resuming {out}: {len(found)} of {len(batches)} batches already complete "
            f"(batch {_spans(found)}: {_count(sum(len(batches[k]) for k in found), 'document')}), "
            f"{len(todo)} to compute"
            + (f" on rank {rank}" if world > 1 else ""))
    total_tokens = len(todo) * cfg.tokens * bs
    bar = None
    if cfg.progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_tokens, unit="tok", desc=f"kl rank {rank}" if world > 1 else "kl",
                   dynamic_ncols=True, file=sys.stderr)
    budget = 2e9 if device.type == "cuda" else 2.5e8
    done = 0
    t_start = time.perf_counter()
    for k, idx, path in todo:
        if stop_after_batches is not None and done >= stop_after_batches:
            break
        toks = torch.stack([docs[i].tokens for i in idx])             # [B, N]
        B = toks.shape[0]
        seq_ids = torch.tensor(idx, dtype=torch.int64)                   # SR ids = global document index
        served: list[Counter] = []
        hits: list = []
        kl, agree, nll = kl_stream(model, toks, prefill=cfg.prefill, segment=cfg.segment, engine=engine,
                                   seq_ids=seq_ids, budget_bytes=budget, groups=groups, pairs=plan.pairs,
                                   layout=cfg.layout, served=served, hits=hits,
                                   progress=(lambda n, B=B: bar.update(n * B)) if bar else None)
        _write_npz_atomic(path, {"kl": kl, "agree": agree, "nll": nll, "hit": hits[0],
                                 "doc_index": np.array(idx, np.int64)},
                          {"fingerprint": fingerprint, "batch": k, "rows": [r.name for r in plan.rows],
                           "pairs": plan.pairs, "docs": [docs[i].doc_id for i in idx],
                           "served": [dict(c) for c in served] if cfg.layout == "grouped" else None})
        done += 1
    if bar:
        bar.close()
    elapsed = time.perf_counter() - t_start
    report = model.precision_lab_report()
    implementations = sorted({c for layer in report["layers"] for c in layer["calls"]})
    ssm_layers = [{"index": j, "module": qual, "layer_idx": getattr(m, "layer_idx", None),
                   "kind": getattr(m, "kind", None)} for j, (qual, m) in enumerate(ssm_modules(model))]
    if model_and_tokenizer is None:
        del model
    if stop_after_batches is not None and len(todo) > done:
        return None
    if env_world > 1 and world == env_world and torch.distributed.is_available():
        # torchrun: wait until every rank has written its batches, then rank 0 merges. gloo is enough
        # for a barrier and needs no device binding.
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")
        torch.distributed.barrier()
    if rank != 0:
        return None
    missing = [k for k in range(len(batches)) if not (bdir / f"batch_{k:05d}.npz").exists()]
    if missing:
        log(f"kl: {len(missing)} batches not computed yet (other ranks?); rerun to finish and merge")
        return None
    parts = [read_batch(bdir / f"batch_{k:05d}.npz", fingerprint) for k in range(len(batches))]
    KL = np.concatenate([p["kl"] for p in parts], axis=1)
    AG = np.concatenate([p["agree"] for p in parts], axis=1)
    NLL = np.concatenate([p["nll"] for p in parts], axis=1)
    HIT = np.concatenate([p["hit"] for p in parts], axis=1)
    served_rows = None
    if cfg.layout == "grouped":
        served_rows = [Counter() for _ in plan.rows]
        for p in parts:
            for acc, calls in zip(served_rows, p["meta"]["served"]):
                acc.update(calls)
        served_rows = [dict(c) for c in served_rows]
    from precision_lab.provenance import provenance

    layout = {"name": cfg.layout, "check": None}
    if cfg.layout == "lockstep":
        c = plan.pair_index(0, len(plan.rows) - 1)
        layout["check"] = {"max_kl": float(KL[c].max()), "mean_kl": float(KL[c].mean()),
                           "top1_agreement": float(AG[c].mean()), "exact": bool(KL[c].max() == 0 and AG[c].all())}
    src = {"name": cfg.model, "seed": cfg.model_seed, "dtype": cfg.dtype}
    kind = "kl-layers" if cfg.per_layer else "kl"
    summary = {
        "kind": kind, "schema_version": LAYERS_SCHEMA_VERSION if cfg.per_layer else SCHEMA_VERSION,
        "provenance": provenance(policies=list(cfg.policies), reference="matched", model=cfg.model, data=cfg.data,
                                 seed=cfg.seed, engine=engine, implementations=implementations,
                                 fingerprint=fingerprint, settings=run_meta["settings"]),
        "model": src,
        "data": {"source": cfg.data, "docs": len(docs), "tokens": cfg.tokens, "prefill": cfg.prefill,
                 "decode_tokens": decode_n, "doc_ids": [d.doc_id for d in docs],
                 "titles": [d.meta.get("short_book_title") or d.meta.get("title") for d in docs]},
        "reference": "matched", "base": "fp32", "policies": list(cfg.policies), "seed": cfg.seed,
        "rows": [{"name": r.name, "role": r.role, "implementations": served_rows[i] if served_rows else None}
                 for i, r in enumerate(plan.rows)],
        "layout": layout,
        "engine": {"requested": cfg.engine, "used": engine, "implementations": implementations},
        "length_definition": "decode steps taken when the position is predicted (1 = first decode token)",
        **summarize_plan(plan, KL, AG, NLL, served_rows),
        "timing": {"seconds_this_process": elapsed, "batches_this_process": done},
    }
    if cfg.per_layer:
        summary["ssm_layers"] = ssm_layers
    if cfg.speaker and not cfg.per_layer:
        summary["speaker"] = speaker_summary(plan, HIT, docs, tok, prefill=cfg.prefill, buckets=cfg.speaker_buckets)
    tmp = out / f"summary.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, out / "summary.json")
    if cfg.plot and not cfg.per_layer:
        plot(summary, out / "kl_vs_length.png")
    return summary
