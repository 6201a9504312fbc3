"""Every confidence interval a2rl reports, each implemented once (pure functions).

- `wilson_interval`: a binomial proportion (a submission's accuracy or success rate). Unlike
  the normal approximation it stays inside [0, 1] and keeps a width at scores of 0 and 1.
  Also used, conservatively, for the mean of scores in [0, 1] (AlpacaEval's raw win rate with
  draws at 0.5): such a score's variance is at most mu (1 - mu), the binomial one.
- `newcombe_paired_interval` / `paired_proportion_difference`: the improvement of a run on a
  binary-scored task, final minus base model on the *same* items (Newcombe 1998, Stat. Med.
  17:2635-2650, method 10: the Wilson limits of both margins, squared and added with the
  correlation of the paired margins). Both scores are measured on the same items, so an
  interval treating them as independent is too wide when they agree and can leave the range
  of possible differences; this one does neither, and is never zero-width.
- `bootstrap_interval`: a percentile bootstrap over items, for scores that are not a mean of
  0/1 items (AlpacaEval's length-controlled win rate refits a regression on every resample),
  and, with one shared resample of items for both evaluations, for their paired difference.
  Seeded and deterministic; resamples are drawn as multinomial counts so that a statistic can
  be evaluated on all resamples at once as item weights.
- `normal_interval`: estimate +- z standard errors, cut to the score's range, for a score whose
  library reports a standard error and no interval (alpaca_eval's `lc_standard_error` of the
  `paper` profile's length-controlled win rate).
- `mean_interval`: Student's t interval of the mean of a few independent repeats (the test
  scores of a recipe's replicas, `a2rl replay`).
- `binomial_tail` / `exact_greater`: one-sided exact tests of a count against a rate and of one
  proportion against another (the audit's short-item rule: are hidden items found more often
  than the visible ones, beyond what chance does?). Exact sums in log space, not normal
  approximations: the counts are small and the tails the audit acts on are far out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a bootstrap is drawn: every `a2rl` command imports this
    import numpy as np  # module (through the grading seam), and most never resample

CONFIDENCE = 0.95
Z_95 = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

WILSON_METHOD = "wilson-95"
NEWCOMBE_PAIRED_METHOD = "newcombe-paired-95"
BOOTSTRAP_METHOD = f"percentile-bootstrap-95 ({BOOTSTRAP_RESAMPLES} item resamples, seed " \
                   f"{BOOTSTRAP_SEED})"
NORMAL_METHOD = "normal-95"
T_METHOD = "student-t-95"

#: Student's t 0.975 quantiles for 1 to 30 degrees of freedom (scipy.stats.t.ppf, checked by
#: tests/test_stats.py): scipy is not a dependency of a2rl's core, and replays have a few
#: repeats, where the normal quantile would be far too narrow.
_T_975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
          2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
          2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def paired_bootstrap_method(resamples: int = BOOTSTRAP_RESAMPLES,
                            seed: int = BOOTSTRAP_SEED) -> str:
    """The method name of a paired bootstrap (with another number of resamples, when a
    statistic is too slow to refit 2,000 times)."""
    return f"paired-percentile-bootstrap-95 ({resamples} item resamples, seed {seed})"


PAIRED_BOOTSTRAP_METHOD = paired_bootstrap_method()


def wilson_interval(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of `successes / n`; (0, 1) when n is 0.

    `successes` may be fractional (a sum of scores in [0, 1]): see the module docstring.
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return low, high


def newcombe_paired_interval(a: int, b: int, c: int, d: int,
                             z: float = Z_95) -> tuple[float, float]:
    """Newcombe's method 10 for p1 - p2 from a paired 2x2 table, unclipped.

    a: both succeed, b: only the first (p1's) succeeds, c: only the second, d: neither.
    The correlation of the margins is Newcombe's phi with its continuity correction: the
    numerator ad - bc is reduced by n/2 when positive and set to 0 when it lies in [0, n/2];
    phi is 0 when a margin is empty.
    """
    n = a + b + c + d
    if n <= 0:
        return -1.0, 1.0
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = 0.0
    if margins > 0:
        cross = a * d - b * c
        phi = (cross - n / 2 if cross > n / 2 else min(cross, 0)) / math.sqrt(margins)
    dl1, du1, dl2, du2 = p1 - l1, u1 - p1, p2 - l2, u2 - p2
    theta = p1 - p2
    low = theta - math.sqrt(max(0.0, dl1 ** 2 - 2 * phi * dl1 * du2 + du2 ** 2))
    high = theta + math.sqrt(max(0.0, dl2 ** 2 - 2 * phi * dl2 * du1 + du1 ** 2))
    return low, high


def clip_difference(low: float, high: float, floor: float,
                    ceiling: float) -> tuple[float, float]:
    """An interval of `score - baseline` (scores in [0, 1]) cut to what is possible given
    the baseline: [floor, ceiling] = [-baseline, 1 - baseline], inside [-1, 1]."""
    return min(max(low, floor), ceiling), max(min(high, ceiling), floor)


def paired_proportion_difference(after: Sequence[bool], before: Sequence[bool],
                                 z: float = Z_95) -> tuple[float, float, float]:
    """(estimate, low, high) of mean(after) - mean(before), item i of both the same item.

    Newcombe's method 10, then cut to [-mean(before), 1 - mean(before)]: conditioning on the
    observed baseline, as a reader of `final - baseline` does.
    """
    if len(after) != len(before):
        raise ValueError(f"{len(after)} paired results after but {len(before)} before")
    if not after:
        raise ValueError("no paired items")
    a = sum(1 for x, y in zip(after, before, strict=True) if x and y)
    b = sum(1 for x, y in zip(after, before, strict=True) if x and not y)
    c = sum(1 for x, y in zip(after, before, strict=True) if not x and y)
    d = len(after) - a - b - c
    n = len(after)
    low, high = newcombe_paired_interval(a, b, c, d, z)
    low, high = clip_difference(low, high, -(a + c) / n, (b + d) / n)  # exact fractions
    return (b - c) / n, low, high


def bootstrap_weights(n: int, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """(resamples, n) counts: row r says how often each item is drawn in resample r.

    Drawing counts instead of indices lets a statistic evaluate every resample at once as
    item weights; the generator is numpy's PCG64, fixed by `seed`, so results reproduce.
    """
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)


def percentile_interval(values: np.ndarray,
                        confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central `confidence` range of bootstrap values (numpy's linear interpolation)."""
    import numpy as np

    tail = (1 - confidence) / 2
    low, high = np.quantile(np.asarray(values, dtype=float), [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_interval(statistic: Callable[[np.ndarray], np.ndarray], n: int, *,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile bootstrap interval of a statistic of n items.

    `statistic(weights)` takes a (resamples, n) array of item counts and returns one value per
    row. For a paired difference, let it compute both evaluations' statistics from the same
    row: every resample then draws the same items for both, which keeps their correlation.
    """
    import numpy as np

    if n <= 0:
        raise ValueError("no items to resample")
    values = np.asarray(statistic(bootstrap_weights(n, resamples, seed)), dtype=float)
    if values.shape != (resamples,):
        raise ValueError(f"the statistic gave shape {values.shape}, not ({resamples},)")
    return percentile_interval(values, confidence)


def weighted_mean(values: Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """The statistic `mean(values)` for `bootstrap_interval`."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    return lambda w: (w @ x) / w.sum(axis=1)


def normal_interval(estimate: float, standard_error: float, *, floor: float = 0.0,
                    ceiling: float = 1.0, z: float = Z_95) -> tuple[float, float]:
    """`estimate` +- z standard errors, cut to [floor, ceiling] (a score's possible range).

    Only for a statistic whose own library gives a standard error and nothing better; it is
    zero-width when the standard error is 0, so it is never used for an improvement. An
    unknown standard error (NaN: pandas' `sem` of a single value) gives the whole range.
    """
    if math.isnan(standard_error):
        return floor, ceiling
    if not (math.isfinite(estimate) and math.isfinite(standard_error)) or standard_error < 0:
        raise ValueError(f"no normal interval for estimate {estimate} with standard error "
                         f"{standard_error}")
    return (min(max(estimate - z * standard_error, floor), ceiling),
            max(min(estimate + z * standard_error, ceiling), floor))


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile: the table to 30 degrees of freedom, then the Cornish-Fisher
    expansion around the normal quantile (within 1e-4 of the exact value there)."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if df <= len(_T_975):
        return _T_975[df - 1]
    z = Z_95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): Student's t 95% interval of the mean of independent repeats; None
    with fewer than two (no spread to speak of)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def within_noise(low: float, high: float) -> bool:
    """An improvement is within noise when its 95% interval contains 0."""
    return low <= 0.0 <= high


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _log_sum(terms: list[float]) -> float:
    top = max(terms)
    return top + math.log(math.fsum(math.exp(t - top) for t in terms))


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the one-sided exact test of `k` successes in `n`
    tries against a rate `p` (scipy's `binomtest(k, n, p, alternative="greater")`)."""
    if not 0 <= k <= n or not 0.0 <= p <= 1.0:
        raise ValueError(f"no binomial tail for k={k}, n={n}, p={p}")
    if k == 0:
        return 1.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, math.exp(_log_sum([_log_choose(n, i) + i * lp + (n - i) * lq
                                       for i in range(k, n + 1)])))


def exact_greater(k: int, n: int, c: int, m: int) -> float:
    """The one-sided p-value of "`k` of `n` is a higher rate than `c` of `m`": Fisher's exact
    test (scipy's `fisher_exact([[k, n - k], [c, m - c]], alternative="greater")`), the
    hypergeometric chance that, of the k + c successes shared out at random between the two
    groups, `k` or more land in the first. Unlike a binomial test against `c / m`, it counts
    the control's own sampling error: a control of 0 hits in 20 does not make 1 hit in 20 a
    certainty. With no control (m == 0) nothing can be said: 1.0."""
    if not (0 <= k <= n and 0 <= c <= m):
        raise ValueError(f"no exact test for {k} of {n} against {c} of {m}")
    if m == 0 or n == 0:
        return 1.0
    if k == 0:
        return 1.0
    hits, total = k + c, n + m
    top = min(hits, n)
    denom = _log_choose(total, hits)
    terms = [_log_choose(n, i) + _log_choose(m, hits - i) - denom
             for i in range(max(k, hits - m), top + 1)]
    return min(1.0, math.exp(_log_sum(terms))) if terms else 0.0
