"""a2rl.stats and the paired improvement: against statsmodels/scipy, a published worked example,
and the properties every interval must keep."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from a2rl.analysis.improvement import Scored, paired_improvement
from a2rl.stats import (
    NEWCOMBE_PAIRED_METHOD,
    binomial_tail,
    bootstrap_interval,
    bootstrap_weights,
    exact_greater,
    mean_interval,
    newcombe_paired_interval,
    normal_interval,
    paired_proportion_difference,
    t_quantile_975,
    weighted_mean,
    wilson_interval,
)
from a2rl.tasks.alpacaeval.length_control import (
    lc_fit,
    lc_statistic,
    length_controlled_win_rate,
)

from .conftest import require

try:  # the reference implementations (the dev extra)
    import scipy.stats as scipy_stats
    import statsmodels.api as sm
    from statsmodels.stats import proportion as statsmodels_proportion
except ImportError:  # pragma: no cover - require() below says what is missing
    scipy_stats = sm = statsmodels_proportion = None  # type: ignore[assignment]


@pytest.fixture
def reference() -> None:
    require(statsmodels_proportion is not None,
            "statsmodels is not installed: pip install -c constraints.txt -e '.[dev]'")


# --- Student's t: the mean of a recipe's replicas (a2rl replay) ---------------------------
def test_t_quantiles_match_scipy(reference: None) -> None:
    for df in [*range(1, 31), 31, 40, 60, 120, 1000]:
        assert t_quantile_975(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=1e-4), df


def test_mean_interval_matches_scipy(reference: None) -> None:
    for values in ([0.8, 0.9], [0.5, 0.52, 0.49], [0.1, 0.3, 0.2, 0.25, 0.3, 0.27]):
        mean, low, high = mean_interval(values)  # type: ignore[misc]
        ref = scipy_stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                                     scale=scipy_stats.sem(values))
        assert (mean, low, high) == pytest.approx((np.mean(values), *ref), abs=1e-3)
    assert mean_interval([0.7]) is None and mean_interval([0.7, 0.7]) == (0.7, 0.7, 0.7)


# --- Wilson --------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 7, 30, 200, 1319])
def test_wilson_matches_statsmodels(n: int, reference: None) -> None:
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
        ref = statsmodels_proportion.proportion_confint(k, n, alpha=0.05, method="wilson")
        assert wilson_interval(k, n) == pytest.approx(ref, abs=1e-12), (k, n)


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 200)
    assert low == 0.0 and 0.0 < high < 0.02  # a score of 0 still has a width
    assert wilson_interval(200, 200)[1] == 1.0


# --- the normal interval from a standard error (AlpacaEval's paper profile) ----------------
@pytest.mark.parametrize(("estimate", "se"), [(0.5, 0.02), (0.31, 0.017), (0.9, 0.1),
                                              (0.02, 0.05), (0.4, 0.0)])
def test_normal_interval_matches_scipy(estimate: float, se: float, reference: None) -> None:
    low, high = (scipy_stats.norm.interval(0.95, loc=estimate, scale=se) if se > 0
                 else (estimate, estimate))
    assert normal_interval(estimate, se) == pytest.approx((max(low, 0.0), min(high, 1.0)),
                                                          abs=1e-12)


def test_normal_interval_edges() -> None:
    assert normal_interval(0.97, 0.05) == (pytest.approx(0.97 - 1.959963984540054 * 0.05), 1.0)
    assert normal_interval(0.5, float("nan")) == (0.0, 1.0)  # unknown: the whole range
    assert normal_interval(0.1, 0.2, floor=-1.0) == pytest.approx((0.1 - 0.392, 0.492),
                                                                  abs=1e-3)
    with pytest.raises(ValueError, match="standard error"):
        normal_interval(0.5, -0.1)


# --- Newcombe's paired interval ------------------------------------------------------------
def test_newcombe_paired_published_example() -> None:
    """Fagerland, Lydersen & Laake (2017), Statistical Analysis of Contingency Tables, ch. 8:
    complete response before and after consolidation therapy (Cavo et al. 2012), the table
    [[59, 6], [16, 80]]: Newcombe square-and-add, -0.0621 (95% CI -0.1186 to -0.0046)."""
    low, high = newcombe_paired_interval(59, 6, 16, 80)
    assert round((6 - 16) / 161, 4) == -0.0621
    assert low == pytest.approx(-0.1186, abs=5e-5) and high == pytest.approx(-0.0046, abs=5e-5)


def test_newcombe_paired_without_correlation_is_newcombes_independent(reference: None) -> None:
    """When phi is 0 (ad - bc in [0, n/2], or an empty margin) method 10 reduces to Newcombe's
    hybrid score interval for two proportions: statsmodels' `newcomb`, on many tables."""
    checked = 0
    for n in (6, 13, 40):
        for a, b, c in itertools.product(range(n + 1), repeat=3):
            d = n - a - b - c
            if d < 0:
                continue
            cross = a * d - b * c
            empty = 0 in (a + b, c + d, a + c, b + d)
            if not (empty or 0 <= cross <= n / 2):
                continue
            ref = statsmodels_proportion.confint_proportions_2indep(
                a + b, n, a + c, n, method="newcomb", compare="diff")
            assert newcombe_paired_interval(a, b, c, d) == pytest.approx(
                (float(ref[0]), float(ref[1])), abs=1e-12), (a, b, c, d)
            checked += 1
    assert checked > 300


