"""AlpacaEval's paired improvement interval: of its length-controlled win rate, which is not a
share of items correct, so the default interval (`a2rl.tasks.improvement`) does not apply.

A paired percentile bootstrap: every resample draws the same instructions for both
evaluations and refits the length-control regression, under the `a2rl` profile ours
(`length_control`), under `paper` alpaca_eval's GLM with its precomputed `df_gamed.csv`
(`paper_length_control`, refitted with the penalty its cross-validation chose). Each first
recomputes the stored scores from the per-item results (the judge's preference and both
lengths, kept in each item's `parsed`), so a score computed some other way gets no interval.
`AlpacaEvalTask.paired_interval` is `lc_interval`. Pure, but for reading `df_gamed.csv`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from a2rl.stats import (
    PAIRED_BOOTSTRAP_METHOD,
    bootstrap_interval,
    clip_difference,
    paired_bootstrap_method,
)

from ..improvement import SCORE_TOLERANCE, IntervalResult, PairedInterval, Scored
from .length_control import lc_statistic


def _profile(scored: Scored) -> str:
    """The evaluation's profile; a `paper` score is also known by its GLM weights (an
    evaluation whose provenance does not say)."""
    if "profile" in scored.provenance:
        return scored.profile
    return "paper" if "lc_weights" in scored.metrics else "a2rl"


def lc_interval(final: Scored, base: Scored) -> IntervalResult:
    """The paired interval of two LC win rates, under the evaluations' profile."""
    if _profile(final) == "paper":
        return _paper_lc_interval(final, base)
    return _a2rl_lc_interval(final, base)


def _preferences(items: Any) -> tuple[list[float], list[int], list[int]]:
    """The per-item record (preference, both lengths) from each item's `parsed`."""
    prefs, model_len, ref_len = [], [], []
    for it in items:
        rec = json.loads(it.get("parsed") or "{}")
        prefs.append(float(rec["preference"]))
        model_len.append(int(rec["model_length"]))
        ref_len.append(int(rec["reference_length"]))
    return prefs, model_len, ref_len


def _a2rl_lc_interval(final: Scored, base: Scored) -> IntervalResult:
    try:
        y1, m1, r1 = _preferences(final.items)
        y0, m0, r0 = _preferences(base.items)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        return None, "no interval: the per-item results lack the judge's preferences"
    n = len(final.items)
    ones = np.ones((1, n))
    if (abs(float(lc_statistic(y1, m1, r1, ones)[0]) - final.score) > SCORE_TOLERANCE
            or abs(float(lc_statistic(y0, m0, r0, ones)[0]) - base.score) > SCORE_TOLERANCE):
        return None, ("no interval: the length-controlled win rate recomputed from the items "
                      "differs from the stored score (a different length-control method)")
    low, high = bootstrap_interval(
        lambda w: lc_statistic(y1, m1, r1, w) - lc_statistic(y0, m0, r0, w), n)
    low, high = clip_difference(low, high, -base.score, 1.0 - base.score)
    return PairedInterval(estimate=final.score - base.score, low=low, high=high,
                          method=PAIRED_BOOTSTRAP_METHOD + " of the LC win rate",
                          n_paired=n), None


def _paper_annotations(items: Any) -> Any:
    """alpaca_eval's annotations frame of a `paper` evaluation's items (preference on its
    1 / 1.5 / 2 scale, None unparsed; the instruction's position from the item id)."""
    from .paper_length_control import annotations_frame

    prefs: list[float | None] = []
    for it in items:
        rec = json.loads(it.get("parsed") or "{}")
        pref = rec["preference"]
        prefs.append(None if pref is None else float(pref) - 1.0)  # the frame's own scale
    return annotations_frame([int(str(it["id"]).rsplit("-", 1)[1]) for it in items],
                             [str(it.get("prompt", "")) for it in items],
                             [str(it["output"]) for it in items],
                             [str(it["expected"]) for it in items], prefs)


def _data_dir(scored: Scored) -> Path | None:
    folder = (scored.provenance.get("task_options") or {}).get("data_dir")
    return Path(folder).expanduser() if folder else None


#: Intervals of `paper` evaluations by their content: each refits alpaca_eval's GLM hundreds
#: of times (seconds), and a viewer or `a2rl compare` asks for the same ones again.
_PAPER_LC_CACHE: dict[str, IntervalResult] = {}
_PAPER_LC_CACHE_SIZE = 64


def _paper_lc(final: Scored, base: Scored, data_dir: str | None) -> IntervalResult:
    """The paired interval of two `paper` evaluations' LC win rates."""
    from . import paper_length_control as paper_lc

    try:
        frames = _paper_annotations(final.items), _paper_annotations(base.items)
    except (KeyError, TypeError, ValueError, IndexError, json.JSONDecodeError):
        return None, "no interval: the per-item results lack the judge's preferences"
    try:
        gamed = paper_lc.load_df_gamed(Path(data_dir) if data_dir else None)
    except (OSError, RuntimeError) as exc:
        return None, f"no interval: alpaca_eval's df_gamed.csv is unavailable ({exc})"
    designs = []
    for frame, score in zip(frames, (final.score, base.score), strict=True):
        if frame["preference"].isna().all():
            return None, "no interval: an evaluation has no parsable annotation"
        lc = paper_lc.length_controlled_win_rate(frame, gamed)
        if abs(lc["lc_win_rate"] - score) > SCORE_TOLERANCE:
            return None, ("no interval: the length-controlled win rate recomputed from the items "
                          "differs from the stored score (other annotations or df_gamed.csv)")
        designs.append(paper_lc.design(frame, gamed, lc["penalty_C"]))
    resamples = paper_lc.BOOTSTRAP_RESAMPLES
    n = len(final.items)
    if designs[0] == designs[1]:  # every item agrees: each resample's difference is 0
        low = high = 0.0
    else:
        low, high = bootstrap_interval(
            lambda w: paper_lc.lc_statistic(designs[0], w) - paper_lc.lc_statistic(designs[1], w),
            n, resamples=resamples)
    low, high = clip_difference(low, high, -base.score, 1.0 - base.score)
    return PairedInterval(estimate=final.score - base.score, low=low, high=high,
                          method=paired_bootstrap_method(resamples) + " of alpaca_eval's "
                          "length_controlled_v1 GLM, refitted with the penalty its CV chose",
                          n_paired=n), None


def _paper_lc_interval(final: Scored, base: Scored) -> IntervalResult:
    folder = _data_dir(final) or _data_dir(base)
    data_dir = str(folder) if folder else None
    key = hashlib.sha256(json.dumps([list(final.items), list(base.items), data_dir,
                                     final.score, base.score], sort_keys=True, default=str
                                    ).encode()).hexdigest()
    if key not in _PAPER_LC_CACHE:
        if len(_PAPER_LC_CACHE) >= _PAPER_LC_CACHE_SIZE:
            _PAPER_LC_CACHE.pop(next(iter(_PAPER_LC_CACHE)))
        _PAPER_LC_CACHE[key] = _paper_lc(final, base, data_dir)
    return _PAPER_LC_CACHE[key]
