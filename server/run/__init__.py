"""The run, in one place: its clock, its lifecycle and its grading.

- `clock`: `RunClock`, the budget clock over the store (start, deadline, grading time and the
  paused grading clock, exhaustion, status, used and remaining).
- `lifecycle`: `create_run` and `finish_run`; `finalize`: the final score.
- `grading`: queue a submission, grade it with its run's follow-up (`grade_next`), and the
  serving process's `GradingPump`.
- `owner`: who holds a run (`Run.owner`), and finalizing runs past their deadline that
  nobody holds (`finalize_overdue`, at any command's start) or that this process serves
  (`DeadlineWatch`).
- `hooks`: what a serving process plugs into a run's tools (`build_runtime`, `QueueOnly`,
  `DeadlineMoved`).

The tools sit below: they read the clock and call the grading hook through the shapes they
declare (`a2rl.tools.seam`), and import nothing from here.
"""

from __future__ import annotations

from .clock import RunClock
from .finalize import finalize_scores
from .grading import GradingPump, grade_next, grade_queued, record_grading
from .hooks import DeadlineMoved, QueueOnly, build_runtime
from .lifecycle import CreatedRun, create_run, finish_run
from .owner import DeadlineWatch, finalize_overdue, take_if_free

__all__ = ["CreatedRun", "DeadlineMoved", "DeadlineWatch", "GradingPump", "QueueOnly", "RunClock",
           "build_runtime", "create_run", "finalize_overdue", "finalize_scores", "finish_run",
           "grade_next", "grade_queued", "record_grading", "take_if_free"]
