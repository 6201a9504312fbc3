"""What the tools need from whoever serves a run: its clock to read and a grading hook.

The tools sit below the server: the server builds each run's `RunRuntime` and hands it the
run's clock (`a2rl.server.run.clock.RunClock`) and the process's grading hook (its grading
pump). The tools name only these shapes, so they import nothing of the server and the
server's clock and pump can change without the tools noticing. `ClockReading` lives here
because it is what the tools read; the server's clock makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from a2rl.store import Run


@dataclass(frozen=True)
class ClockReading:
    """The clock at one moment: what `budget_status` reports and the server checks."""

    budget_s: float
    started_at: datetime | None
    deadline: datetime | None
    used_s: float
    remaining_s: float
    #: the deadline has passed or the run has ended: only `budget_status` answers now
    exhausted: bool
    ended: bool
    end_reason: str | None


@dataclass(frozen=True)
class GradingCredits:
    """Seconds given back to a run's clock: for its own evaluations under a paused clock
    (its jobs frozen meanwhile), and for waiting behind other runs' evaluations."""

    pause_s: float = 0.0
    wait_s: float = 0.0


@runtime_checkable
class RunClockView(Protocol):
    """A run's budget clock as the tools read it (they never move it)."""

    def run(self) -> Run:
        """The run's row as it is now."""
        ...

    def deadline(self) -> datetime | None:
        """The deadline, None while the clock has not started."""
        ...

    def deadline_ts(self) -> float:
        """The deadline as a UNIX time, far away while the clock has not started (what a
        sandbox's watchdog takes)."""
        ...

    def read(self, now: datetime | None = None, *, row: Run | None = None) -> ClockReading:
        """The clock at `now` (default: this instant); `row` is the run's row when the caller
        has just read it (saves a query)."""
        ...

    def grading_s(self) -> float:
        """Grading time recorded so far."""
        ...

    def credits(self, submission_id: str | None = None) -> GradingCredits:
        """Seconds grading gave back to the clock (of one submission, when given)."""
        ...


@runtime_checkable
class GradingHook(Protocol):
    """Where a run sends a submission to be graded."""

    def request(self, run_id: str, submission_id: str, split: str) -> int:
        """Queue (submission, split) for grading; returns the request id at once."""
        ...
