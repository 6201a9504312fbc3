"""Who holds a run, and what happens to a run nobody holds once its deadline has passed.

A run's `owner` (schema v6) is the process responsible for finalizing it: the process that
made it (`a2rl run`'s orchestrator, `a2rl create`, a test), then a server that serves it once
that one is gone (`a2rl serve`, stdio or HTTP, takes it on first use only when it is free).
It is written `host:pid:start`, the start being the process's start time in clock ticks
(`/proc/<pid>/stat`), so a pid the kernel reused for another process does not pass for the
owner.

"Gone" is judged only on this host: the owner's host is this one and its pid either runs no
process or runs one started at another time. An owner on another host (a fleet node sharing a
PostgreSQL store) is never judged gone from here; the fleet's head handles a lost node. A
run with no owner (made before owners were recorded) counts as held by nobody, but only a run
whose folder is on this machine is ever finalized here.

Why not finalize every run past its deadline: a run another live process still serves (an
`a2rl run` in its last seconds of grading, a server whose grader moved the deadline under a
paused clock) would be closed under it. Why finalize at all: a run whose owner was killed
(SIGKILL, a crash, a reboot) stayed "running" past its deadline for ever, holding its
workspace's mount and loop device, until someone ran `a2rl finish`.

`finalize_overdue` runs when any command opens the store; `DeadlineWatch` is the serving
process's own: a run it owns is finalized when its deadline passes, with no tool call needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from a2rl.settings import Settings
from a2rl.store import Run, RunStatus, Store, aware, utcnow
from a2rl.store.owners import (
    BUDGET_EXHAUSTED,
    end_reason_of_lost,
    overdue_runs,
    process_owner,
    swap_owner,
    take_if_free,
)

log = logging.getLogger(__name__)

__all__ = ["DeadlineWatch", "finalize_overdue", "process_owner", "take_if_free"]


def finalize_overdue(settings: Settings, store: Store,
                     say: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Finalize every overdue run (`overdue_runs`) this process manages to take; the ids."""
    from .lifecycle import finish_run

    done = []
    for run in overdue_runs(settings.runs_dir, store):
        if not swap_owner(store, run.id, run.owner, process_owner()):
            continue  # another process took it first
        reason = end_reason_of_lost(run)
        state = "past its deadline" if run.status == RunStatus.running else "half finalized"
        say(f"run {run.id} is {state} and no process holds it: finalizing it ({reason})")
        try:
            finish_run(settings, store, run.id, reason=reason)
        except Exception as exc:  # one broken run must not stop the command that found it
            log.warning("run %s could not be finalized: %s", run.id, exc)
            say(f"run {run.id} could not be finalized: {exc}")
            continue
        done.append(run.id)
    return done


class DeadlineWatch:
    """A serving process's watch over the runs it owns: each is finalized once its deadline
    has passed (within `poll_s`), so its jobs, mount, loop device and cgroup go at the
    deadline whether or not the agent calls again."""

    def __init__(self, settings: Settings, store: Store, poll_s: float = 2.0) -> None:
        self.settings, self.store, self.poll_s = settings, store, poll_s
        self._runs: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, run_id: str) -> None:
        with self._lock:
            self._runs.add(run_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="a2rl-deadline",
                                                daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> list[str]:
        """Finalize the watched runs that are due and still ours (or free); the ids."""
        from .lifecycle import finish_run

        with self._lock:
            watched = sorted(self._runs)
        done = []
        for run_id in watched:
            with self.store.session() as s:
                run = s.get(Run, run_id)
            if run is None or run.ended_at is not None:
                with self._lock:
                    self._runs.discard(run_id)
                continue
            deadline = run.deadline
            if run.status != RunStatus.running or deadline is None:
                continue
            if aware(deadline) > utcnow() or not take_if_free(self.store, run_id):  # type: ignore[operator]
                continue  # not due, or another live process holds it (an `a2rl run`)
            try:
                finish_run(self.settings, self.store, run_id, reason=BUDGET_EXHAUSTED)
                done.append(run_id)
            except Exception:
                log.exception("run %s could not be finalized at its deadline", run_id)
        return done

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # the store busy or gone for a moment: the next look retries
                log.exception("the deadline watch failed")
