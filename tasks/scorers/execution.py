"""Code execution: pass@1, each completion run against its item's tests.

How a completion is run (HumanEval: the candidate in a sandboxed process, the tests in a
process of their own that alone decides the verdict, `tasks/humaneval/grader.py`) is the
task's, handed in as `run`; what is shared is the scoring around it: pairing, the completion
read from each output (`completion`: the paper profile's post-processing), the item's result
(its run's status as `parsed`), the count of each status and the time spent executing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from a2rl.grading.seam import ItemResult, TaskScore

from . import check_paired

Item = dict[str, Any]


class Execution(Protocol):
    """One completion's run: whether its tests passed, the status that says how it ended
    (passed, wrong, timeout, ...) and how long it took."""

    @property
    def passed(self) -> bool: ...

    @property
    def status(self) -> str: ...

    @property
    def duration_s(self) -> float: ...


def _same(output: str) -> str:
    return output


@dataclass(frozen=True)
class CodeExecution:
    """pass@1 of completions (a `Scorer`): `run(items, completions)` executes each one against
    its item's tests, in order; an item is correct when its run passed. `expected`: the item
    field shown as the expected answer (a reference solution); `extra`: metrics the task adds
    (which scorer it reproduces)."""

    run: Callable[[Sequence[Item], list[str]], Sequence[Execution]]
    completion: Callable[[str], str] = _same
    expected: str = "canonical_solution"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, items: Sequence[Item], outputs: Sequence[str]) -> TaskScore:
        check_paired(items, outputs)
        runs = self.run(items, [self.completion(o) for o in outputs])
        results = [ItemResult(id=it["id"], prompt=it["prompt"], output=out,
                              expected=it[self.expected], correct=run.passed, parsed=run.status)
                   for it, out, run in zip(items, outputs, runs, strict=True)]
        statuses: dict[str, int] = {}
        for run in runs:
            statuses[run.status] = statuses.get(run.status, 0) + 1
        return TaskScore.from_items(results, metric="pass@1", status_counts=statuses,
                                    exec_s=round(sum(r.duration_s for r in runs), 3),
                                    **self.extra)
