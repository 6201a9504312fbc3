"""`budgetevent` rows: the run's clock events and the work done for it, appended only.

The clock's events (`clock_start`, `grading`, `exhausted`, `finished`) are written with the
run row's change they go with, inside the transaction of `records.runs`; a submission's check
(`validation`) is opened under the run's rate and closed with its outcome and CPU; a revision
scan that stopped says so (`scan_stopped`). Nothing else changes an event once written, but a
check's detail when it closes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, select

from ..db import Store
from ..models import BudgetEvent, Run, aware, utcnow
from ..status import BudgetEventKind


def clock_started(s: Session, run: Run, now: datetime) -> None:
    """The event of `run`'s clock starting at `now` (with the row's change, `runs`)."""
    s.add(BudgetEvent(run_id=run.id, kind=BudgetEventKind.clock_start, at=now,
                      detail={"budget_s": run.budget_s}))


def grading_details(s: Session, run_id: str) -> list[dict[str, Any]]:
    """The details of the run's `grading` events (seconds, credits), in `s`."""
    return [d or {} for d in s.exec(select(BudgetEvent.detail).where(
        BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.grading)).all()]


def graded(s: Session, run_id: str, detail: dict[str, Any]) -> None:
    """One evaluation's grading time and what it gave back to the clock (`runs`)."""
    s.add(BudgetEvent(run_id=run_id, kind=BudgetEventKind.grading, detail=detail))


def finished(s: Session, run_id: str, detail: dict[str, Any]) -> None:
    """The run closed (`runs.close`, in its transaction)."""
    s.add(BudgetEvent(run_id=run_id, kind=BudgetEventKind.finished, detail=detail))


def exhausted_once(store: Store, run_id: str) -> bool:
    """Note that the run's deadline passed, once; True the first time."""
    with store.session() as s:
        seen = s.exec(select(func.count()).select_from(BudgetEvent).where(
            BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.exhausted)).one()
        if seen:
            return False
        s.add(BudgetEvent(run_id=run_id, kind=BudgetEventKind.exhausted))
        return True


class ChecksExceeded(Exception):
    """The run's submissions were checked `count` times within the window, the most it may:
    the next check frees in `wait_s` seconds."""

    def __init__(self, count: int, wait_s: float) -> None:
        super().__init__(f"{count} checks in the window; the next frees in {wait_s:.0f} s")
        self.count, self.wait_s = count, wait_s


def open_check(store: Store, run_id: str, submission_id: str, limit: int,
               window_s: float) -> int:
    """Open one submission's check, if the run had fewer than `limit` in the last
    `window_s` (the run's row locked, so that concurrent calls cannot both take the last
    check of the window); the event's id, else `ChecksExceeded`."""
    now = utcnow()
    with store.session() as s:
        s.exec(select(Run.id).where(Run.id == run_id).with_for_update()).first()
        recent = [aware(at) for at in s.exec(select(BudgetEvent.at).where(
            BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.validation,
            BudgetEvent.at > now - timedelta(seconds=window_s))  # type: ignore[operator]
            .order_by(BudgetEvent.at)).all()]  # type: ignore[arg-type]
        if len(recent) >= limit:
            frees = recent[len(recent) - limit] + timedelta(seconds=window_s)  # type: ignore[operator]
            raise ChecksExceeded(len(recent), max((frees - now).total_seconds(), 1.0))
        event = BudgetEvent(run_id=run_id, kind=BudgetEventKind.validation, at=now,
                            detail={"submission_id": submission_id, "outcome": "checking"})
        s.add(event)
        s.flush()
        assert event.id is not None
        return event.id


def close_check(store: Store, event_id: int, detail: dict[str, Any]) -> None:
    """A check's outcome and CPU, in its event (opened by `open_check`)."""
    with store.session() as s:
        event = s.get(BudgetEvent, event_id)
        if event is not None and event.kind == BudgetEventKind.validation:
            event.detail = dict(detail)  # a new dict: the JSON column is rewritten
            s.add(event)


def scan_stopped(store: Store, run_id: str, detail: dict[str, Any]) -> None:
    """A revision scan stopped before it saw the whole workspace (`a2rl.tools.revisions`)."""
    with store.session() as s:
        s.add(BudgetEvent(run_id=run_id, kind=BudgetEventKind.scan_stopped, detail=detail))
