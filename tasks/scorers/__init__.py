"""Shared scorers: what a task assembles instead of writing its own scoring.

A scorer is a callable `(items, outputs) -> TaskScore` (`Scorer`), handed to a task as its
`scorer` part (`a2rl.tasks.Task.scorer`); the task's default `score_outputs` calls it. Each one
holds the mechanics that do not change from task to task, and takes what does (how an answer
is read, which item field is expected, which extra metrics to report) as small functions:

- `AnswerMatch` (`match.py`): exact match of the answer read from each output (arith, GSM8K,
  a plugin's echo), with refusals, unparsed counts and per-group accuracy.
- `numeric.py`: numbers in answers, read and normalized (`#### N`, the last number, a strict
  integer), for the answer readers of numeric tasks.
- `CodeExecution` (`execution.py`): pass@1, each completion run against its item's tests by
  the task's runner (HumanEval's two-process sandbox).
- `JudgeClient` (`judge.py`): the LLM judge every model-graded scorer asks (AlpacaEval,
  DeepSearchQA), with its retries, answer cache and the fencing of the judged text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from a2rl.grading.seam import TaskScore

__all__ = ["Scorer", "check_paired"]


class Scorer(Protocol):
    """Scores model outputs against items, one output per item, in order."""

    def __call__(self, items: Sequence[dict[str, Any]], outputs: Sequence[str]) -> TaskScore: ...


def check_paired(items: Sequence[Any], outputs: Sequence[Any]) -> None:
    """One output per item, or a ValueError saying how many of each (a grader's bug, not the
    model's)."""
    if len(items) != len(outputs):
        raise ValueError(f"{len(items)} items but {len(outputs)} outputs")
