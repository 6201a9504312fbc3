"""`run` rows: made, their clock started and moved, their status, their end, their final
score, what the orchestrator saw of their agent, who holds them, a regrade made current.

The clock's rules (when it starts, what grading gives back, the cap) are the server's
(`a2rl.server.run.RunClock`, which reads the row and calls these); here is each change as one
transaction, with the run's row locked (`FOR UPDATE`; SQLite's `BEGIN IMMEDIATE` serializes
writers anyway) wherever two processes serving one run may change it at once, and the
`budgetevent` that goes with it written in the same transaction (`records.budget`).

What the row refuses: a clock started twice (the second start returns the row as it is), a
deadline moved or credited after the run ended, a status changed after it ended, a second
end (the first one stays: a node that finalized its run just as the fleet gave up on it
wins).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, select

from ..db import Store
from ..models import Evaluation, Run, aware, utcnow
from ..outcome import derive_end_kind
from ..status import EndKind, GradingClock, RunStatus
from . import budget

#: The columns the orchestrator writes of the run's agent (`record_agent`): its version, how
#: it ended, its exit code and last error, its transcript's and stderr's blobs.
AGENT_FIELDS = frozenset({"agent_version", "agent_status", "agent_exit_code", "agent_error",
                          "agent_transcript_sha", "agent_stderr_sha"})


class NoSuchRun(KeyError):
    """No run row with that id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} does not exist")


def _locked(s: Session, run_id: str) -> Run | None:
    run: Run | None = s.exec(select(Run).where(Run.id == run_id).with_for_update()).first()
    return run


def _locked_or_refused(s: Session, run_id: str) -> Run:
    """The run's row, locked; `NoSuchRun` when there is none."""
    run = _locked(s, run_id)
    if run is None:
        raise NoSuchRun(run_id)
    return run


def _start(s: Session, run: Run, now: datetime) -> None:
    run.started_at, run.deadline = now, now + timedelta(seconds=run.budget_s)
    run.status = RunStatus.running
    budget.clock_started(s, run, now)
    s.add(run)


def create(store: Store, *, start_clock: bool = False, **columns: Any) -> Run:
    """A new run row of `columns` (validated as `Run` validates them); with `start_clock`
    its clock starts now, in the same transaction (`a2rl run`)."""
    run = Run(**columns)
    with store.session() as s:
        s.add(run)
        if start_clock:
            _start(s, run, utcnow())
    return run


def start_clock(store: Store, run_id: str) -> tuple[Run, bool]:
    """Start the run's clock if it has not started (a run made with `a2rl create` starts at
    its first tool call): the row, and whether it started now. Two processes serving the run
    start one clock."""
    with store.session() as s:
        run = _locked_or_refused(s, run_id)
        if run.started_at is not None:
            return run, False
        _start(s, run, utcnow())
        return run, True


def move_deadline(store: Store, run_id: str, seconds: float) -> datetime | None:
    """Move the deadline `seconds` later (earlier when negative); the new deadline, or None
    for a run whose clock has not started or that ended."""
    with store.session() as s:
        run = _locked(s, run_id)
        if run is None or run.deadline is None or run.ended_at is not None:
            return None
        run.deadline = aware(run.deadline) + timedelta(seconds=seconds)  # type: ignore[operator]
        s.add(run)
        return run.deadline


