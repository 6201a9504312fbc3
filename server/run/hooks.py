"""The seams between a run and whoever serves it, and the tools' runtime built on them.

A tool that queues grading reaches the serving process through `GradingHook` (declared by the
tools, `a2rl.tools.seam`), never through an attribute set on the side; the grader that moves a
deadline tells the serving process through `DeadlineMoved`. `build_runtime` is how the server
hands a run's tools their clock and hook (the tools import nothing of the server).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from a2rl.grading.queue import enqueue
from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.tasks.hidden_data import hidden_data_carriers
from a2rl.tools.runtime import RunRuntime, run_dir, run_logger
from a2rl.tools.seam import GradingHook

from .clock import RunClock

#: Called when grading moved a run's deadline (a paused grading clock): run id, new deadline.
DeadlineMoved = Callable[[str, datetime], None]


class QueueOnly:
    """A `GradingHook` that only queues: the request waits for a process that pumps the queue
    (`a2rl serve`, `a2rl run` and `a2rl finish` all do). For a runtime built outside a server."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def request(self, run_id: str, submission_id: str, split: str) -> int:
        return enqueue(self.store, run_id, submission_id, split)


def build_runtime(settings: Settings, store: Store, run: Run,
                  grading: GradingHook | None = None) -> RunRuntime[RunClock]:
    """The tools' runtime of `run`, with the run's clock and `grading` (default: the queue
    alone) plugged in."""
    log = run_logger(run.id, run_dir(run) / "run.log")
    return RunRuntime(settings, store, run, clock=RunClock(store, run.id, log),
                      grading=grading or QueueOnly(store),
                      hidden_paths=lambda: hidden_data_carriers(settings))
