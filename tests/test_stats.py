"""Paired statistics of evals/stats.py on constructed cases whose answers are known by hand."""
import math

import numpy as np
import pytest
from precision_lab.evals import stats
from scipy.stats import binomtest


def _pair(n_base_right: int, n: int, flips_down: int, flips_up: int):
    """base: first n_base_right items right; var: the first `flips_down` of those wrong and the
    first `flips_up` of the wrong ones right. Discordant pairs: b = flips_down, c = flips_up."""
    base = np.zeros(n)
    base[:n_base_right] = 1
    var = base.copy()
    var[:flips_down] = 0
    var[n_base_right:n_base_right + flips_up] = 1
    return base, var


def test_known_delta_and_discordant_pairs():
    base, var = _pair(60, 100, flips_down=10, flips_up=4)
    res = stats.compare_runs(base, var, n_boot=2000, seed=1)
    assert res["baseline_accuracy"] == pytest.approx(0.60)
    assert res["accuracy"] == pytest.approx(0.54)
    assert res["delta"]["delta"] == pytest.approx(-0.06)
    assert (res["mcnemar"]["b"], res["mcnemar"]["c"]) == (10, 4)
    # Hand computation: 2 * sum_{i<=4} C(14, i) / 2^14, and scipy's exact binomial test.
    by_hand = 2 * sum(math.comb(14, i) for i in range(5)) / 2**14
    assert res["mcnemar"]["p_value"] == pytest.approx(by_hand, rel=1e-15)
    assert res["mcnemar"]["p_value"] == pytest.approx(binomtest(4, 14, 0.5).pvalue, rel=1e-12)


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (1, 1), (0, 9), (3, 17), (25, 25), (40, 7)])
def test_mcnemar_matches_binomial_test(b, c):
    expected = 1.0 if b + c == 0 else binomtest(min(b, c), b + c, 0.5).pvalue
    assert stats.mcnemar_p(b, c) == pytest.approx(min(1.0, expected), rel=1e-12, abs=1e-300)
    assert stats.mcnemar_p(b, c) == stats.mcnemar_p(c, b)


def test_mcnemar_small_p_is_exact():
    # 0 vs 60 discordant: p = 2 / 2^60 exactly; summing float binomial terms would still be fine
    # here, but the exact rational path must not lose it either.
    assert stats.mcnemar_p(0, 60) == 2.0**-59
    assert stats.mcnemar_p(1, 60) == 2 * (1 + 61) / 2**61


def test_bootstrap_ci_contains_true_delta_and_is_deterministic():
    rng = np.random.default_rng(7)
    n = 400
    base = (rng.random(n) < 0.7).astype(float)
    var = base.copy()
    flip = rng.random(n) < 0.1
    var[flip] = 1 - var[flip]
    true_delta = var.mean() - base.mean()
    a = stats.paired_bootstrap(base, var, n_boot=3000, seed=3)
    b = stats.paired_bootstrap(base, var, n_boot=3000, seed=3)
    c = stats.paired_bootstrap(base, var, n_boot=3000, seed=4)
    assert a == b
    assert a["se"] != c["se"]  # another seed resamples differently (CI ends sit on a 1/n grid)
    assert a["ci_low"] <= true_delta <= a["ci_high"]
    assert a["delta"] == pytest.approx(true_delta)
    # The bootstrap SE of a paired mean difference must match the analytic sd(d)/sqrt(n).
    d = var - base
    assert a["se"] == pytest.approx(d.std(ddof=0) / math.sqrt(n), rel=0.1)


def test_bootstrap_coverage_on_simulated_populations():
    # Draw many small paired samples from a population with a known delta; a 90% CI must cover it
    # in roughly 90% of them (binomial slack for 200 trials).
    rng = np.random.default_rng(11)
    p_base, p_down, p_up = 0.6, 0.15, 0.05  # true delta = 0.05*0.4 - 0.15*0.6 = -0.07
    true_delta = p_up * (1 - p_base) - p_down * p_base
    hits = 0
    for t in range(200):
        base = (rng.random(150) < p_base).astype(float)
        u = rng.random(150)
        var = np.where(base == 1, (u >= p_down).astype(float), (u < p_up).astype(float))
        r = stats.paired_bootstrap(base, var, n_boot=400, seed=t, confidence=0.9)
        hits += r["ci_low"] <= true_delta <= r["ci_high"]
    assert 0.8 <= hits / 200 <= 0.97


def test_identical_runs_give_zero_delta_and_p_one():
    base = np.array([1, 0, 1, 1, 0, 1], dtype=float)
    res = stats.compare_runs(base, base.copy(), n_boot=200)
    assert res["delta"]["delta"] == 0.0 and res["delta"]["ci_low"] == 0.0 and res["delta"]["ci_high"] == 0.0
    assert res["mcnemar"]["p_value"] == 1.0 and res["mcnemar"]["n_discordant"] == 0


def test_fractional_scores_binarised_for_mcnemar_only():
    base = np.array([1.0, 0.5, 1.0, 0.0])
    var = np.array([0.5, 1.0, 1.0, 0.0])
    res = stats.compare_runs(base, var, n_boot=100)
    assert res["delta"]["delta"] == pytest.approx(0.0)
    assert (res["mcnemar"]["b"], res["mcnemar"]["c"]) == (1, 1)


def test_length_quartiles():
    # Lengths constructed so the quartiles are items {0..2}, {3..5}, {6..8}, {9..11} reversed order.
    lengths = np.arange(12)[::-1] * 10  # item i has length 110 - 10 i
    base = np.array([1] * 3 + [0] * 3 + [1] * 6, dtype=float)
    var = np.array([0] * 3 + [0] * 3 + [1] * 6, dtype=float)
    rows = stats.accuracy_by_length_quartile(lengths, {"fp32": base, "p": var})
    assert [r["n"] for r in rows] == [3, 3, 3, 3]
    # shortest quartile = items 9, 10, 11 (lengths 0..20); longest = items 0, 1, 2 (90..110)
    assert (rows[0]["len_min"], rows[0]["len_max"]) == (0, 20)
    assert (rows[3]["len_min"], rows[3]["len_max"]) == (90, 110)
    assert rows[3]["accuracy"] == {"fp32": 1.0, "p": 0.0}
    assert rows[2]["accuracy"] == {"fp32": 0.0, "p": 0.0}
    assert rows[0]["accuracy"] == {"fp32": 1.0, "p": 1.0}
    # Ties are split by item order, so every bin keeps n/4 items.
    tied = stats.quartile_bins([5] * 10)
    assert [len(b) for b in tied] == [3, 3, 2, 2] and list(np.concatenate(tied)) == list(range(10))


def test_length_stats():
    s = stats.length_stats([10, 20, 30, 40, 2048], max_gen_toks=2048)
    assert s["median"] == 30 and s["max"] == 2048 and s["min"] == 10 and s["n_at_limit"] == 1
    assert s["mean"] == pytest.approx(2148 / 5)


@pytest.mark.parametrize("base,var", [([1, 0], [1]), ([], []), ([1, float("nan")], [1, 0])])
def test_bad_input_raises(base, var):
    with pytest.raises(ValueError):
        stats.compare_runs(base, var, n_boot=10)
