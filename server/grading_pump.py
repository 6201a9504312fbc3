"""The grading pump: drains the grading queue in whichever process serves runs.

Queue rows live in the store and are claimed with a lease, so any number of serving
processes (`a2rl serve`, `a2rl run`, `a2rl finish`) can pump side by side and a request whose
process died is claimed again when its lease expires. Each evaluation runs in its own
grader process (see `a2rl.grading.queue`); this thread only waits for it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from a2rl.grading import process_one
from a2rl.grading.pruning import prune_copies
from a2rl.settings import Settings
from a2rl.store import BudgetEvent, Evaluation, GradeRequest, Run, Store, utcnow
from a2rl.tools.runtime import aware

log = logging.getLogger(__name__)


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def record_grading(store: Store, req: GradeRequest) -> datetime | None:
    """Note the grading time of one evaluation; under a paused grading clock, move the
    deadline by it. Returns the new deadline when it moved."""
    with store.session() as s:
        req = s.get(GradeRequest, req.id) or req  # the claimed copy predates its evaluation
        ev = s.get(Evaluation, req.evaluation_id) if req.evaluation_id else None
        run = s.get(Run, req.run_id)
        if ev is None or run is None:
            return None
        started, ended = aware(ev.started_at), aware(ev.ended_at) or utcnow()
        seconds = (ended - started).total_seconds() if started else 0.0
        s.add(BudgetEvent(run_id=run.id, kind="grading", detail={
            "seconds": round(seconds, 3), "submission_id": req.submission_id,
            "split": req.split}))
        if run.grading_clock != "paused" or run.deadline is None or run.ended_at is not None:
            return None
        run.deadline = aware(run.deadline) + timedelta(seconds=seconds)  # type: ignore[operator]
        s.add(run)
        return run.deadline


class GradingPump:
    def __init__(self, settings: Settings, store: Store, idle_poll_s: float = 1.0,
                 on_deadline: Callable[[str, datetime], None] | None = None) -> None:
        self.settings, self.store, self.idle_poll_s = settings, store, idle_poll_s
        self.on_deadline = on_deadline
        self.owner = owner_name()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
                req = process_one(self.store, self.settings, self.owner)
                if req is not None:
                    prune_copies(self.store, req.run_id)
                    moved = record_grading(self.store, req)
                    if moved is not None and self.on_deadline is not None:
                        self.on_deadline(req.run_id, moved)
            except Exception:  # a broken request must not stop grading for everyone
                log.exception("grading failed")
                req = None
            if req is None:
                self._wake.wait(self.idle_poll_s)
                self._wake.clear()
