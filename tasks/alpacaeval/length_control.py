"""Win rate and length-controlled win rate, each with a 95% interval.

Win rate: the mean preference (1 win, 0.5 draw, 0 loss; a judge error is a loss), with the Wilson
interval of (sum of preferences) / n.

Length-controlled win rate (a reduced form of AlpacaEval 2.0's GLM): a logistic regression of
the preference on the length difference,

    logit P(win_i) = a + b * tanh((len(model_i) - len(ref_i)) / sd),

where lengths are in characters and sd is the (population) standard deviation of the length
differences over the items scored (AlpacaEval normalizes the same way). AlpacaEval's GLM also has
an instruction-difficulty term estimated from many models' annotations; with one model that term
is not identifiable, so it is dropped. The fit is maximum likelihood by Newton-Raphson with
fractional targets (draws are 0.5) and a tiny ridge (1e-4 on a and b) that only matters under
separation. The LC win rate is the prediction at zero length difference, sigmoid(a), and its 95%
interval is sigmoid(a +/- 1.96 se(a)), se from the inverse Hessian (delta method on the logit
scale). When every preference is equal (all wins, all losses), the logistic MLE does not exist and
the LC win rate is the raw win rate with its Wilson interval (`method` says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Z_95 = 1.959963984540054
RIDGE = 1e-4
LC_METHOD = "logistic(pref ~ 1 + tanh(len_diff / sd)), sigmoid(intercept), delta-method 95% CI"


def wilson(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def win_rate(preferences: Sequence[float]) -> dict[str, Any]:
    n = len(preferences)
    total = float(sum(preferences))
    low, high = wilson(total, n)
    return {"win_rate": total / n if n else 0.0, "ci": [low, high]}


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
    sd = float(diff.std())
    x = np.tanh(diff / sd) if sd > 0 else np.zeros(n)
    design = np.column_stack([np.ones(n), x])
    theta = np.zeros(2)
    hessian = np.eye(2)
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (design @ theta)))
        grad = design.T @ (y - p) - RIDGE * theta
        hessian = (design * (p * (1 - p))[:, None]).T @ design + RIDGE * np.eye(2)
        step = np.linalg.solve(hessian, grad)
        theta = theta + step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    p = 0.5 * (1.0 + np.tanh(0.5 * (design @ theta)))
    hessian = (design * (p * (1 - p))[:, None]).T @ design + RIDGE * np.eye(2)
    se = math.sqrt(float(np.linalg.inv(hessian)[0, 0]))
    a, b = float(theta[0]), float(theta[1])
    return {"lc_win_rate": _sigmoid(a), "ci": [_sigmoid(a - Z_95 * se), _sigmoid(a + Z_95 * se)],
            "intercept": a, "slope": b, "sd": sd, "method": LC_METHOD}
