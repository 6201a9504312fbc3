"""Exact match: each output's answer, read by the task, against the item's expected answer.

The mechanics every matched task repeated (pairing, counting what was unparsed, refusing an
output whatever it holds, per-group accuracy, the `ItemResult` of each item) are here; what is
the task's is handed in: how an answer is read (`parse`), which item field holds the expected
one (`expected`), how two answers compare (`equal`), why an output is wrong whatever it holds
(`refuse`, GSM8K's number spam and hedges), the groups (arith's operations) and any metrics of
its own (lm-eval's exact match beside ours).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from a2rl.grading.seam import ItemResult, TaskScore

from . import check_paired

Item = dict[str, Any]


@dataclass(frozen=True)
class AnswerMatch:
    """Accuracy of answers read from outputs (a `Scorer`).

    An item is correct when its output's answer (`parse`; None: none found) is not None,
    `equal` to the item's `expected` field, and the output is not refused (`refuse` gives a
    reason, which then stands in the item's `parsed` as `refused: <reason>`). Metrics: the
    accuracy and count of `TaskScore.from_items`, `n_unparsed` (no answer, or the `unparsed`
    marker a reader returns instead of None), with `refuse` `n_refused` and
    `refused_by_reason`, with `group` the accuracy per group under `group_metric`, then the
    task's own `metrics(items, outputs)`."""

    parse: Callable[[str], str | None]
    expected: str = "answer"
    equal: Callable[[str, str], bool] = operator.eq
    refuse: Callable[[str], str | None] | None = None
    unparsed: str | None = None
    group: Callable[[Item], str] | None = None
    group_metric: str = "accuracy_by_group"
    metrics: Callable[[Sequence[Item], Sequence[str]], dict[str, Any]] | None = None

    def __call__(self, items: Sequence[Item], outputs: Sequence[str]) -> TaskScore:
        check_paired(items, outputs)
        results: list[ItemResult] = []
        unparsed = 0
        refused: dict[str, int] = {}
        groups: dict[str, list[int]] = {}
        for item, output in zip(items, outputs, strict=True):
            parsed = self.parse(output)
            unparsed += parsed is None or (self.unparsed is not None and parsed == self.unparsed)
            correct = parsed is not None and self.equal(parsed, item[self.expected])
            if self.refuse is not None and (reason := self.refuse(output)) is not None:
                refused[reason] = refused.get(reason, 0) + 1
                parsed, correct = f"refused: {reason}", False
            if self.group is not None:
                groups.setdefault(self.group(item), []).append(int(correct))
            results.append(ItemResult(id=item["id"], prompt=item["prompt"], output=output,
                                      expected=item[self.expected], correct=correct,
                                      parsed=parsed))
        metrics: dict[str, Any] = {"n_unparsed": unparsed}
        if self.refuse is not None:
            metrics.update(n_refused=sum(refused.values()),
                           refused_by_reason=dict(sorted(refused.items())))
        if self.group is not None:
            metrics[self.group_metric] = {g: sum(v) / len(v) for g, v in sorted(groups.items())}
        if self.metrics is not None:
            metrics.update(self.metrics(items, outputs))
        return TaskScore.from_items(results, **metrics)
