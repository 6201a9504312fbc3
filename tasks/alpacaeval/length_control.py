"""Win rate and length-controlled win rate, each with a 95% interval.

Win rate: the mean preference (1 win, 0.5 draw, 0 loss; a judge error is a loss), with the Wilson
interval of (sum of preferences) / n (`a2rl.stats.wilson_interval`: conservative for a mean of
scores in [0, 1]).

Length-controlled win rate (a reduced form of AlpacaEval 2.0's GLM): a logistic regression of
the preference on the length difference,

    logit P(win_i) = a + b * tanh((len(model_i) - len(ref_i)) / sd),

where lengths are in characters and sd is the (population) standard deviation of the length
differences over the items scored (AlpacaEval normalizes the same way). AlpacaEval's GLM also has
an instruction-difficulty term estimated from many models' annotations; with one model that term
is not identifiable, so it is dropped. The fit is maximum likelihood by Newton-Raphson with
fractional targets (draws are 0.5) and a tiny ridge (1e-4 on a and b) that only matters under
separation. The LC win rate is the prediction at zero length difference, sigmoid(a).

Its 95% interval is a percentile bootstrap over items (`a2rl.stats.bootstrap_interval`), the fit
(and sd) redone on every resample: the statistic is a regression, not a mean, so no closed form
covers it, and resampling keeps the interval inside [0, 1] and carries over unchanged to the
paired improvement of two evaluations on the same items (`lc_statistic` on shared resamples).
The fit runs on all resamples at once, items weighted by how often a resample drew them.
When every preference is equal (all wins, all losses), the logistic MLE does not exist and the
LC win rate is the raw win rate with its Wilson interval (`method` says so); a resample whose
drawn preferences are all equal likewise gives its raw win rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from a2rl.stats import BOOTSTRAP_METHOD, bootstrap_interval, wilson_interval

RIDGE = 1e-4
LC_METHOD = f"logistic(pref ~ 1 + tanh(len_diff / sd)), sigmoid(intercept), {BOOTSTRAP_METHOD}"


def win_rate(preferences: Sequence[float]) -> dict[str, Any]:
    n = len(preferences)
    total = float(sum(preferences))
    low, high = wilson_interval(total, n)
    return {"win_rate": total / n if n else 0.0, "ci": [low, high]}


def lc_fit(preferences: np.ndarray, length_diff: np.ndarray,
           weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, sd) per row of `weights` (rows of item weights, e.g. bootstrap counts)."""
    y, d = np.asarray(preferences, dtype=float), np.asarray(length_diff, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    total = w.sum(axis=1, keepdims=True)
    mean = (w @ d)[:, None] / total
    sd = np.sqrt((w * (d - mean) ** 2).sum(axis=1, keepdims=True) / total)
    safe = np.where(sd > 0, sd, 1.0)
    x = np.where(sd > 0, np.tanh(d / safe), 0.0)
    a, b = np.zeros(len(w)), np.zeros(len(w))
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (a[:, None] + b[:, None] * x)))
        r = w * (y - p)
        ga, gb = r.sum(axis=1) - RIDGE * a, (r * x).sum(axis=1) - RIDGE * b
        h = w * p * (1 - p)
        haa, hab = h.sum(axis=1) + RIDGE, (h * x).sum(axis=1)
        hbb = (h * x * x).sum(axis=1) + RIDGE
        det = haa * hbb - hab * hab
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        a, b = a + da, b + db
        if float(np.max(np.abs(np.concatenate([da, db])))) < 1e-10:
            break
    return a, b, sd[:, 0]


def lc_statistic(preferences: Sequence[float], model_lengths: Sequence[int],
                 reference_lengths: Sequence[int], weights: np.ndarray) -> np.ndarray:
    """The LC win rate per row of item weights; a row whose weighted preferences are all
    equal gives its raw (weighted) win rate, as the unweighted case does."""
    y = np.asarray(preferences, dtype=float)
    d = np.asarray(model_lengths, dtype=float) - np.asarray(reference_lengths, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    a, _, _ = lc_fit(y, d, w)
    drawn = w > 0
    lowest = np.where(drawn, y, np.inf).min(axis=1)
    highest = np.where(drawn, y, -np.inf).max(axis=1)
    raw = (w @ y) / w.sum(axis=1)
    return np.where(lowest == highest, raw, 0.5 * (1.0 + np.tanh(0.5 * a)))


def length_controlled_win_rate(preferences: Sequence[float], model_lengths: Sequence[int],
                               reference_lengths: Sequence[int]) -> dict[str, Any]:
    """{"lc_win_rate", "ci", "intercept", "slope", "sd", "method"} for the items given."""
    y = np.asarray(preferences, dtype=float)
    n = len(y)
    if not (len(model_lengths) == len(reference_lengths) == n):
        raise ValueError("preferences and lengths differ in length")
    raw = win_rate(preferences)
    if n == 0 or np.all(y == y[0]):
        return {"lc_win_rate": raw["win_rate"], "ci": raw["ci"], "intercept": None,
                "slope": None, "sd": None,
                "method": "degenerate (all preferences equal): raw win rate, Wilson CI"}
    diff = np.asarray(model_lengths, dtype=float) - np.asarray(reference_lengths, dtype=float)
    a, b, sd = lc_fit(y, diff, np.ones((1, n)))
    estimate = float(0.5 * (1.0 + np.tanh(0.5 * a[0])))
    low, high = bootstrap_interval(
        lambda w: lc_statistic(y, model_lengths, reference_lengths, w), n)
    return {"lc_win_rate": estimate, "ci": [low, high],
            "intercept": float(a[0]), "slope": float(b[0]), "sd": float(sd[0]),
            "method": LC_METHOD}
