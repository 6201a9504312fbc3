"""`RunClock`: a run's budget clock, the one place that decides when it starts and moves.

Its rules are here; each change it makes is one transaction of the run row's writer
(`a2rl.store.records.runs`, the `budgetevent` with it: `records.budget`).

The clock lives in the store (the run row's `started_at`, `deadline`, `status` and its
`BudgetEvent` rows), so every process serving a run sees the same clock and a restarted server
finds it where it was. It starts when the run starts (`a2rl run`) or at the first tool call
(`a2rl create`); grading time either counts (the default: the agent's jobs keep running) or,
under `grading_clock = paused`, the run's jobs are frozen and the deadline moves by the time
frozen (`a2rl.server.run.pause`); under either, the time the run's requests waited behind
other runs' evaluations moves it too, counted once (`wait_credit`); the two credits share one
cap (`grading.pause_cap_fraction` of the budget); at the deadline it is exhausted once.

Why here and not beside the tools: the tools (`budget_status`, job time limits, the sandbox's
watchdog), the MCP server's deadline check and the orchestrator all read the same clock, and
only the run's lifecycle moves it. The tools read it through `a2rl.tools.seam.RunClockView`,
which `RunClock` satisfies, and get it from the server with their runtime (`build_runtime`):
they never import this module.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from a2rl.store import EndKind, Run, RunStatus, Store, aware, utcnow
from a2rl.store.records import budget, runs
from a2rl.tools.seam import ClockReading, GradingCredits

#: A deadline far away, for a sandbox whose run's clock has not started (2100-01-01).
NO_DEADLINE_TS = 4102444800.0


def read_clock(run: Run, now: datetime | None = None) -> ClockReading:
    """The clock of a run row as it stands at `now` (default: this instant)."""
    now = now or utcnow()
    started, deadline = aware(run.started_at), aware(run.deadline)
    used = (now - started).total_seconds() if started else 0.0
    remaining = (deadline - now).total_seconds() if deadline else run.budget_s
    return ClockReading(
        budget_s=run.budget_s, started_at=started, deadline=deadline,
        used_s=min(max(used, 0.0), run.budget_s), remaining_s=max(remaining, 0.0),
        exhausted=bool(deadline and now >= deadline) or run.ended_at is not None,
        ended=run.ended_at is not None, end_reason=run.end_reason)


class RunClock:
    """One run's clock over the store; cheap to build, safe to share between threads."""

    def __init__(self, store: Store, run_id: str, log: logging.Logger | None = None) -> None:
        self.store, self.run_id = store, run_id
        self.log = log or logging.getLogger(f"a2rl.run.{run_id}")
        self._lock = threading.Lock()

    def run(self) -> Run:
        with self.store.session() as s:
            run = s.get(Run, self.run_id)
            if run is None:
                raise KeyError(f"run {self.run_id!r} does not exist")
            return run

    def start(self) -> Run:
        """Start the clock if it has not started (a run made with `a2rl create` starts at its
        first tool call); returns the run either way."""
        run = self.run()
        if run.started_at is not None:  # the common case, read without a lock
            return run
        with self._lock:
            run, started = runs.start_clock(self.store, self.run_id)
        if started:
            self.log.info("budget clock started: %.0f s", run.budget_s)
        return run

    def deadline(self) -> datetime | None:
        return aware(self.run().deadline)

    def deadline_ts(self) -> float:
        """The deadline as a UNIX time, far away while the clock has not started (what a
        sandbox's watchdog and a job's time limit take)."""
        deadline = self.deadline()
        return deadline.timestamp() if deadline else NO_DEADLINE_TS

    def read(self, now: datetime | None = None, *, row: Run | None = None) -> ClockReading:
        return read_clock(row or self.run(), now)

    def _grading_details(self) -> list[dict]:
        with self.store.session() as s:
            return budget.grading_details(s, self.run_id)

    def grading_s(self) -> float:
        """Grading time recorded so far (whether or not it counted against the budget)."""
        return sum(float(d.get("seconds", 0)) for d in self._grading_details())

    def credits(self, submission_id: str | None = None) -> GradingCredits:
        """What grading gave back to the clock so far (of one submission, when given)."""
        details = [d for d in self._grading_details()
                   if submission_id is None or d.get("submission_id") == submission_id]
        return GradingCredits(pause_s=sum(float(d.get("pause_credit_s", 0)) for d in details),
                              wait_s=sum(float(d.get("wait_credit_s", 0)) for d in details))

    def cap_left(self, cap_s: float) -> float:
        """What grading may still give back under `cap_s`: the pause and wait credits share
        it (`grading.pause_cap_fraction` of the budget)."""
        credits = self.credits()
        return max(cap_s - credits.pause_s - credits.wait_s, 0.0)

    def move_deadline(self, seconds: float) -> datetime | None:
        """Move the deadline `seconds` later (earlier when negative), in one transaction;
        the new deadline, or None for a run whose clock has not started or that ended."""
        return runs.move_deadline(self.store, self.run_id, seconds)

    def record_grading(self, seconds: float, submission_id: str | None, split: str | None,
                       *, pause_credit_s: float | None = None, credited_s: float = 0.0,
                       waited_s: float = 0.0, cap_s: float | None = None) -> datetime | None:
        """Note one evaluation's grading time and what it gives back to the clock; returns
        the new deadline when it moved (an ended run's deadline never moves).

        `waited_s`: how long the run's requests have waited behind other runs' evaluations
        in all so far (`wait_credit.run_waited_s`: their union, so a span two requests waited
        through counts once); what of it was not given back yet is given now, under either
        clock (a run never pays for another's grading). `pause_credit_s`: under a paused
        clock, the time its jobs were frozen for it, of which `credited_s` the freeze already
        put on the deadline; None (a caller that froze nothing and measured the evaluation
        itself) credits `seconds` under a paused clock. `cap_s`: the most grading gives back
        to the run in all, pause and wait credits together (None: no cap); the freeze was
        held within it already. One transaction with the run's row locked
        (`a2rl.store.records.runs.record_grading`)."""
        return runs.record_grading(self.store, self.run_id, seconds, submission_id, split,
                                   pause_credit_s=pause_credit_s, credited_s=credited_s,
                                   waited_s=waited_s, cap_s=cap_s)

    def exhaust(self) -> bool:
        """Note that the deadline passed, once; True the first time (the caller then stops
        the run's jobs)."""
        return budget.exhausted_once(self.store, self.run_id)

    def set_status(self, status: RunStatus) -> bool:
        """Set the live run's status; False for a run that has ended (it keeps its end)."""
        return runs.set_status(self.store, self.run_id, status)

    def close(self, reason: str, status: RunStatus = RunStatus.finished,
              end_kind: EndKind | None = None) -> Run:
        """Stop the clock for good: the run has ended, for `reason`, `finished` (finalized)
        or `failed` (it could not finalize: its fleet node was lost). `end_kind` is stored as
        given, or derived from the closed row (`a2rl.store.outcome`). A run that has already
        ended keeps its end: a node that finalized its run just as the fleet gave up on it
        wins (the row is locked for the check)."""
        return runs.close(self.store, self.run_id, reason, status, end_kind)
