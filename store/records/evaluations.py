"""`evaluation` rows (and the `regrade` and `baselinecache` rows that name them): each written
once, whole, when its grader process is done; the only change after is `superseded_by`, set
when a regrade made under the run's frozen config replaces the run's final evaluation.

Why written once: a score is re-derived from its row (its items, its provenance), so a row
must never say something other than what its grader said. A grader's outcome reaches here as
a `NewEvaluation` (a value, not a row): its scores, or the error that stopped it; the row's
status follows (`done` with scores, `failed` without).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from ..db import Store
from ..models import BaselineCache, Evaluation, Regrade
from ..status import EvaluationKind, EvaluationStatus
from .transition import WrongState


@dataclass(frozen=True)
class Scores:
    """What a grader process scored: the aggregate with its 95% interval, the per-item
    results, the metrics and the provenance."""

    score: float | None
    ci_low: float | None
    ci_high: float | None
    n_items: int
    metrics: dict[str, Any]
    items: list[dict[str, Any]]
    provenance: dict[str, Any]


@dataclass(frozen=True)
class NewEvaluation:
    """One evaluation to record: of a submission, a baseline, a stage or a second reading, on
    `split`; `scores` None when it failed (`error` says why). `metrics` are kept beside the
    scores' own, which win a name they share (a stage's job and checkpoint)."""

    split: str
    kind: EvaluationKind
    started_at: datetime
    ended_at: datetime | None
    scores: Scores | None = None
    error: str | None = None
    run_id: str | None = None
    submission_id: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def record(s: Session, new: NewEvaluation, regrade_id: int | None = None) -> Evaluation:
    """Insert `new` (in the caller's transaction) and return its row, id assigned."""
    scores = new.scores
    ev = Evaluation(
        run_id=new.run_id, submission_id=new.submission_id, kind=new.kind, split=new.split,
        status=EvaluationStatus.done if scores is not None else EvaluationStatus.failed,
        error=new.error, started_at=new.started_at, ended_at=new.ended_at,
        regrade_id=regrade_id, metrics={**new.metrics, **(scores.metrics if scores else {})})
    if scores is not None:
        ev.score, ev.ci_low, ev.ci_high = scores.score, scores.ci_low, scores.ci_high
        ev.n_items, ev.items, ev.provenance = scores.n_items, scores.items, scores.provenance
    s.add(ev)
    s.flush()
    return ev


def record_baseline(store: Store, key: str, new: NewEvaluation) -> None:
    """A baseline evaluation and its cache entry under `key` (`a2rl.grading.baseline`); a
    concurrent writer on another device that cached the split first wins (theirs is used)."""
    try:
        with store.session() as s:
            ev = record(s, new)
            assert ev.id is not None
            s.add(BaselineCache(key=key, split=new.split, evaluation_id=ev.id))
    except IntegrityError:
        pass


def supersede(s: Session, old_id: int, new_id: int) -> None:
    """Evaluation `old_id` is replaced by `new_id` as the run's current one (a regrade);
    `WrongState` if it was replaced already (a regrade replaces the current one only)."""
    old = s.get(Evaluation, old_id)
    if old is None:
        raise KeyError(f"no evaluation {old_id}")
    if old.superseded_by is not None:
        raise WrongState("evaluation", old_id, f"superseded by {old.superseded_by}",
                         f"superseded by {new_id}")
    old.superseded_by = new_id
    s.add(old)


def record_regrade(s: Session, final: NewEvaluation, baseline: NewEvaluation, *,
                   replaces: int | None, **columns: Any) -> tuple[Regrade, Evaluation,
                                                                 Evaluation]:
    """A regrade's row (`columns`: why, under which grader, the old and new scores, the
    verdicts that changed) and its two new evaluations naming it, in the caller's
    transaction; when it is `current`, the final evaluation `replaces` names its successor
    (the run's own columns follow: `records.runs.regraded`)."""
    row = Regrade(**columns)
    s.add(row)
    s.flush()
    new_final, new_base = record(s, final, row.id), record(s, baseline, row.id)
    row.new_final_id, row.new_baseline_id = new_final.id, new_base.id
    s.add(row)
    if row.current:
        assert replaces is not None and new_final.id is not None
        supersede(s, replaces, new_final.id)
    return row, new_final, new_base
