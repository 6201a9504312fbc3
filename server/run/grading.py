"""Grading for a run: queue a submission, grade it, and do what follows for its run.

The queue itself (lease, grader process, `Evaluation` row) is `a2rl.grading.queue`'s. What
follows a graded request belongs to its run and is done here, whoever graded it: the grading
time goes on the run's clock, with what it gives back: under a paused grading clock the
time its jobs were frozen for it (`pause`), and under either clock the time it waited behind
other runs' evaluations (a run never pays for another's grading). A moved deadline is told to
the run's sandbox, even when this process does not serve the run. Checkpoint copies that can
no longer matter are pruned. `grade_next` is the only way this package grades, so
the pump and finalization cannot differ on that follow-up.

The pump drains the queue in whichever process serves runs. Queue rows live in the store and
are claimed with a lease, so any number of serving processes (`a2rl serve`, `a2rl run`,
`a2rl finish`) can pump side by side. A process that exits mid-evaluation (its agent
disconnected) gives its requests back to the queue as it goes (`a2rl.grading.queue`); one
that died without a word holds its lease until any pump or finalizing process of the same
host sees it gone and releases it (`release_dead_leases`, before every claim), or, elsewhere,
until the lease expires. Each evaluation runs in its own grader process; the pump's thread
only waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

import a2rl.tasks  # noqa: F401  (registers the loader the grader's worker builds tasks with)
from a2rl.grading import enqueue, lease_owner, outstanding, process_one, release_dead_leases
from a2rl.grading.pruning import prune_copies
from a2rl.settings import Settings
from a2rl.store import (
    Evaluation,
    GradeRequest,
    GradeState,
    Run,
    RunStatus,
    Store,
    aware,
    utcnow,
)

from .clock import RunClock
from .hooks import DeadlineMoved, build_runtime
from .pause import PauseRecord, credit_cap_s, frozen_for_grading
from .wait_credit import run_waited_s

log = logging.getLogger(__name__)


def record_grading(store: Store, settings: Settings, req: GradeRequest,
                   frozen_s: float) -> datetime | None:
    """Put one graded request's grading time on its run's clock, with what it gives back
    (`frozen_s` under a paused clock, already on the deadline; what the run's requests waited
    behind other runs and was not given back yet), within the run's cap; returns the new
    deadline when it moved."""
    with store.session() as s:
        ev = s.get(Evaluation, req.evaluation_id) if req.evaluation_id else None
        run = s.get(Run, req.run_id)
    if ev is None or run is None:
        return None
    started, ended = aware(ev.started_at), aware(ev.ended_at) or utcnow()
    seconds = (ended - started).total_seconds() if started else 0.0
    return RunClock(store, req.run_id).record_grading(
        seconds, req.submission_id, req.split, pause_credit_s=frozen_s, credited_s=frozen_s,
        waited_s=run_waited_s(store, req.run_id), cap_s=credit_cap_s(settings, run))


def tell_sandbox(settings: Settings, store: Store, run_id: str, deadline: datetime) -> bool:
    """Hand a run's moved deadline to its supervisor from any process, serving the run or
    not: attach to the supervisor another process started (never start one). Returns whether
    a supervisor took it; one that could not be reached (another node of a fleet) hears of it
    at the run's next tool call (`A2RLServer._check_budget`) or when it is reattached."""
    with store.session() as s:
        run = s.get(Run, run_id)
    if run is None or run.status != RunStatus.running:
        return False  # not started, or being finalized: its jobs are stopped already
    return build_runtime(settings, store, run).sandbox.push_deadline(deadline.timestamp())


def grade_next(store: Store, settings: Settings, owner: str, run_id: str | None = None,
               on_deadline: DeadlineMoved | None = None) -> GradeRequest | None:
    """Grade the oldest claimable request (of `run_id` only, when given) and do its run's
    follow-up; None when there was nothing to grade. A deadline a paused grading clock moved
    goes to `on_deadline` (the serving process's, which knows its runtimes), by default
    straight to the run's supervisor (`tell_sandbox`)."""
    def tell(run: str, deadline: datetime) -> None:
        if on_deadline is None:
            tell_sandbox(settings, store, run, deadline)
        else:
            on_deadline(run, deadline)

    pause = PauseRecord()
    req = process_one(store, settings, owner, run_id=run_id,
                      hold=lambda r: frozen_for_grading(settings, store, r, tell, pause))
    if req is None:
        return None
    with store.session() as s:  # the claimed copy predates its evaluation
        req = s.get(GradeRequest, req.id) or req
    prune_copies(store, req.run_id)
    moved = record_grading(store, settings, req, pause.frozen_s)
    if moved is not None:
        try:
            tell(req.run_id, moved)
        except Exception:  # the clock has moved in the store: the next tool call tells it
            log.exception("the moved deadline of run %s did not reach its sandbox", req.run_id)
    return req


def grade_queued(store: Store, settings: Settings, run_id: str,
                 owner: str | None = None, poll_s: float = 0.5) -> int:
    """Grade the run's requests, and only its own, until none is queued or leased; returns
    how many were graded here (finalization waits on this).

    A request another process holds (its pump took it) is waited for: graded there, or, once
    its lease expires (that process died), claimed and graded here. The lease bounds the
    wait, so finalization never picks the best submission without an evaluation in flight; a
    holder of this host that is gone is not waited for (`release_dead_leases`).
    """
    owner = owner or lease_owner()
    n, waiting = 0, False
    while True:
        if grade_next(store, settings, owner, run_id=run_id) is not None:
            n += 1
            continue
        left = outstanding(store, run_id)
        if not left:
            return n
        if release_dead_leases(store, run_id):
            continue
        leases = [aware(r.lease_until) for r in left
                  if r.state == GradeState.leased and r.lease_until is not None]
        if not leases:
            if all(r.state == GradeState.leased for r in left):
                return n  # a lease with no end (none is written so): nothing to wait for
            time.sleep(0.05)  # queued since, or a claimer held its row: claimed next turn
            continue
        until = min(leases)
        if not waiting:
            log.info("run %s: waiting for %d request(s) graded by another process (lease "
                     "until %s)", run_id, len(leases), until.isoformat())  # type: ignore[union-attr]
            waiting = True
        expires_in = (until - utcnow()).total_seconds()  # type: ignore[operator]
        time.sleep(min(poll_s, max(expires_in, 0.05)))


class GradingPump:
    """The serving process's `GradingHook`: queues a request and wakes a thread that grades
    every run's requests in the background."""

    def __init__(self, settings: Settings, store: Store, idle_poll_s: float = 1.0,
                 on_deadline: DeadlineMoved | None = None) -> None:
        self.settings, self.store, self.idle_poll_s = settings, store, idle_poll_s
        self.on_deadline = on_deadline
        self.owner = lease_owner()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def request(self, run_id: str, submission_id: str, split: str) -> int:
        req_id = enqueue(self.store, run_id, submission_id, split)
        self.wake()
        return req_id

    def start(self) -> GradingPump:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="a2rl-grading", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Start the thread on first use, or cut its idle wait short."""
        self.start()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                # any run's request a dead process of this host held is claimable at once,
                # here or by any other pump, not when its lease runs out
                release_dead_leases(self.store)
                req = grade_next(self.store, self.settings, self.owner,
                                 on_deadline=self.on_deadline)
            except Exception:  # a broken request must not stop grading for everyone
                log.exception("grading failed")
                req = None
            if req is None:
                self._wake.wait(self.idle_poll_s)
                self._wake.clear()
