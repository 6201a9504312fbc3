"""A paused grading clock: the run's jobs frozen for its own evaluation, within a cap.

Why freeze rather than only move the deadline: a deadline moved by each evaluation while the
jobs kept running gave a run free compute time with every submission (two always queued kept
a 60 s run going for 214 s). Frozen, the jobs do nothing while the clock is stopped, so the
credit buys no work; the agent's tool calls still answer (the supervisor, in `sup/`, is not
frozen), and a job started meanwhile starts at the thaw. Why a cap: the credit is the
grader's time, which the agent chooses to spend by submitting; past
`grading.pause_cap_fraction` of its budget, given back for freezes and for waits behind other
runs' evaluations together (`wait_credit`), its jobs are thawed and grading counts.

The freeze is the run's cgroup's (`RunCgroup.freeze_jobs`): a local run on this host with a
freezer (v1) or a v2 group. Where nothing can be frozen (a docker run, a run on another
node of a fleet, a host without writable cgroups) the jobs keep running through the
evaluation, so nothing is credited: the agent could work all along.

While frozen the deadline already stands `cap left` seconds later (in the store and in the
supervisor), so neither the watchdog nor the server's deadline check ends the run mid-freeze;
at the thaw it is set to the time actually frozen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from a2rl.sandbox.cgroup import RunCgroup
from a2rl.settings import Settings
from a2rl.store import GradeRequest, GradingClock, Run, RunStatus, Store, aware, utcnow

from .clock import RunClock
from .hooks import DeadlineMoved

log = logging.getLogger(__name__)


@dataclass
class PauseRecord:
    """What one evaluation's freeze gave its run: seconds frozen, all on the deadline."""

    frozen_s: float = 0.0


def credit_cap_s(settings: Settings, run: Run) -> float:
    """The most grading gives back to `run` in all: its pause and wait credits together."""
    return run.budget_s * run.config.grading_settings(settings.grading).pause_cap_fraction


@contextmanager
def frozen_for_grading(settings: Settings, store: Store, req: GradeRequest,
                       tell: DeadlineMoved, record: PauseRecord) -> Iterator[None]:
    """Around one evaluation of `req`: freeze its run's jobs when its clock is paused and
    cap is left, for at most that cap, and put the time frozen on its deadline."""
    clock = RunClock(store, req.run_id)
    run = clock.run()
    deadline = aware(run.deadline)
    if (run.grading_clock != GradingClock.paused or run.status != RunStatus.running
            or deadline is None or deadline <= utcnow()):
        yield
        return
    cap_left = clock.cap_left(credit_cap_s(settings, run))
    cgroup = RunCgroup(run.id)
    if cap_left <= 0 or not cgroup.exists:
        yield
        return
    reserved = clock.move_deadline(cap_left)
    if reserved is None:
        yield
        return
    _tell(tell, run.id, reserved)  # first, so the watchdog never fires during the freeze
    if not cgroup.freeze_jobs(True):
        _settle(clock, tell, -cap_left)
        yield
        return
    started = time.monotonic()
    thawed_at: list[float] = []
    lock = threading.Lock()

    def thaw() -> None:
        with lock:
            if not thawed_at:
                cgroup.freeze_jobs(False)
                thawed_at.append(time.monotonic())

    timer = threading.Timer(cap_left, thaw)  # the cap reached mid-evaluation: time counts
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        thaw()
        record.frozen_s = min(thawed_at[0] - started, cap_left)
        _settle(clock, tell, record.frozen_s - cap_left)
        log.info("run %s: jobs frozen %.1f s for grading (cap left %.1f s)", run.id,
                 record.frozen_s, cap_left)


def _settle(clock: RunClock, tell: DeadlineMoved, seconds: float) -> None:
    moved = clock.move_deadline(seconds)
    if moved is not None:
        _tell(tell, clock.run_id, moved)


def _tell(tell: DeadlineMoved, run_id: str, deadline: object) -> None:
    try:
        tell(run_id, deadline)  # type: ignore[arg-type]
    except Exception:  # the clock has moved in the store: the next tool call tells it
        log.exception("the moved deadline of run %s did not reach its sandbox", run_id)
