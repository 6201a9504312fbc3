"""The run, in one place: its clock, its lifecycle and its grading.

- `clock`: `RunClock`, the budget clock over the store (start, deadline, grading time and the
  paused grading clock, exhaustion, status, used and remaining), and `ClockReading`.
- `lifecycle`: `create_run` and `finish_run`; `finalize`: the final score.
- `grading`: queue a submission, grade it with its run's follow-up (`grade_next`), and the
  serving process's `GradingPump`.
- `hooks`: the typed seams a serving process plugs in (`GradingHook`, `DeadlineMoved`).

The tools use `clock` and `hooks`, which import only the store; the rest imports the tools,
so it is loaded on first use (`from a2rl.server.run import create_run` still works).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .clock import ClockReading, RunClock
from .hooks import DeadlineMoved, GradingHook, QueueOnly

if TYPE_CHECKING:
    from .finalize import finalize_scores
    from .grading import GradingPump, grade_next, grade_queued, record_grading
    from .lifecycle import CreatedRun, create_run, finish_run

_LAZY = {
    "CreatedRun": "lifecycle", "create_run": "lifecycle", "finish_run": "lifecycle",
    "finalize_scores": "finalize", "GradingPump": "grading", "grade_next": "grading",
    "grade_queued": "grading", "record_grading": "grading",
}

__all__ = ["ClockReading", "CreatedRun", "DeadlineMoved", "GradingHook", "GradingPump",
           "QueueOnly", "RunClock", "create_run", "finalize_scores", "finish_run", "grade_next",
           "grade_queued", "record_grading"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
