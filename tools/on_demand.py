"""A daemon thread that runs while there is work for it, and is started again when there is.

Why: a run's background jobs are watched (their ends settled) and sampled (their GPU use) by
threads of the process serving the run; a thread per run kept for ever would outlive its
jobs, and one started per job would watch the same jobs twice. So each is started on demand
(`ensure`) and ends by itself when its check finds nothing to do (`unless_idle`). The check
and the thread's forgetting itself happen under the same lock as `ensure`'s look at it, so a
caller either sees a live thread that will see its job, or none and starts one: no job is
missed between the last turn and the next start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class OnDemandThread:
    """One named daemon thread at most, running while there is work."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def ensure(self, target: Callable[[], None]) -> None:
        """Start a thread running `target` unless one is alive."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=target, daemon=True, name=self.name)
            self._thread.start()

    def unless_idle(self, work: Callable[[], T | None]) -> T | None:
        """For the thread, each turn: what `work()` finds to do; None (nothing) ends the
        thread's turn for good, and it is forgotten under the lock, so that the next `ensure`
        starts another."""
        with self._lock:
            found = work()
            if found is None:
                self._thread = None
            return found
