"""The improvement of a run with its paired 95% interval: final test minus base model's test
score, on the same items matched by id from the two evaluations' per-item results.

Pure. Which interval depends on what the score is, checked by recomputing the stored score
from the per-item results (so a score defined some other way gets no interval, never a wrong
one):
- the share of items correct (most tasks): Newcombe's paired method 10 (`a2rl.stats`);
- AlpacaEval's length-controlled win rate: a paired percentile bootstrap, every resample
  drawing the same items for both evaluations and refitting the length-control regression.
Where the interval cannot be computed (an old evaluation without per-item results, items that
differ), the interval is None and the returned note says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a2rl.stats import (
    NEWCOMBE_PAIRED_METHOD,
    PAIRED_BOOTSTRAP_METHOD,
    bootstrap_interval,
    clip_difference,
    paired_proportion_difference,
    within_noise,
)
from a2rl.tasks.alpacaeval.length_control import lc_statistic

from .schema import Interval

#: How far a score recomputed from its items may be from the stored one (float dust).
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Scored:
    """What the interval needs of one evaluation: its score, per-item results and metrics."""

    score: float
    items: Sequence[dict[str, Any]]
    metrics: dict[str, Any] = field(default_factory=dict)


def _by_id(items: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    out = {str(it.get("id")): it for it in items if "id" in it}
    return out if len(out) == len(items) else None


def _preferences(items: Sequence[dict[str, Any]]) -> tuple[list[float], list[int], list[int]]:
    """AlpacaEval's per-item record (preference, both lengths) from each item's `parsed`."""
    prefs, model_len, ref_len = [], [], []
    for it in items:
        rec = json.loads(it.get("parsed") or "{}")
        prefs.append(float(rec["preference"]))
        model_len.append(int(rec["model_length"]))
        ref_len.append(int(rec["reference_length"]))
    return prefs, model_len, ref_len


def _lc_interval(final: list[dict[str, Any]], base: list[dict[str, Any]], final_score: float,
                 base_score: float) -> tuple[Interval | None, str | None]:
    try:
        y1, m1, r1 = _preferences(final)
        y0, m0, r0 = _preferences(base)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        return None, "no interval: the per-item results lack the judge's preferences"
    ones = np.ones((1, len(final)))
    if (abs(float(lc_statistic(y1, m1, r1, ones)[0]) - final_score) > SCORE_TOLERANCE
            or abs(float(lc_statistic(y0, m0, r0, ones)[0]) - base_score) > SCORE_TOLERANCE):
        return None, ("no interval: the length-controlled win rate recomputed from the items "
                      "differs from the stored score (a different length-control method)")
    low, high = bootstrap_interval(
        lambda w: lc_statistic(y1, m1, r1, w) - lc_statistic(y0, m0, r0, w), len(final))
    low, high = clip_difference(low, high, -base_score, 1.0 - base_score)
    estimate = final_score - base_score
    return Interval(estimate=estimate, low=low, high=high, within_noise=within_noise(low, high),
                    method=PAIRED_BOOTSTRAP_METHOD + " of the LC win rate",
                    n_paired=len(final)), None


def paired_improvement(final: Scored, base: Scored) -> tuple[Interval | None, str | None]:
    """(interval, None), or (None, why there is none)."""
    if not final.items or not base.items:
        which = "final" if not final.items else "baseline"
        return None, (f"no interval: the {which} test evaluation kept no per-item results "
                      "(recorded by an older a2rl)")
    f_ids, b_ids = _by_id(final.items), _by_id(base.items)
    if f_ids is None or b_ids is None:
        return None, "no interval: per-item results without unique item ids"
    if set(f_ids) != set(b_ids):
        return None, (f"no interval: the final and baseline evaluations scored different items "
                      f"({len(set(f_ids) ^ set(b_ids))} ids in only one of them)")
    order = sorted(f_ids)
    f_items, b_items = [f_ids[i] for i in order], [b_ids[i] for i in order]
    if "lc_win_rate" in final.metrics or "lc_win_rate" in base.metrics:
        return _lc_interval(f_items, b_items, final.score, base.score)
    after = [bool(it.get("correct")) for it in f_items]
    before = [bool(it.get("correct")) for it in b_items]
    n = len(order)
    if (abs(sum(after) / n - final.score) > SCORE_TOLERANCE
            or abs(sum(before) / n - base.score) > SCORE_TOLERANCE):
        return None, ("no interval: the score is not the share of items correct, and a2rl "
                      "has no paired interval for how it is computed")
    estimate, low, high = paired_proportion_difference(after, before)
    return Interval(estimate=estimate, low=low, high=high, within_noise=within_noise(low, high),
                    method=NEWCOMBE_PAIRED_METHOD, n_paired=n), None
