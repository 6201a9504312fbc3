"""budget_status, and the rule that ends a run's work at its deadline."""

from __future__ import annotations

from sqlalchemy import func
from sqlmodel import select

from a2rl.store import BudgetEvent, Job, Submission, utcnow

from .results import BudgetStatus
from .runtime import RunRuntime, aware, current
from .sandbox.base import JobState


def compute_budget(rt: RunRuntime) -> BudgetStatus:
    run = rt.run()
    now = utcnow()
    started, deadline = aware(run.started_at), aware(run.deadline)
    used = (now - started).total_seconds() if started else 0.0
    remaining = (deadline - now).total_seconds() if deadline else run.budget_s
    with rt.store.session() as s:
        running = s.exec(select(func.count()).select_from(Job).where(
            Job.run_id == run.id, Job.state == JobState.running)).one()
        submitted = s.exec(select(func.count()).select_from(Submission).where(
            Submission.run_id == run.id, Submission.status != "refused")).one()
        grading = s.exec(select(BudgetEvent).where(
            BudgetEvent.run_id == run.id, BudgetEvent.kind == "grading")).all()
    return BudgetStatus(
        budget_s=run.budget_s, used_s=round(min(max(used, 0.0), run.budget_s), 3),
        remaining_s=round(max(remaining, 0.0), 3), clock_started=started is not None,
        deadline=deadline.isoformat() if deadline else None,
        exhausted=bool(deadline and now >= deadline) or run.ended_at is not None,
        jobs_running=running, submissions_used=submitted, max_submissions=run.max_submissions,
        grading_s=round(sum(float(e.detail.get("seconds", 0)) for e in grading), 3),
    )


async def budget_status() -> BudgetStatus:
    """Time and submissions left in this run, and how many jobs are running.

    After the deadline every other tool refuses to work; this one still answers.
    """
    import anyio

    return await anyio.to_thread.run_sync(compute_budget, current().runtime)
