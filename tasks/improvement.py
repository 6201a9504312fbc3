"""The paired improvement interval a task declares: what its score is decides how the final
and the baseline test evaluations pair into a 95% interval of the improvement.

`Task.paired_interval(final, base)` is handed the two evaluations with their per-item results
already matched by id and in the same order (`a2rl.analysis.improvement` does the matching and
the checks every interval shares). The default, `proportion_interval`, is for a score that is
the share of items correct (most tasks): Newcombe's paired method 10 (`a2rl.stats`). A task
whose score is something else overrides `paired_interval` (AlpacaEval's length-controlled win
rate: `tasks/alpacaeval/improvement.py`). Every interval first recomputes the stored score
from the per-item results, so that a score defined some other way gets no interval, never a
wrong one, and the note says why. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from a2rl.stats import NEWCOMBE_PAIRED_METHOD, paired_proportion_difference, within_noise

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
        """The evaluation profile it was scored under; one recorded before profiles were
        recorded is `a2rl`."""
        return str(self.provenance.get("profile") or "a2rl")


@dataclass(frozen=True)
class PairedInterval:
    """The improvement (final minus baseline) with its paired 95% interval."""

    estimate: float
    low: float
    high: float
    method: str  # how it was computed, as the report shows it
    n_paired: int  # items matched by id in both evaluations

    @property
    def within_noise(self) -> bool:
        """The interval contains 0."""
        return within_noise(self.low, self.high)


#: (interval, None), or (None, why there is none): every paired interval's answer
IntervalResult = tuple[PairedInterval | None, str | None]


def proportion_interval(final: Scored, base: Scored) -> IntervalResult:
    """The paired interval of two shares of items correct (Newcombe's method 10), when both
    stored scores are those shares; else None and why."""
    after = [bool(it.get("correct")) for it in final.items]
    before = [bool(it.get("correct")) for it in base.items]
    n = len(after)
    if (abs(sum(after) / n - final.score) > SCORE_TOLERANCE
            or abs(sum(before) / n - base.score) > SCORE_TOLERANCE):
        return None, ("no interval: the score is not the share of items correct, and the "
                      "task declares no paired interval for how it is computed")
    estimate, low, high = paired_proportion_difference(after, before)
    return PairedInterval(estimate=estimate, low=low, high=high,
                          method=NEWCOMBE_PAIRED_METHOD, n_paired=n), None
