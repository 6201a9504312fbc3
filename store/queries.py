"""Read-only queries the CLI and analysis share. Pure reads: no side effects."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlmodel import select

from .db import Store
from .models import Evaluation, Job, Revision, Run, Submission, ToolCall


def _count(s: Any, model: Any, run_id: str) -> int:
    return s.exec(select(func.count()).select_from(model).where(model.run_id == run_id)).one()


def list_runs(store: Store) -> list[dict[str, Any]]:
    with store.session() as s:
        runs = s.exec(select(Run).order_by(Run.created_at.desc())).all()  # type: ignore[attr-defined]
        calls = dict(s.exec(select(ToolCall.run_id, func.count()).group_by(ToolCall.run_id)).all())
    return [{"run_id": r.id, "task": r.task_id, "agent": r.agent, "status": r.status,
             "created_at": r.created_at.isoformat(), "tool_calls": calls.get(r.id, 0),
             "baseline_score": r.baseline_test, "final_score": r.final_score} for r in runs]


def run_summary(store: Store, run_id: str) -> dict[str, Any] | None:
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            return None
        doc = run.model_dump(mode="json", exclude={"token_hash"})
        doc["tool_calls"] = _count(s, ToolCall, run_id)
        doc["tool_errors"] = s.exec(select(func.count()).select_from(ToolCall).where(
            ToolCall.run_id == run_id, ToolCall.is_error)).one()
        doc["revisions"] = _count(s, Revision, run_id)
        doc["jobs"] = _count(s, Job, run_id)
        doc["submissions"] = _count(s, Submission, run_id)
    return doc


def baseline_evaluation(s: Any, run: Run, split: str) -> Evaluation | None:
    """The baseline evaluation a run's `baseline_<split>` came from.

    Runs record the baseline's score, not its row (it is cached across runs), so this is the
    oldest baseline evaluation of that split with that score. Reports take the test split's
    sample size from it, and exports carry it along.
    """
    score = run.baseline_test if split == "test" else run.baseline_dev
    if score is None:
        return None
    return s.exec(select(Evaluation).where(
        Evaluation.kind == "baseline", Evaluation.split == split, Evaluation.score == score)
        .order_by(Evaluation.id)).first()  # type: ignore[arg-type]


def best_submission(store: Store, run_id: str, split: str) -> tuple[Submission, Any] | None:
    """The best graded submission of a run on `split`; ties go to the earliest."""
    with store.session() as s:
        rows = s.exec(select(Submission, Evaluation).join(
            Evaluation, Evaluation.submission_id == Submission.id).where(  # type: ignore[arg-type]
            Submission.run_id == run_id, Evaluation.split == split,
            Evaluation.kind == "submission", Evaluation.status == "done")
            .order_by(Submission.created_at)).all()  # type: ignore[arg-type]
    best = None
    for sub, ev in rows:
        if ev.score is not None and (best is None or ev.score > best[1].score):
            best = (sub, ev)
    return best
