"""Every submission check counted to its run: a per-run rate, and its CPU in the run's record.

Why: checking a submission (the copy and its hashes, the server's shape checks, the process
that loads it and compares it with the base) is work the server does for a run, outside the
run's sandbox and clock. Uncounted, 199 refused submissions of an unchanged base copy in 120 s
cost 83 CPU-seconds that no budget and no ledger saw, and a refusal counted against no limit.

So each `submit_checkpoint` call is first let through the run's rate
(`grading.submission_checks_per_minute`: checks in any 60 s, refused ones included), which refuses
the one over it at once, before any copy. A call let through is a `validation` budget event
of its run, written before any work and closed with its outcome and the CPU it took as the
kernel counted it: the serving thread's own CPU clock (`CLOCK_THREAD_CPUTIME_ID`) for the copy
and the server's checks, and the validating process's rusage once reaped
(`CheckpointCheck.cpu_s`). The run's ledger sums them (`validations`, `validation_cpu_s`).

Refused checks count toward the rate and not toward `--max-submissions`, and there is no
separate budget of refusals: what a refusal costs is the server's CPU, which the rate bounds
per minute whatever the outcome, and the ledger charges to the run; a refusal tells the agent
nothing about hidden data, so there is nothing to ration; and a fixed number of refusals
would turn an honest agent's mistakes in saving a checkpoint into a run that can no longer
submit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mcp.server.mcpserver.exceptions import ToolError

from a2rl.store import Run
from a2rl.store.records import budget

from .runtime import RunRuntime

#: the rate's window
WINDOW_S = 60.0


class RateExceeded(ToolError):
    """The run has had its submission checks for this minute: refused unchecked."""


@dataclass
class Check:
    """One submission check under way: what the caller learns as it goes (the outcome, the
    validating process's CPU), written to its event when it ends."""

    event_id: int
    submission_id: str
    outcome: str = "refused"
    validator_cpu_s: float | None = None
    _thread_cpu_at: float = field(default_factory=time.thread_time)

    def server_cpu_s(self) -> float:
        return time.thread_time() - self._thread_cpu_at


def _open(rt: RunRuntime, run: Run, submission_id: str) -> Check:
    """The rate (the run's row locked, so that concurrent calls cannot both take the last
    check of the minute), then the check's event; `RateExceeded` over the rate."""
    limit = rt.grading_settings.submission_checks_per_minute
    try:
        event_id = budget.open_check(rt.store, run.id, submission_id, limit, WINDOW_S)
    except budget.ChecksExceeded as exc:
        raise RateExceeded(
            f"{exc.count} submissions of this run were checked in the last "
            f"{WINDOW_S:g} s, refused ones included, and at most {limit} may be "
            f"(grading.submission_checks_per_minute): submit again in {exc.wait_s:.0f} s") from None
    return Check(event_id=event_id, submission_id=submission_id)


def _close(rt: RunRuntime, check: Check) -> None:
    server = check.server_cpu_s()
    budget.close_check(rt.store, check.event_id, {
        "submission_id": check.submission_id, "outcome": check.outcome,
        "server_cpu_s": round(server, 3), "validator_cpu_s": check.validator_cpu_s,
        "cpu_s": round(server + (check.validator_cpu_s or 0.0), 3)})


@contextmanager
def counted_check(rt: RunRuntime, run: Run, submission_id: str) -> Iterator[Check]:
    """Around one submission's check: refused over the run's rate (`RateExceeded`, before
    anything is done), else recorded with its outcome and CPU however it ends. The caller
    sets `outcome` when it accepts (`queued`) or answers with an earlier submission
    (`identical`); an exception leaves it `refused`."""
    check = _open(rt, run, submission_id)
    try:
        yield check
    except ToolError:
        raise
    except BaseException:  # not a refusal: the check itself broke
        check.outcome = "error"
        raise
    finally:
        _close(rt, check)
