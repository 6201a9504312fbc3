"""The improvement of a run with its paired 95% interval: final test minus base model's test
score, on the same items matched by id from the two evaluations' per-item results.

Pure. Which interval depends on what the score is, checked by recomputing the stored score
from the per-item results (so a score defined some other way gets no interval, never a wrong
one):
- the share of items correct (most tasks): Newcombe's paired method 10 (`a2rl.stats`);
- AlpacaEval's length-controlled win rate: a paired percentile bootstrap, every resample
  drawing the same items for both evaluations and refitting the length-control regression
  (under the `paper` profile alpaca_eval's GLM, with its precomputed `df_gamed.csv`).
Where the interval cannot be computed (an old evaluation without per-item results, items that
differ), the interval is None and the returned note says why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from a2rl.stats import (
    NEWCOMBE_PAIRED_METHOD,
    PAIRED_BOOTSTRAP_METHOD,
    bootstrap_interval,
    clip_difference,
    paired_bootstrap_method,
    paired_proportion_difference,
    within_noise,
)
from a2rl.tasks.alpacaeval.length_control import lc_statistic

from .schema import Interval

#: How far a score recomputed from its items may be from the stored one (float dust).
SCORE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Scored:
    """What the interval needs of one evaluation: its score, per-item results, metrics and
    provenance (its profile, and the options it was scored with)."""

    score: float
    items: Sequence[dict[str, Any]]
    metrics: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def profile(self) -> str:
        """The evaluation profile; an evaluation recorded before profiles existed is `a2rl`,
        and a `paper` AlpacaEval score is known by its GLM weights in any case."""
        if "profile" in self.provenance:
            return str(self.provenance["profile"])
        return "paper" if "lc_weights" in self.metrics else "a2rl"


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


def _paper_annotations(items: list[dict[str, Any]]) -> Any:
    """alpaca_eval's annotations frame of a `paper` evaluation's items (preference on its
    1 / 1.5 / 2 scale, None unparsed; the instruction's position from the item id)."""
    from a2rl.tasks.alpacaeval.paper_length_control import annotations_frame

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


#: Intervals of `paper` AlpacaEval evaluations by their content: each refits alpaca_eval's GLM
#: hundreds of times (seconds), and a viewer or `a2rl compare` asks for the same ones again.
_PAPER_LC_CACHE: dict[str, tuple[Interval | None, str | None]] = {}
_PAPER_LC_CACHE_SIZE = 64


def _paper_lc(final: list[dict[str, Any]], base: list[dict[str, Any]], data_dir: str | None,
              final_score: float, base_score: float) -> tuple[Interval | None, str | None]:
    """The paired interval of two `paper` AlpacaEval evaluations' LC win rates."""
    from a2rl.tasks.alpacaeval import paper_length_control as paper_lc

    try:
        frames = _paper_annotations(final), _paper_annotations(base)
    except (KeyError, TypeError, ValueError, IndexError, json.JSONDecodeError):
        return None, "no interval: the per-item results lack the judge's preferences"
    try:
        gamed = paper_lc.load_df_gamed(Path(data_dir) if data_dir else None)
    except (OSError, RuntimeError) as exc:
        return None, f"no interval: alpaca_eval's df_gamed.csv is unavailable ({exc})"
    designs = []
    for frame, score in zip(frames, (final_score, base_score), strict=True):
        if frame["preference"].isna().all():
            return None, "no interval: an evaluation has no parsable annotation"
        lc = paper_lc.length_controlled_win_rate(frame, gamed)
        if abs(lc["lc_win_rate"] - score) > SCORE_TOLERANCE:
            return None, ("no interval: the length-controlled win rate recomputed from the items "
                          "differs from the stored score (other annotations or df_gamed.csv)")
        designs.append(paper_lc.design(frame, gamed, lc["penalty_C"]))
    resamples = paper_lc.BOOTSTRAP_RESAMPLES
    if designs[0] == designs[1]:  # every item agrees: each resample's difference is 0
        low = high = 0.0
    else:
        low, high = bootstrap_interval(
            lambda w: paper_lc.lc_statistic(designs[0], w) - paper_lc.lc_statistic(designs[1], w),
            len(final), resamples=resamples)
    low, high = clip_difference(low, high, -base_score, 1.0 - base_score)
    return Interval(estimate=final_score - base_score, low=low, high=high,
                    within_noise=within_noise(low, high),
                    method=paired_bootstrap_method(resamples) + " of alpaca_eval's "
                    "length_controlled_v1 GLM, refitted with the penalty its CV chose",
                    n_paired=len(final)), None


def _paper_lc_interval(final_items: list[dict[str, Any]], base_items: list[dict[str, Any]],
                       final: Scored, base: Scored) -> tuple[Interval | None, str | None]:
    folder = _data_dir(final) or _data_dir(base)
    data_dir = str(folder) if folder else None
    key = hashlib.sha256(json.dumps([final_items, base_items, data_dir, final.score,
                                     base.score], sort_keys=True, default=str).encode()
                         ).hexdigest()
    if key not in _PAPER_LC_CACHE:
        if len(_PAPER_LC_CACHE) >= _PAPER_LC_CACHE_SIZE:
            _PAPER_LC_CACHE.pop(next(iter(_PAPER_LC_CACHE)))
        _PAPER_LC_CACHE[key] = _paper_lc(final_items, base_items, data_dir, final.score,
                                         base.score)
    return _PAPER_LC_CACHE[key]


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
    if final.profile != base.profile:
        return None, (f"no interval: the final evaluation was scored under the "
                      f"{final.profile!r} profile and the baseline under {base.profile!r}")
    if "lc_win_rate" in final.metrics or "lc_win_rate" in base.metrics:
        if final.profile == "paper":
            return _paper_lc_interval(f_items, b_items, final, base)
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