def record_grading(store: Store, run_id: str, seconds: float, submission_id: str | None,
                   split: str | None, *, pause_credit_s: float | None, credited_s: float,
                   waited_s: float, cap_s: float | None) -> datetime | None:
    """One evaluation's grading time on the run's clock and what it gives back; the new
    deadline when it moved. The rules are `RunClock.record_grading`'s (its docstring); one
    transaction with the row locked, so that two processes grading the run's requests at
    once give a wait back once."""
    with store.session() as s:
        run = _locked(s, run_id)
        if run is None:
            return None
        paused = run.grading_clock == GradingClock.paused
        pause = (seconds if paused else 0.0) if pause_credit_s is None else pause_credit_s
        given = budget.grading_details(s, run.id)
        wait_given = sum(float(d.get("wait_credit_s", 0)) for d in given)
        pause_given = sum(float(d.get("pause_credit_s", 0)) for d in given)
        wait = max(waited_s - wait_given, 0.0)
        if cap_s is not None:
            wait = min(wait, max(cap_s - pause_given - pause - wait_given, 0.0))
        budget.graded(s, run.id, {
            "seconds": round(seconds, 3), "submission_id": submission_id, "split": split,
            "pause_credit_s": round(pause, 3), "wait_credit_s": round(wait, 3)})
        move = pause - credited_s + round(wait, 3)
        if move <= 0 or run.deadline is None or run.ended_at is not None:
            return None
        run.deadline = aware(run.deadline) + timedelta(seconds=move)  # type: ignore[operator]
        s.add(run)
        return run.deadline


def set_status(store: Store, run_id: str, status: RunStatus) -> bool:
    """Set a live run's status (`finalizing` while it is finished); False, nothing written,
    for a run that has ended (its end is `close`'s and stays)."""
    with store.session() as s:
        run = _locked_or_refused(s, run_id)
        if run.ended_at is not None:
            return False
        run.status = status
        s.add(run)
        return True


def close(store: Store, run_id: str, reason: str, status: RunStatus = RunStatus.finished,
          end_kind: EndKind | None = None) -> Run:
    """End the run for good, for `reason`, `finished` (finalized) or `failed` (it could not
    finalize: its fleet node was lost), with its `finished` event. `end_kind` is stored as
    given, or derived from the closed row (`a2rl.store.outcome`). A run that has already
    ended keeps its end (the row is locked for the check)."""
    with store.session() as s:
        run = _locked_or_refused(s, run_id)
        if run.ended_at is not None:
            return run
        run.ended_at, run.status, run.end_reason = utcnow(), status, reason
        run.end_kind = end_kind or derive_end_kind(run)
        s.add(run)
        budget.finished(s, run_id, {"reason": reason} if status == RunStatus.finished else {
            "reason": reason, "status": str(status)})
        return run


def set_final(store: Store, run_id: str, score: float | None,
              submission_id: str | None) -> Run:
    """The run's final score and the submission it is of (None: the baseline's)."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NoSuchRun(run_id)
        run.final_score, run.final_submission_id = score, submission_id
        s.add(run)
        return run


def record_agent(store: Store, run_id: str, **fields: Any) -> None:
    """What the orchestrator saw of the run's agent (`AGENT_FIELDS`); other columns are
    refused."""
    if unknown := set(fields) - AGENT_FIELDS:
        raise ValueError(f"not agent fields of a run: {sorted(unknown)}")
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NoSuchRun(run_id)
        for key, value in fields.items():
            setattr(run, key, value)
        s.add(run)


def swap_owner(store: Store, run_id: str, old: str | None, new: str) -> bool:
    """Set the live run's owner to `new` if it is still `old` (a compare-and-swap: of two
    processes taking a free run at once, one wins)."""
    with store.session() as s:
        res = s.exec(update(Run).where(  # type: ignore[call-overload]
            Run.id == run_id, Run.ended_at.is_(None),  # type: ignore[union-attr]
            Run.owner.is_(None) if old is None else Run.owner == old,  # type: ignore[union-attr]
        ).values(owner=new))
        return bool(res.rowcount == 1)


def regraded(s: Session, run_id: str, final: Evaluation, baseline: Evaluation) -> None:
    """A current regrade's scores become the run's (in the regrade's transaction,
    `records.evaluations.record_regrade`): its final score, its baseline test score and the
    baseline evaluation it pairs with."""
    run = s.get(Run, run_id)
    if run is None:
        raise NoSuchRun(run_id)
    setup = run.config.setup.model_copy(update={"baseline_evaluations": {
        **run.config.setup.baseline_evaluations, "test": baseline.id}})
    run.config = run.config.model_copy(update={"setup": setup})
    run.final_score, run.baseline_test = final.score, baseline.score
    s.add(run)