def _all_tables(n: int) -> list[tuple[int, int, int, int]]:
    return [(a, b, c, n - a - b - c) for a in range(n + 1) for b in range(n + 1 - a)
            for c in range(n + 1 - a - b)]


@pytest.mark.parametrize("n", [1, 5, 20, 32])
def test_paired_difference_properties(n: int, reference: None) -> None:
    """Inside what is possible, around the estimate, never zero-width, and paired: when the
    items agree it is narrower than treating the two scores as independent."""
    for a, b, c, d in _all_tables(n):
        after = [True] * a + [True] * b + [False] * c + [False] * d
        before = [True] * a + [False] * b + [True] * c + [False] * d
        est, low, high = paired_proportion_difference(after, before)
        floor, ceiling = -(a + c) / n, (b + d) / n  # -baseline, 1 - baseline
        assert est == pytest.approx((a + b) / n - (a + c) / n)
        assert -1.0 <= floor <= low <= est <= high <= ceiling <= 1.0, (a, b, c, d)
        assert high - low > 0, (a, b, c, d)
        if b == c == 0:  # every item agrees: the interval still has a width and holds 0
            assert low <= 0.0 <= high
        if n >= 20 and b + c <= n // 10 and 0 < a < n:
            ind = statsmodels_proportion.confint_proportions_2indep(
                a + b, n, a + c, n, method="newcomb", compare="diff")
            assert high - low < float(ind[1] - ind[0])


def test_paired_difference_is_monotone() -> None:
    """Turning an item only the baseline got right, or one neither got right, into one only
    the final model gets right never lowers either limit."""
    for n in (5, 12, 30):
        for a, b, c, d in _all_tables(n):
            lo, hi = newcombe_paired_interval(a, b, c, d)
            for a2, b2, c2, d2 in ((a, b + 1, c - 1, d), (a, b + 1, c, d - 1)):
                if min(c2, d2) < 0:
                    continue
                lo2, hi2 = newcombe_paired_interval(a2, b2, c2, d2)
                assert lo2 >= lo - 1e-12 and hi2 >= hi - 1e-12


def test_the_issue_example_stays_possible() -> None:
    """The Wald interval printed +0.996 [+0.990, +1.002]; the paired one cannot pass 1 - base."""
    n = 500
    after = [True] * n
    before = [i < 2 for i in range(n)]
    est, low, high = paired_proportion_difference(after, before)
    assert est == pytest.approx(0.996)
    assert high <= 1 - 2 / n and low > 0.98


def test_paired_difference_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        paired_proportion_difference([True], [True, False])
    with pytest.raises(ValueError):
        paired_proportion_difference([], [])


# --- bootstrap -----------------------------------------------------------------------------
def test_bootstrap_is_deterministic_and_resamples_n_items() -> None:
    w = bootstrap_weights(50, 300, seed=7)
    assert w.shape == (300, 50) and np.all(w.sum(axis=1) == 50)
    assert np.array_equal(w, bootstrap_weights(50, 300, seed=7))
    assert not np.array_equal(w, bootstrap_weights(50, 300, seed=8))


def test_bootstrap_mean_matches_scipy(reference: None) -> None:
    """Same statistic, other random draws: the percentile limits agree to Monte Carlo error."""
    rng = np.random.default_rng(3)
    x = rng.choice([0.0, 0.5, 1.0], size=300, p=[0.3, 0.2, 0.5])
    ours = bootstrap_interval(weighted_mean(x), len(x), resamples=4000)
    ref = scipy_stats.bootstrap((x,), np.mean, method="percentile", n_resamples=4000,
                                random_state=1).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=0.01)


