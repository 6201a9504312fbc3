"""budget_status: the run's clock as the agent sees it, with its jobs and submissions.

The clock itself (start, deadline, grading time, exhaustion) is the server's, read here through
`seam.RunClockView`; the rule that refuses work after the deadline is the server's too
(`A2RLServer.call_tool`).
"""

from __future__ import annotations

from sqlalchemy import func
from sqlmodel import select

from a2rl.store import GradingClock, Job, JobState, Submission, SubmissionStatus

from .results import BudgetStatus
from .runtime import RunRuntime, current, in_thread


def compute_budget(rt: RunRuntime) -> BudgetStatus:
    run = rt.clock.run()
    clock = rt.clock.read(row=run)
    credits = rt.clock.credits()
    with rt.store.session() as s:
        running = s.exec(select(func.count()).select_from(Job).where(
            Job.run_id == run.id, Job.state == JobState.running)).one()
        submitted = s.exec(select(func.count()).select_from(Submission).where(
            Submission.run_id == run.id, Submission.status != SubmissionStatus.refused)).one()
    return BudgetStatus(
        budget_s=clock.budget_s, used_s=round(clock.used_s, 3),
        remaining_s=round(clock.remaining_s, 3), clock_started=clock.started_at is not None,
        deadline=clock.deadline.isoformat() if clock.deadline else None,
        exhausted=clock.exhausted, jobs_running=running, submissions_used=submitted,
        max_submissions=run.max_submissions, grading_s=round(rt.clock.grading_s(), 3),
        grading_pause_credit_s=round(credits.pause_s, 3),
        grading_pause_cap_s=round(run.budget_s * rt.grading_settings.pause_cap_fraction, 3)
        if run.grading_clock == GradingClock.paused else 0.0,
        grading_wait_credit_s=round(credits.wait_s, 3),
        grading_credit_cap_s=round(run.budget_s * rt.grading_settings.pause_cap_fraction, 3),
        max_pending_grades=rt.grading_settings.max_pending_grades,
        submission_checks_per_minute=rt.grading_settings.submission_checks_per_minute,
    )


async def budget_status() -> BudgetStatus:
    """Time and submissions left in this run, and how many jobs are running.

    After the deadline every other tool refuses to work; this one still answers.
    """
    return await in_thread(compute_budget, current().runtime)
