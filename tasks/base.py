"""The `Task` base: what every task must say, and the parts it hands in for the rest.

Every task says what it is (`spec`), its data (`train_items`, the visible split written into
the workspace; `load_split`, a hidden split the grader loads from `$A2RL_HOME`), its prompt
(`build_prompt`), what the agent reads (`task_md`) and how it is evaluated (`evaluate`: by
default generate, then `score_outputs`). The rest is optional behaviour, handed in as parts,
each a small object or function with a default that serves a task with nothing particular to
say (docs/adding-a-task.md has the table):

- `scorer` (`a2rl.tasks.scorers`): exact match, code execution, an LLM judge...
- `data_source` (`a2rl.tasks.task_data`): the splits the installed data give, their status,
  the host paths that carry hidden items, what tells this home's hidden splits from another's.
- `workspace_parts` (`a2rl.tasks.workspace`): files a task adds to the shared layout.
- `services` (`a2rl.tasks.services`): the per-run sockets its sandboxed code reaches.
- `options_model` (`a2rl.tasks.options`): its knobs.

Configuring a task (a profile, options) and answering the grader (`a2rl.grading.seam.
GradedTask`, which this class implements) are the few methods left here; what the harness
does with a task is in functions of their own modules: `prepare_workspace` (workspace.py),
`check_data` and `data_status` (task_data.py), `profile_settings` (listing.py),
`base_model_name` (base_models.py).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from a2rl.grading.seam import ItemResult, Messages, Split, TaskScore
from a2rl.settings import Settings

from .base_models import base_model_name, resolve_base_model
from .data_status import TaskDataError
from .hub import BaseModelUnavailable
from .improvement import IntervalResult, Scored, proportion_interval
from .options import TaskOptions, check_keys
from .profiles import PAPER_BUDGET, TOY_PAPER_NOTE, check_profile
from .scorers import Scorer
from .services import ServiceAnswer, ServiceFactory
from .spec import GraderSettings, TaskSpec
from .task_data import TaskData
from .workspace import WorkspacePart, copy_tree_readonly

if TYPE_CHECKING:
    from a2rl.grading.seam import GenerationEngine

__all__ = ["ItemResult", "Messages", "ServiceAnswer", "Split", "Task", "TaskDataError",
           "TaskScore", "copy_tree_readonly"]


class Task(ABC):
    """Base class of a task: set `spec`, implement the data and the prompt, hand in parts."""

    spec: TaskSpec
    #: The evaluation profile this instance is configured for (`a2rl.tasks.profiles`); tasks
    #: branch on it in their data, prompt and scoring methods.
    profile: str = "a2rl"
    #: The reference harness (microsoft/RD-Agent's autorl_bench) has this task, and
    #: `with_profile("paper")` builds its evaluation (a subclass swaps its spec there). A task
    #: without it refuses `paper`, unless it is a toy (`spec.toy`), which keeps its a2rl
    #: evaluation under it (`evaluated_as`).
    has_paper_profile: ClassVar[bool] = False

    # --- parts (each default serves a task with nothing particular to say) -----------------
    #: How outputs are scored (`a2rl.tasks.scorers`); None for a task that scores in its own
    #: `evaluate` or `score_outputs`.
    scorer: Scorer | None = None
    #: The task's options: a subclass of `TaskOptions` for a task with knobs of its own.
    options_model: ClassVar[type[TaskOptions]] = TaskOptions
    #: What the harness asks of the task's data (`a2rl.tasks.task_data`).
    data_source: TaskData = TaskData()
    #: Files the task adds to the shared workspace layout, in order (`a2rl.tasks.workspace`).
    workspace_parts: tuple[WorkspacePart, ...] = ()
    #: Per-run services its code inside the sandbox reaches: name -> handler factory
    #: (`a2rl.tasks.services`). None by default.
    services: Mapping[str, ServiceFactory] = {}

    # --- configuration ------------------------------------------------------------------------
    #: Options given explicitly (`with_options`: -T), over the settings'.
    option_overrides: Mapping[str, Any] = {}
    #: The options in force, once resolved (`resolved`, when a run is made) or read back from
    #: a run's record (`with_recorded_options`): from then on `options` returns them and never
    #: reads the settings again, so every part of a run (its checks, its workspace, its
    #: services, its grader on any process or node) uses the options the run recorded.
    pinned_options: TaskOptions | None = None
    base_model_override: str | None = None  # set by a task constructed with base_model=

    def with_profile(self, profile: str) -> Task:
        """A copy of this task configured for `profile` (this task when it already is).

        The base switches the profile and, for `paper`, the default budget to the paper's; a
        task overrides this to swap the rest of its spec (grader settings, splits, default
        base model, scorer) and calls it first. A toy task (`spec.toy`) accepts `paper` and
        keeps its `a2rl` evaluation and budget (`evaluated_as`); other tasks the reference
        harness does not have refuse it: there is nothing to be faithful to.
        """
        profile = check_profile(profile)
        if profile == self.profile:
            return self
        if self.profile != "a2rl":
            raise ValueError(f"{self.spec.id}: build a profile from the a2rl task "
                             "(get_task(task_id, profile)), not from another profile")
        if profile == "paper" and not self.has_paper_profile:
            if not self.spec.toy:
                raise ValueError(
                    f"task {self.spec.id!r} has no paper profile (the reference harness has no "
                    "such task; `a2rl tasks --profile paper` lists those it has; toy tasks run "
                    "under it with their a2rl evaluation)")
            task = copy.copy(self)
            task.profile = profile
            notes = {**self.spec.notes, "paper_profile": TOY_PAPER_NOTE}
            task.spec = self.spec.model_copy(update={"profile": profile, "notes": notes})
            return task
        task = copy.copy(self)
        task.profile = profile
        if profile == "paper":
            task.spec = self.spec.model_copy(update={"default_budget": PAPER_BUDGET,
                                                      "profile": profile})
        return task

    @property
    def evaluated_as(self) -> str:
        """The profile whose evaluation this task runs: its own, except a toy task under
        `paper`, which keeps the `a2rl` evaluation (the paper has no such task)."""
        if self.profile == "paper" and self.spec.toy and not self.has_paper_profile:
            return "a2rl"
        return self.profile

    def with_options(self, overrides: Mapping[str, Any]) -> Task:
        """A copy of this task whose options take `overrides` (-T) over the settings'; this
        task when there are none. Unknown keys are refused now (`OptionsError`); values are
        checked by `options`. A task whose options are pinned takes them over its pinned ones
        (values checked now)."""
        if not overrides:
            return self
        check_keys(self.options_model, self.spec.id, overrides, where="-T")
        if self.pinned_options is not None:
            return self.with_recorded_options(
                {**self.pinned_options.model_dump(mode="json"), **overrides})
        task = copy.copy(self)
        task.option_overrides = {**self.option_overrides, **overrides}
        return task

    def resolved(self, settings: Settings) -> Task:
        """A copy of this task with its options resolved now, against `settings`, and pinned:
        what making a run does once (`a2rl create/run` before their checks, else
        `create_run`). `OptionsError` on a bad key or value, of -T or `[tasks.<id>]`."""
        if self.pinned_options is not None:
            return self
        task = copy.copy(self)
        task.pinned_options = self.options(settings)
        task.option_overrides = {}
        return task

    def with_recorded_options(self, record: Mapping[str, Any]) -> Task:
        """A copy of this task with the options a run recorded (`Run.task_options`, or a
        config already resolved) pinned as they are: no setting of this process is read, so
        a grader on another node, or under a `config.toml` changed since, uses exactly the
        run's options. `OptionsError` on a key the task no longer has or a bad value."""
        task = copy.copy(self)
        task.pinned_options = self.options_model.validated(self.spec.id, record)
        task.option_overrides = {}
        return task

    def options(self, settings: Settings | None = None) -> TaskOptions:
        """The options in force: the pinned ones, else resolved from defaults, deprecated
        settings, `[tasks.<id>]` and the overrides (`settings` needed then)."""
        if self.pinned_options is not None:
            return self.pinned_options
        if settings is None:
            raise ValueError(f"task {self.spec.id}: its options are not resolved yet and no "
                             "settings were given to resolve them")
        return self.options_model.resolve(self.spec.id, settings, self.option_overrides)

    def options_record(self, settings: Settings | None = None) -> dict[str, Any]:
        """The options in force as JSON, as runs and evaluations record them."""
        return self.options(settings).model_dump(mode="json")

    def options_defaults(self) -> dict[str, Any]:
        return self.options_model().model_dump(mode="json")

    def base_model_dir(self, settings: Settings) -> Path:
        """The cached base model (built or fetched on first use; `base_model_name` says which).
        Not available, the one line says which option gives the task another:
        `-T base_model=`, and for a task that reads its data from the hub, the `data_dir` it
        will need next offline."""
        try:
            return resolve_base_model(base_model_name(self, settings), settings)
        except BaseModelUnavailable as exc:
            data = (f"; offline, {self.spec.id} also needs its data in a folder: "
                    f"-T data_dir=FOLDER" if "data_dir" in self.options_model.model_fields
                    else "")
            raise BaseModelUnavailable(
                f"{exc} Or give {self.spec.id} a local model: -T base_model=/path/to/model "
                f"(tiny-llama: the embedded tiny model){data} (a2rl tasks {self.spec.id})"
            ) from None

    def hidden_split_identity(self, settings: Settings) -> str | None:
        """What tells this home's hidden splits from another's with the same task, version and
        options (`TaskData.hidden_identity`: a secret seed's digest, or None where the data fix
        them). The baseline's cache key holds it (`a2rl.grading.baseline_key`): a store shared
        by homes with other seeds must not serve one home's baseline, scored on other items,
        to another's runs."""
        return self.data_source.hidden_identity(self, settings)

    # --- what every task must say ---------------------------------------------------------
    @abstractmethod
    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """The visible train split, as written to data/train.jsonl."""

    @abstractmethod
    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        """A hidden split. Never written into a workspace."""

    @abstractmethod
    def build_prompt(self, item: dict[str, Any]) -> Messages:
        """The chat messages the grader sends for `item` (rendered with the chat template)."""

    def task_md(self, settings: Settings | None = None) -> str:
        """TASK.md as the agent reads it. Without settings, the spec's description (the
        full data's splits); a task whose sizes depend on the data writes them from
        `data_source.splits`, so that a run's TASK.md states what that run has."""
        return self.spec.description

    def evaluate(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                 grader: GraderSettings) -> TaskScore:
        """The task's evaluation strategy. This default generates once per item (the task's
        prompt) and scores the outputs; a task graded otherwise (rollouts) overrides it."""
        outputs = engine.generate([self.build_prompt(it) for it in items],
                                  max_new_tokens=grader.max_new_tokens, stop=grader.stop)
        return self.score_outputs(items, outputs)

    def score_outputs(
        self, items: Sequence[dict[str, Any]], outputs: Sequence[str]
    ) -> TaskScore:
        """Score model outputs against items (same order) with the task's `scorer`; used by
        the default `evaluate`. A task whose `evaluate` does not generate single outputs
        needs neither."""
        if self.scorer is None:
            raise NotImplementedError(f"{self.spec.id} scores outputs in its own `evaluate`")
        return self.scorer(items, outputs)

    def paired_interval(self, final: Scored, base: Scored) -> IntervalResult:
        """The 95% interval of the improvement of the final test evaluation over the baseline's,
        paired over items (`a2rl.tasks.improvement`): both evaluations' per-item results come
        matched by id, in one order, scored under one profile. This default is for a score
        that is the share of items correct; a task whose score is something else (a mean
        reward, a length-controlled win rate) overrides it, or its runs get no interval."""
        return proportion_interval(final, base)