def test_paired_bootstrap_matches_scipy(reference: None) -> None:
    rng = np.random.default_rng(4)
    before = rng.random(400) < 0.4
    after = before | (rng.random(400) < 0.15)
    d = after.astype(float) - before.astype(float)
    ours = bootstrap_interval(lambda w: weighted_mean(after)(w) - weighted_mean(before)(w),
                              400, resamples=4000)
    ref = scipy_stats.bootstrap((after.astype(float), before.astype(float)),
                                lambda a, b: np.mean(a) - np.mean(b), paired=True,
                                method="percentile", n_resamples=4000,
                                random_state=2).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=0.01)
    assert ours[0] > 0 and d.mean() > 0


def test_bootstrap_rejects_a_wrong_statistic() -> None:
    with pytest.raises(ValueError):
        bootstrap_interval(lambda w: w.sum(), 10)
    with pytest.raises(ValueError):
        bootstrap_interval(weighted_mean([]), 0)


# --- AlpacaEval's length-controlled win rate -----------------------------------------------
def _annotations(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    model_len = rng.integers(100, 3000, n)
    ref_len = rng.integers(100, 3000, n)
    p = 1 / (1 + np.exp(-(0.3 + 0.8 * np.tanh((model_len - ref_len) / 800))))
    prefs = np.where(rng.random(n) < 0.08, 0.5, (rng.random(n) < p).astype(float))
    return prefs, model_len, ref_len


def test_lc_fit_matches_statsmodels_glm(reference: None) -> None:
    """The Newton fit is a binomial GLM with fractional targets (its ridge is negligible)."""
    y, ml, rl = _annotations(805, 1)
    d = (ml - rl).astype(float)
    a, b, sd = lc_fit(y, d, np.ones((1, len(y))))
    x = np.tanh(d / d.std())
    glm = sm.GLM(y, sm.add_constant(x), family=sm.families.Binomial()).fit()
    assert (a[0], b[0]) == pytest.approx(tuple(glm.params), abs=1e-4)
    assert sd[0] == pytest.approx(d.std())
    # large sample: the bootstrap interval agrees with the GLM's delta-method one
    lc = length_controlled_win_rate(y, ml, rl)
    se = float(glm.bse[0])
    delta = [1 / (1 + np.exp(-(glm.params[0] + s * 1.959964 * se))) for s in (-1, 1)]
    assert lc["ci"] == pytest.approx(delta, abs=0.01)
    assert lc["ci"][0] < lc["lc_win_rate"] < lc["ci"][1]


def test_lc_weights_are_repeated_items() -> None:
    y, ml, rl = _annotations(40, 2)
    counts = np.random.default_rng(5).integers(0, 4, 40).astype(float)
    idx = np.repeat(np.arange(40), counts.astype(int))
    weighted = lc_statistic(y, ml, rl, counts[None, :])[0]
    repeated = lc_statistic(y[idx], ml[idx], rl[idx], np.ones((1, len(idx))))[0]
    assert weighted == pytest.approx(repeated, abs=1e-9)


# --- the paired improvement of a run ------------------------------------------------------
def _items(correct: list[bool], ids: list[str] | None = None) -> list[dict[str, object]]:
    ids = ids or [f"q{i}" for i in range(len(correct))]
    return [{"id": i, "correct": c} for i, c in zip(ids, correct, strict=True)]


def test_improvement_pairs_items_by_id() -> None:
    rng = random.Random(0)
    before = [rng.random() < 0.3 for _ in range(200)]
    after = [b or rng.random() < 0.2 for b in before]
    ids = [f"q{i}" for i in range(200)]
    shuffled = list(zip(ids, after, strict=True))
    rng.shuffle(shuffled)  # the final evaluation lists the items in another order
    final = Scored(sum(after) / 200, [{"id": i, "correct": c} for i, c in shuffled])
    iv, note = paired_improvement(final, Scored(sum(before) / 200, _items(before, ids)))
    assert note is None and iv is not None
    assert iv.method == NEWCOMBE_PAIRED_METHOD and iv.n_paired == 200
    _, low, high = paired_proportion_difference(after, before)
    assert (iv.low, iv.high) == (low, high) and iv.low > 0 and not iv.within_noise


def test_improvement_of_nothing_changed_is_within_noise() -> None:
    same = _items([i % 3 == 0 for i in range(90)])
    iv, _ = paired_improvement(Scored(30 / 90, same), Scored(30 / 90, same))
    assert iv is not None and iv.estimate == 0 and iv.within_noise and iv.high - iv.low > 0
    # the same data hash on both sides (or one side without it): paired as before
    prov = {"data_hash": "c" * 64}
    assert paired_improvement(Scored(30 / 90, same, provenance=prov),
                              Scored(30 / 90, same, provenance=prov)) == (iv, None)
    assert paired_improvement(Scored(30 / 90, same, provenance=prov),
                              Scored(30 / 90, same)) == (iv, None)


@pytest.mark.parametrize(("final", "base", "why"), [
    (Scored(0.5, []), Scored(0.5, _items([True, False])), "final test evaluation kept no"),
    (Scored(0.5, _items([True, False])), Scored(0.5, []), "baseline test evaluation kept no"),
    (Scored(0.5, _items([True, False], ["a", "b"])), Scored(0.5, _items([True, False],
                                                                         ["a", "c"])),
     "different items"),
    (Scored(0.7, _items([True, False])), Scored(0.5, _items([True, False])),
     "not the share of items correct"),
    # the same ids over other items (the hidden split drawn from another seed)
    (Scored(0.5, _items([True, False]), provenance={"data_hash": "a" * 64}),
     Scored(0.5, _items([True, False]), provenance={"data_hash": "b" * 64}),
     "data hashes differ"),
])
def test_improvement_without_an_honest_interval_says_why(final: Scored, base: Scored,
                                                         why: str) -> None:
    iv, note = paired_improvement(final, base)
    assert iv is None and note is not None and why in note


def _lc_items(y: np.ndarray, ml: np.ndarray, rl: np.ndarray) -> list[dict[str, object]]:
    return [{"id": f"i{k}", "correct": bool(p == 1.0),
             "parsed": json.dumps({"preference": float(p), "model_length": int(m),
                                   "reference_length": int(r)})}
            for k, (p, m, r) in enumerate(zip(y, ml, rl, strict=True))]


def test_improvement_of_a_length_controlled_win_rate() -> None:
    y0, ml0, rl0 = _annotations(300, 6)
    y1 = np.where(np.random.default_rng(7).random(300) < 0.3, 1.0, y0)  # some losses now win
    lc0 = float(lc_statistic(y0, ml0, rl0, np.ones((1, 300)))[0])
    lc1 = float(lc_statistic(y1, ml0, rl0, np.ones((1, 300)))[0])
    metrics = {"lc_win_rate": 0.0}
    final = Scored(lc1, _lc_items(y1, ml0, rl0), metrics)
    base = Scored(lc0, _lc_items(y0, ml0, rl0), metrics)
    iv, note = paired_improvement(final, base, "alpacaeval")
    assert note is None and iv is not None and "paired-percentile-bootstrap" in iv.method
    assert -lc0 <= iv.low < iv.estimate < iv.high <= 1 - lc0 and iv.low > 0
    assert paired_improvement(final, base, "alpacaeval") == (iv, None)  # seeded: the same
    # the task declares the interval: without it, an LC win rate is no share of items correct
    assert "not the share of items correct" in str(paired_improvement(final, base)[1])
    # a score the items do not reproduce gets no interval
    iv, note = paired_improvement(Scored(lc1 + 0.01, final.items, metrics), base,
                                  "alpacaeval")
    assert iv is None and note is not None and "differs from the stored score" in note


# --- exact one-sided tests (the audit's short-item rule) -----------------------------------
@pytest.mark.parametrize(("k", "n", "c", "m"), [(200, 500, 0, 3300), (8, 10, 0, 10),
                                                (20, 100, 2, 100), (2, 100, 2, 100),
                                                (1, 20, 0, 20), (0, 5, 0, 5), (5, 5, 5, 5),
                                                (3, 10, 10, 10), (60, 100, 60, 100)])
def test_exact_greater_matches_scipys_fisher(k: int, n: int, c: int, m: int,
                                             reference: None) -> None:
    ref = scipy_stats.fisher_exact([[k, n - k], [c, m - c]], alternative="greater").pvalue
    assert exact_greater(k, n, c, m) == pytest.approx(ref, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("k", "n", "p"), [(3, 10, 0.1), (0, 10, 0.5), (10, 10, 0.5),
                                           (200, 500, 0.02), (1, 1, 0.02)])
def test_binomial_tail_matches_scipy(k: int, n: int, p: float, reference: None) -> None:
    ref = scipy_stats.binomtest(k, n, p, alternative="greater").pvalue
    assert binomial_tail(k, n, p) == pytest.approx(ref, rel=1e-9, abs=1e-300)


def test_exact_tests_refuse_impossible_counts() -> None:
    with pytest.raises(ValueError):
        exact_greater(5, 4, 0, 4)
    with pytest.raises(ValueError):
        binomial_tail(1, 2, 1.5)
    assert exact_greater(3, 10, 0, 0) == 1.0  # no control: nothing can be said
