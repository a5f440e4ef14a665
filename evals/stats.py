"""Paired statistics for accuracy under a state policy against the FP32-state run (docs/design.md §9).

Every comparison is *paired*: the same items are answered by the FP32 baseline and by the policy,
so the unit of resampling is the item and the test counts discordant items. With 198 GPQA-Diamond
questions one flipped answer moves accuracy by 0.5 points, and a ±3-point delta sits inside the
noise; these functions say how much.

Inputs are per-item scores in item order, one array per run, aligned by item:
    base[n], var[n]   float scores in [0, 1] (1/0 for exact-match tasks; RULER gives fractions)

- ``paired_bootstrap(base, var)``: delta = mean(var) - mean(base) with a percentile CI from
  resampling items with replacement (the same resampled items for both runs).
- ``mcnemar_exact(base, var)``: exact two-sided McNemar test on the discordant pairs
  b = #(base right, var wrong), c = #(base wrong, var right): p = min(1, 2·P[Bin(b+c, 1/2) ≤ min(b, c)]),
  computed in exact integer arithmetic. Non-binary scores are binarised at ``threshold``.
- ``accuracy_by_length_quartile``: items split into four equal-count bins by the FP32 run's
  generation length (ties broken by item order, so every bin has n/4 ± 1 items), accuracy of each
  run per bin.
- ``length_stats``: mean, median, quantiles and max of generation lengths.
- ``compare_by_bucket``: the paired comparison within each bucket of items (e.g. context-length
  buckets of a long-context task), each with its own bootstrap CI and McNemar test.
- ``accuracy_interval``: a CI of one run's accuracy on its own (not paired): the Wilson score
  interval for 0/1 scores (it stays inside [0, 1] and is not degenerate at 0 or n correct), a
  percentile bootstrap over items for fractional scores.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from statistics import NormalDist

import numpy as np


def _as_scores(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of per-item scores, got shape {a.shape}")
    if a.size and not np.isfinite(a).all():
        raise ValueError(f"{name}: per-item scores must be finite")
    return a


def _paired(base, var) -> tuple[np.ndarray, np.ndarray]:
    b, v = _as_scores(base, "base"), _as_scores(var, "var")
    if b.shape != v.shape:
        raise ValueError(f"paired statistics need the same items in both runs: {b.size} vs {v.size} scores")
    if b.size == 0:
        raise ValueError("no items to compare")
    return b, v


def paired_bootstrap(base: Sequence[float], var: Sequence[float], *, n_boot: int = 10_000, seed: int = 0,
                     confidence: float = 0.95) -> dict:
    """Delta of mean score (var − base) with a paired percentile bootstrap CI.

    base, var: [n] per-item scores aligned by item. Deterministic for a given ``seed`` (numpy PCG64).
    Returns {"delta", "ci_low", "ci_high", "se", "n", "n_boot", "confidence", "seed"}; delta is in
    score units (multiply by 100 for points).
    """
    b, v = _paired(base, var)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = v - b
    n = d.size
    rng = np.random.Generator(np.random.PCG64(seed))
    means = np.empty(n_boot, dtype=np.float64)
    # Chunked so 10k resamples of a 12k-item MMLU-Pro run stay within a few MB.
    chunk = max(1, 4_000_000 // n)
    for s in range(0, n_boot, chunk):
        e = min(n_boot, s + chunk)
        idx = rng.integers(0, n, size=(e - s, n))
        means[s:e] = d[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return {"delta": float(d.mean()), "ci_low": float(lo), "ci_high": float(hi),
            "se": float(means.std(ddof=1)) if n_boot > 1 else 0.0,
            "n": int(n), "n_boot": int(n_boot), "confidence": confidence, "seed": int(seed)}


def mcnemar_exact(base: Sequence[float], var: Sequence[float], *, threshold: float = 1.0) -> dict:
    """Exact two-sided McNemar test (binomial on discordant pairs).

    An item counts as correct when its score >= ``threshold`` (1.0: exact-match scores as they are;
    RULER's fractional scores count only when every needle is found).
    Returns {"b": base-only correct, "c": var-only correct, "n_discordant", "p_value"}.
    """
    bs, vs = _paired(base, var)
    bc, vc = bs >= threshold, vs >= threshold
    b = int(np.sum(bc & ~vc))
    c = int(np.sum(~bc & vc))
    return {"b": b, "c": c, "n_discordant": b + c, "p_value": mcnemar_p(b, c)}


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts, in exact rational arithmetic."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def wilson_interval(k: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # exact at the ends (the formula gives 0 and 1 there up to rounding)
    return (0.0 if k == 0 else max(0.0, mid - half)), (1.0 if k == n else min(1.0, mid + half))


def accuracy_interval(scores: Sequence[float], *, confidence: float = 0.95, n_boot: int = 10_000,
                      seed: int = 0) -> dict:
    """CI of mean(scores) over items: Wilson for 0/1 scores, else a percentile bootstrap.
    Returns {"low", "high", "confidence", "method"} ("wilson" | "bootstrap")."""
    a = _as_scores(scores, "scores")
    if a.size == 0:
        raise ValueError("no items")
    if np.isin(a, (0.0, 1.0)).all():
        lo, hi = wilson_interval(int(a.sum()), int(a.size), confidence=confidence)
        return {"low": lo, "high": hi, "confidence": confidence, "method": "wilson"}
    rng = np.random.Generator(np.random.PCG64(seed))
    means = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return {"low": float(lo), "high": float(hi), "confidence": confidence, "method": "bootstrap"}


def quartile_bins(lengths: Sequence[int]) -> list[np.ndarray]:
    """Item indices of four equal-count bins by ascending length (stable: ties keep item order)."""
    a = np.asarray(lengths)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("need a non-empty 1-D sequence of generation lengths")
    order = np.argsort(a, kind="stable")
    return [np.sort(part) for part in np.array_split(order, 4)]


def accuracy_by_length_quartile(base_lengths: Sequence[int], scores: Mapping[str, Sequence[float]]) -> list[dict]:
    """Accuracy of each run within quartiles of the baseline's generation length.

    base_lengths: [n] generation lengths (tokens) of the FP32 run; scores: run name → [n] scores.
    Returns four dicts {"quartile": 1..4, "n", "len_min", "len_max", "accuracy": {run: acc}}.
    """
    lens = np.asarray(base_lengths)
    out = []
    for q, idx in enumerate(quartile_bins(lens), start=1):
        row: dict = {"quartile": q, "n": int(idx.size)}
        if idx.size:
            row["len_min"], row["len_max"] = int(lens[idx].min()), int(lens[idx].max())
        row["accuracy"] = {}
        for name, s in scores.items():
            arr = _as_scores(s, name)
            if arr.size != lens.size:
                raise ValueError(f"run {name!r} has {arr.size} scores for {lens.size} items")
            row["accuracy"][name] = float(arr[idx].mean()) if idx.size else None
        out.append(row)
    return out


def length_stats(lengths: Sequence[int], *, max_gen_toks: int | None = None) -> dict:
    """Summary of generation lengths (tokens): mean, median, q90, q99, min, max; with
    ``max_gen_toks``, how many generations hit the limit (were cut rather than finished)."""
    a = np.asarray(lengths, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("need a non-empty 1-D sequence of generation lengths")
    out = {"n": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
           "q90": float(np.quantile(a, 0.9)), "q99": float(np.quantile(a, 0.99)),
           "min": int(a.min()), "max": int(a.max())}
    if max_gen_toks is not None:
        out["n_at_limit"] = int(np.sum(a >= max_gen_toks))
    return out


def compare_runs(base_scores: Sequence[float], var_scores: Sequence[float], *, base_lengths: Sequence[int] | None = None,
                 var_lengths: Sequence[int] | None = None, n_boot: int = 10_000, seed: int = 0,
                 confidence: float = 0.95) -> dict:
    """Everything the lm-eval report shows for one policy against the FP32 baseline."""
    b, v = _paired(base_scores, var_scores)
    out = {
        "n": int(b.size),
        "accuracy": float(v.mean()),
        "baseline_accuracy": float(b.mean()),
        "delta": paired_bootstrap(b, v, n_boot=n_boot, seed=seed, confidence=confidence),
        "mcnemar": mcnemar_exact(b, v),
        "accuracy_ci": accuracy_interval(v, confidence=confidence, n_boot=n_boot, seed=seed),
    }
    if base_lengths is not None:
        out["by_fp32_length_quartile"] = accuracy_by_length_quartile(base_lengths, {"fp32": b, "policy": v})
    if var_lengths is not None:
        out["generation_length"] = length_stats(var_lengths)
    return out


def _bucket_order(label: str) -> tuple:
    """Buckets labelled "<lo", "lo-hi" or "lo+" sort by lo; other labels keep their first-seen order."""
    text = str(label)
    if text.startswith("<") and text[1:].isdigit():
        return (0, -1)
    head = text.split("-")[0].rstrip("+")
    return (0, int(head)) if head.isdigit() else (1, 0)


def compare_by_bucket(buckets: Sequence, base_scores: Sequence[float], var_scores: Sequence[float], *,
                      n_boot: int = 10_000, seed: int = 0, confidence: float = 0.95) -> list[dict]:
    """``compare_runs``' paired statistics within each bucket of items.

    buckets: [n] a label per item (aligned with the scores). Returns one dict per bucket, ordered by
    the label's leading number where it has one: {"bucket", "n", "accuracy", "baseline_accuracy",
    "delta": paired_bootstrap, "mcnemar": mcnemar_exact, "accuracy_ci": accuracy_interval of var}.
    """
    b, v = _paired(base_scores, var_scores)
    labels = list(buckets)
    if len(labels) != b.size:
        raise ValueError(f"{len(labels)} bucket labels for {b.size} items")
    seen = list(dict.fromkeys(labels))
    out = []
    for lab in sorted(seen, key=lambda x: (_bucket_order(x), seen.index(x))):
        idx = np.array([i for i, x in enumerate(labels) if x == lab])
        out.append({"bucket": lab, "n": int(idx.size), "accuracy": float(v[idx].mean()),
                    "baseline_accuracy": float(b[idx].mean()),
                    "delta": paired_bootstrap(b[idx], v[idx], n_boot=n_boot, seed=seed, confidence=confidence),
                    "mcnemar": mcnemar_exact(b[idx], v[idx]),
                    "accuracy_ci": accuracy_interval(v[idx], confidence=confidence, n_boot=n_boot, seed=seed)})
    return out
