"""Finalization: the run's final score, by protocol, from the stored checkpoint copies.

Under `heldout` the best-dev submission (ties: the earliest) is scored once on the hidden
test split and that is the final score. Under `paper` every submission was scored on test
and the final score is the best. With no valid submission the final score is the baseline's
test score and the improvement is 0. Checkpoint copies that can no longer matter are deleted.

Only this run's queued requests are graded here, each with its run's follow-up (`grade_next`):
another run's requests wait for a process serving it. One of this run's requests that another
process is grading is waited for (bounded by its lease), so the best submission is picked with
every evaluation accepted before the deadline.
"""

from __future__ import annotations

from sqlmodel import col, select

from a2rl.grading import enqueue, lease_owner
from a2rl.grading.pruning import prune_copies
from a2rl.settings import Settings
from a2rl.store import Evaluation, EvaluationKind, EvaluationStatus, Run, Store
from a2rl.store.queries import best_submission
from a2rl.store.records import runs

from .grading import grade_queued


def _test_score(store: Store, submission_id: str) -> Evaluation | None:
    with store.session() as s:
        return s.exec(select(Evaluation).where(
            Evaluation.submission_id == submission_id, Evaluation.split == "test",
            Evaluation.kind == EvaluationKind.submission,
            Evaluation.status == EvaluationStatus.done,
            col(Evaluation.superseded_by).is_(None))).first()


def finalize_scores(settings: Settings, store: Store, run_id: str) -> Run:
    """Grade what the run still has queued, score its final submission, prune copies."""
    owner = lease_owner()
    grade_queued(store, settings, run_id, owner)  # every submission accepted before the deadline
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
    final_sub, final = None, run.baseline_test
    split = run.config.feedback_split  # the best submission by the scores the agent saw
    best = best_submission(store, run_id, split)
    if best is not None and split == "test":  # scored on test already
        final_sub, final = best[0].id, best[1].score
    elif best is not None:  # the best on dev, scored on test now
        if _test_score(store, best[0].id) is None:
            enqueue(store, run_id, best[0].id, "test")
            grade_queued(store, settings, run_id, owner)
        ev = _test_score(store, best[0].id)
        if ev is not None:
            final_sub, final = best[0].id, ev.score
    run = runs.set_final(store, run_id, final, final_sub)
    prune_copies(store, run_id, keep=final_sub, final=True)
    return run
