"""The typed seams between a run and whoever serves it.

A tool that queues grading, and the grader that moves a deadline, reach the serving process
through these two shapes, never through an attribute set on the side. Both are light (no
grading import): the tools use them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from a2rl.store import Store


class GradingHook(Protocol):
    """Where a run sends a submission to be graded."""

    def request(self, run_id: str, submission_id: str, split: str) -> int:
        """Queue (submission, split) for grading; returns the request id at once."""
        ...


#: Called when grading moved a run's deadline (a paused grading clock): run id, new deadline.
DeadlineMoved = Callable[[str, datetime], None]


class QueueOnly:
    """A `GradingHook` that only queues: the request waits for a process that pumps the queue
    (`a2rl serve`, `a2rl run` and `a2rl finish` all do). For a runtime built outside a server."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def request(self, run_id: str, submission_id: str, split: str) -> int:
        from a2rl.grading.queue import enqueue

        return enqueue(self.store, run_id, submission_id, split)
