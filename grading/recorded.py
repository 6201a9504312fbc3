"""A grader's result as the store records it (`a2rl.store.records.evaluations.Scores`).

One place turns an `EvalResult` into the scores an evaluation row holds, for the queue, the
baseline, a regrade and a stage alike: the items dumped, and the wall time of the grader
process among the metrics where it was measured.
"""

from __future__ import annotations

from a2rl.store.records.evaluations import Scores

from .evaluate import EvalResult


def scores_of(result: EvalResult, elapsed_s: float | None = None) -> Scores:
    """`result`'s scores; with `elapsed_s`, the grader process's wall time as `wall_s`."""
    metrics = dict(result.metrics)
    if elapsed_s is not None:
        metrics["wall_s"] = round(elapsed_s, 3)
    return Scores(score=result.score, ci_low=result.ci_low, ci_high=result.ci_high,
                  n_items=result.n_items, metrics=metrics,
                  items=[it.model_dump() for it in result.items], provenance=result.provenance)
