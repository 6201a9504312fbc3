"""The seam between grading and tasks: the only grading module a task imports.

Why one small module: the grader must evaluate any task (a user's too, from a plugin) without
knowing it, and a task must produce a score without knowing how generation is done. So the
grader defines, here and nowhere else, what it hands a task (a `GenerationEngine`, prompts as
`Prompt`), what it expects back (a `TaskScore` of `ItemResult`s) and what it needs of a task
(`GradedTask`); a task implements `GradedTask.evaluate` and the grader never asks what kind
of task it holds. The grader's worker finds a run's task by id through the loader the task
registry registers here (`register_task_loader`), so grading never imports the tasks.
Everything here is light (pydantic and typing only): importing it must not load the store,
torch or any engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from a2rl.registry import resolve_target
from a2rl.stats import WILSON_METHOD, wilson_interval

if TYPE_CHECKING:
    from a2rl.settings import Settings

Split = Literal["dev", "test"]
Messages = list[dict[str, str]]


class RawText(str):
    """A prompt the engines send as is, never through a chat template: raw completion, as the
    reference harness prompts a model under ALFWorld's `paper` profile (ReAct)."""


Prompt = str | Messages


@runtime_checkable
class GenerationEngine(Protocol):
    """What a task's evaluation may ask of the grader's model: greedy batched completions."""

    engine_name: str
    engine_version: str

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        """Greedy completions, one per prompt, in order, each cut at its first stop string."""
        ...


class ItemResult(BaseModel):
    """One graded item. Per-item results stay in the store; the agent never sees them."""

    id: str
    prompt: str
    output: str
    expected: str
    correct: bool
    parsed: str | None = None
    #: Interactive (level-3) tasks: the episode record (actions, observations, rewards,
    #: success, error); `output` then holds its transcript. See docs/level3.md.
    episode: dict[str, Any] | None = None


class TaskScore(BaseModel):
    """What a task's scoring returns: per-item results, their aggregate and its interval.

    Distinct from the agent-facing `SubmissionScore` (tools/submissions.py): this one holds
    every item and never leaves the grader. A score that is the share of correct items is
    built with `from_items` (Wilson interval); a task whose score is something else (a
    length-controlled win rate) gives its own `ci` and names it in `ci_method`.
    """

    score: float
    n_items: int
    n_correct: int
    ci: tuple[float, float] | None = None
    ci_method: str = WILSON_METHOD
    metrics: dict[str, Any] = Field(default_factory=dict)
    items: list[ItemResult] = Field(default_factory=list)

    @classmethod
    def from_items(cls, items: Sequence[ItemResult], *, metric: str = "accuracy",
                   count: bool = True, **metrics: Any) -> TaskScore:
        """The share of correct `items` as the score, under the name `metric` in the metrics
        (with `n_correct` when `count`), then the task's own `metrics`; Wilson's interval."""
        n = len(items)
        n_correct = sum(it.correct for it in items)
        rate = n_correct / n if n else 0.0
        head: dict[str, Any] = {metric: rate}
        if count:
            head["n_correct"] = n_correct
        return cls(score=rate, n_items=n, n_correct=n_correct,
                   ci=wilson_interval(n_correct, n), ci_method=WILSON_METHOD,
                   metrics={**head, **metrics}, items=list(items))

    def interval(self) -> tuple[float, float]:
        """The 95% interval: the task's own, else Wilson's of `n_correct / n_items`; widened
        to hold the score itself (float dust at 0 and 1)."""
        low, high = self.ci or wilson_interval(self.n_correct, self.n_items)
        return min(low, self.score), max(high, self.score)


@runtime_checkable
class GradedTask(Protocol):
    """What the grader needs of a task (`a2rl.tasks.base.Task` provides all of it)."""

    profile: str

    @property
    def spec(self) -> Any: ...

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        """The hidden items of `split`."""
        ...

    def evaluate(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                 grader: Any) -> TaskScore:
        """Score the engine's model on `items` with generation settings `grader`."""
        ...

    def base_model_dir(self, settings: Settings) -> Path:
        """The base model's folder (the grader tokenizes with its tokenizer)."""
        ...

    def options_record(self, settings: Settings) -> dict[str, Any]:
        """The task's resolved options, as recorded in provenance."""
        ...

    def options_defaults(self) -> dict[str, Any]:
        """The task's options at their defaults (a baseline's key names only changed ones)."""
        ...

    def hidden_split_identity(self, settings: Settings) -> str | None:
        """What tells this home's hidden splits from another's (a secret seed's digest), or
        None where the data fixes them: part of the baseline's key."""
        ...


class TaskLoader(Protocol):
    """How the grader builds a run's task: its id, profile and recorded options."""

    def __call__(self, task_id: str, profile: str, options: Mapping[str, Any]) -> GradedTask: ...


#: `"module:attr"` of the `TaskLoader` the task registry registered (None: none imported yet).
#: A string, not the function: the grader's worker is another process and imports it there.
_task_loader: str | None = None


def register_task_loader(target: str) -> None:
    """Say where the grader finds tasks (`a2rl.tasks.registry` does when it is imported)."""
    global _task_loader
    _task_loader = target


def task_loader() -> str:
    """The registered `TaskLoader` target, for a worker's spec."""
    if _task_loader is None:
        raise RuntimeError("no task registry is loaded: import a2rl.tasks, which registers "
                           "the grader's task loader")
    return _task_loader


def load_task(target: str, task_id: str, profile: str, options: Mapping[str, Any]) -> GradedTask:
    """Build a run's task with the loader `target` names; one that builds something else
    than a `GradedTask` is a `TypeError` naming it."""
    loader: TaskLoader = resolve_target(target)  # type: ignore[assignment]
    task = loader(task_id, profile, options)
    if not isinstance(task, GradedTask):
        raise TypeError(f"the task loader {target} built a {type(task).__name__}, not a task")
    return task
