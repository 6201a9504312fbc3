"""The `Task` base: what every task provides to the harness and the grader.

A task owns its data (a visible train split written into the workspace, hidden splits the
grader loads from `$A2RL_HOME`), its prompt format, its scoring, its options and how it is
evaluated (`evaluate`: generate then score by default; interactive tasks play rollouts). The
grader sees a task only through `a2rl.grading.seam.GradedTask`, which this class implements.
The workspace layout is the same for every task (`a2rl.layout`), so `prepare_workspace` is
shared here; tasks add their own files.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from a2rl.grading.seam import ItemResult, Messages, Split, TaskScore
from a2rl.layout import BASE_MODEL, DATA, TASK_FILE, WRITABLE_DIRS
from a2rl.settings import Settings

from .base_models import resolve_base_model
from .data_status import DataStatus, TaskDataError, check_sizes
from .hub import BaseModelUnavailable
from .improvement import IntervalResult, Scored, proportion_interval
from .options import TaskOptions, check_keys
from .profiles import PAPER_BUDGET, TOY_PAPER_NOTE, check_profile
from .scorers import Scorer
from .spec import GraderSettings, SplitInfo, TaskSpec

if TYPE_CHECKING:
    from a2rl.grading.seam import GenerationEngine

__all__ = ["ItemResult", "Messages", "Split", "Task", "TaskDataError", "TaskScore",
           "copy_tree_readonly"]


@dataclass(frozen=True)
class ServiceAnswer:
    """What a service handler (`Task.services`) may return instead of a plain result:
    `result` goes back to the sandbox, `record` only into the store's row of the request.
    For what the harness must keep and the sandbox must not learn (how many search results
    were withheld for carrying a hidden answer tells which words are hidden answers)."""

    result: Any
    record: dict[str, Any]


class Task(ABC):
    """Base class of a task. Subclasses set `spec` and implement the data and scoring."""

    spec: TaskSpec
    #: The evaluation profile this instance is configured for (`a2rl.tasks.profiles`); tasks
    #: branch on it in their data, prompt and scoring methods.
    profile: str = "a2rl"
    #: The task's options (`a2rl.tasks.options`): a subclass of `TaskOptions` for a task
    #: with knobs of its own.
    options_model: ClassVar[type[TaskOptions]] = TaskOptions
    #: Options given explicitly (`with_options`: -T, or a run's record), over the settings'.
    option_overrides: Mapping[str, Any] = {}
    #: The reference harness (microsoft/RD-Agent's autorl_bench) has this task, and
    #: `with_profile("paper")` builds its evaluation (a subclass swaps its spec there). A task
    #: without it refuses `paper`, unless it is a toy (`spec.toy`), which keeps its a2rl
    #: evaluation under it (`evaluated_as`).
    has_paper_profile: ClassVar[bool] = False
    #: How outputs are scored (`a2rl.tasks.scorers`: exact match, code execution, ...), handed
    #: in by the task; None for a task that scores in its own `evaluate`.
    scorer: Scorer | None = None

    def with_profile(self, profile: str) -> Task:
        """A copy of this task configured for `profile` (this task when it already is).

        The base switches the profile and, for `paper`, the default budget to the paper's; a
        task overrides this to swap the rest of its spec (grader settings, splits, default
        base model) and calls it first. A toy task (`spec.toy`) accepts `paper` and keeps its
        `a2rl` evaluation and budget (`evaluated_as`); other tasks the reference harness does
        not have refuse it: there is nothing to be faithful to.
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

    def profile_settings(self, settings: Settings | None = None) -> dict[str, Any]:
        """The evaluation settings in force for this profile, as `a2rl tasks --profile` shows
        them: splits, generation, budget and base model, and the task's own notes (prompt
        format, answer extraction, success threshold...)."""
        spec = self.spec
        base_model = (self.base_model_name(settings) if settings is not None
                      else self.base_model_override or spec.default_base_model)
        return {"task_id": spec.id, "profile": self.profile,
                "splits": {name: {"n_items": info.n_items, "visible": info.visible,
                                  "source": info.source} for name, info in spec.splits.items()},
                "max_new_tokens": spec.grader.max_new_tokens, "stop": list(spec.grader.stop),
                "default_budget": spec.default_budget, "base_model": base_model,
                **spec.notes}

    @property
    def evaluated_as(self) -> str:
        """The profile whose evaluation this task runs: its own, except a toy task under
        `paper`, which keeps the `a2rl` evaluation (the paper has no such task)."""
        if self.profile == "paper" and self.spec.toy and not self.has_paper_profile:
            return "a2rl"
        return self.profile

    @property
    def readonly_paths(self) -> list[str]:
        """Workspace paths the sandbox mounts read-only (recorded on the run when it is made,
        and used by its sandbox and file tools)."""
        return list(self.spec.readonly_paths)

    # --- options ----------------------------------------------------------------------------
    def with_options(self, overrides: Mapping[str, Any]) -> Task:
        """A copy of this task whose options take `overrides` over the settings' (-T, or the
        options recorded on a run); this task when there are none. Unknown keys are refused
        now (`OptionsError`); values are checked by `options`."""
        if not overrides:
            return self
        check_keys(self.options_model, self.spec.id, overrides, where="-T")
        task = copy.copy(self)
        task.option_overrides = {**self.option_overrides, **overrides}
        return task

    def options(self, settings: Settings) -> TaskOptions:
        """The options in force: defaults, deprecated settings, `[tasks.<id>]`, overrides."""
        return self.options_model.resolve(self.spec.id, settings, self.option_overrides)

    def options_record(self, settings: Settings) -> dict[str, Any]:
        """The resolved options as JSON, as runs and evaluations record them."""
        return self.options(settings).model_dump(mode="json")

    def options_defaults(self) -> dict[str, Any]:
        return self.options_model().model_dump(mode="json")

    # --- evaluation -------------------------------------------------------------------------
    def evaluate(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                 grader: GraderSettings) -> TaskScore:
        """The task's evaluation strategy. This default generates once per item (the task's
        prompt) and scores the outputs; a task graded otherwise (rollouts) overrides it."""
        outputs = engine.generate([self.build_prompt(it) for it in items],
                                  max_new_tokens=grader.max_new_tokens, stop=grader.stop)
        return self.score_outputs(items, outputs)

    def paired_interval(self, final: Scored, base: Scored) -> IntervalResult:
        """The 95% interval of the improvement of the final test evaluation over the baseline's,
        paired over items (`a2rl.tasks.improvement`): both evaluations' per-item results come
        matched by id, in one order, scored under one profile. This default is for a score
        that is the share of items correct; a task whose score is something else (a mean
        reward, a length-controlled win rate) overrides it, or its runs get no interval."""
        return proportion_interval(final, base)

    def services(self, settings: Settings) -> dict[str, Callable[[dict[str, Any]], Any]]:
        """Per-run services the task's code inside the sandbox reaches over unix sockets
        (`<run dir>/services/<name>.sock`, JSON lines; `a2rl.server.services`): name ->
        handler of one request, answering a JSON-able result or a `ServiceAnswer`. Every
        request is recorded. None by default."""
        return {}

    # --- data -------------------------------------------------------------------------------
    @abstractmethod
    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        """The visible train split, as written to data/train.jsonl."""

    @abstractmethod
    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        """A hidden split. Never written into a workspace."""

    def splits(self, settings: Settings) -> dict[str, SplitInfo]:
        """The splits this installation's data give a run, read from the data
        (`a2rl.tasks.data_status`); this default, for data generated from a seed or shipped
        with the package, is the spec's. Raises `TaskDataError` (one line) when the data are
        missing or not in the task's schema."""
        return dict(self.spec.splits)

    def check_data(self, settings: Settings) -> dict[str, SplitInfo]:
        """`splits`, refused in one line (`TaskDataError`) when a split a run needs is empty:
        checked before a run is made, so that nothing is created for data that cannot
        make one."""
        splits = self.splits(settings)
        check_sizes(self.spec.id, splits, "this installation")
        return splits

    def data_status(self, settings: Settings) -> DataStatus:
        """The data on this installation, as `a2rl tasks` lists them: cheap and offline (no
        download). This default: generated or shipped data, the spec's splits."""
        return DataStatus(state="generated", splits=dict(self.spec.splits))

    def hidden_split_identity(self, settings: Settings) -> str | None:
        """What makes this installation's hidden splits differ from another's with the same
        task, version and options: None where the data fixes them (the default); a digest of
        the secret seed for a task that draws them from one (never the seed itself). The
        baseline's cache key holds it (`a2rl.grading.baseline_key`): a store shared by homes
        with other seeds must not serve one home's baseline, scored on other items, to
        another's runs."""
        return None

    def audit_control_items(self, settings: Settings) -> list[dict[str, Any]] | None:
        """Items of the task's own kind the agent was never given and that are not hidden:
        the audit's control for short items (a2rl.audit.contamination), which text that
        enumerates the task's space finds as often as hidden ones, and text made from the
        hidden data does not. None (the default): the visible train items serve, which text
        copying the train file finds too, so a task whose items are short should give these."""
        return None

    def hidden_data_paths(self, settings: Settings) -> list[Path]:
        """Host files or folders that carry this task's hidden items (a data file shipped in a
        package, a hub cache, a data folder, a secret seed). Every run's sandbox masks them,
        whatever its task (`a2rl.tasks.hidden_data`): declare anything a job could otherwise
        read under a mounted path. None by default (a task whose items live only in the store
        or in `$A2RL_HOME/secrets`, which no sandbox mounts, may keep it)."""
        return []

    @abstractmethod
    def build_prompt(self, item: dict[str, Any]) -> Messages:
        """The chat messages the grader sends for `item` (rendered with the chat template)."""

    def score_outputs(
        self, items: Sequence[dict[str, Any]], outputs: Sequence[str]
    ) -> TaskScore:
        """Score model outputs against items (same order) with the task's `scorer`; used by
        the default `evaluate`. A task whose `evaluate` does not generate single outputs
        needs neither."""
        if self.scorer is None:
            raise NotImplementedError(f"{self.spec.id} scores outputs in its own `evaluate`")
        return self.scorer(items, outputs)

    # --- workspace --------------------------------------------------------------------------
    base_model_override: str | None = None  # set by a task constructed with base_model=

    def base_model_name(self, settings: Settings) -> str:
        """The base model this task uses: the constructor's override, then the task's option
        `base_model` (-T, `[tasks.<id>]`, the deprecated `task_base_models[<task>]`), then
        the global `base_model`, then the spec's default (a hub id, a folder or `tiny-llama`)."""
        return (self.base_model_override or self.options(settings).base_model
                or settings.base_model or self.spec.default_base_model)

    def base_model_dir(self, settings: Settings) -> Path:
        """The cached base model (built or fetched on first use). Not available, the one
        line says which option gives the task another: `-T base_model=`, and for a task that
        reads its data from the hub, the `data_dir` it will need next offline."""
        try:
            return resolve_base_model(self.base_model_name(settings), settings)
        except BaseModelUnavailable as exc:
            data = (f"; offline, {self.spec.id} also needs its data in a folder: "
                    f"-T data_dir=FOLDER" if "data_dir" in self.options_model.model_fields
                    else "")
            raise BaseModelUnavailable(
                f"{exc} Or give {self.spec.id} a local model: -T base_model=/path/to/model "
                f"(tiny-llama: the embedded tiny model){data} (a2rl tasks {self.spec.id})"
            ) from None

    def task_md(self, settings: Settings | None = None) -> str:
        """TASK.md as the agent reads it. Without settings, the spec's description (the
        full data's splits); a task whose sizes depend on the data writes them from
        `splits(settings)`, so that a run's TASK.md states what that run has."""
        return self.spec.description

    def prepare_workspace(
        self, workspace: Path, settings: Settings, *, link_base_model: bool = False
    ) -> None:
        """Write the visible files: TASK.md, data/train.jsonl, base_model/, empty code/ etc.

        Inputs are made read-only (files 0444) as a second line behind the sandbox's read-only
        mounts. The base model is copied by default: a hardlink would share the inode with the
        cache, so an agent that chmods and rewrites a file there would corrupt every later run.
        Pass `link_base_model=True` only when the sandbox guarantees read-only mounts.
        """
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / TASK_FILE).write_text(self.task_md(settings))
        for name in WRITABLE_DIRS:
            (workspace / name).mkdir(exist_ok=True)
        data = workspace / DATA
        data.mkdir(exist_ok=True)
        train = data / "train.jsonl"
        if train.exists():
            train.chmod(0o644)
        with train.open("w") as f:
            for item in self.train_items(settings):
                f.write(json.dumps(item) + "\n")
        train.chmod(0o444)
        copy_tree_readonly(self.base_model_dir(settings), workspace / BASE_MODEL,
                           link=link_base_model)


def copy_tree_readonly(src: Path, dest: Path, *, link: bool = False) -> None:
    """Copy (or hardlink) the files of `src` into `dest`, each left read-only (0444)."""
    if dest.exists():
        for p in dest.rglob("*"):
            if p.is_file():
                p.chmod(0o644)
        shutil.rmtree(dest)
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if link:
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
        else:
            shutil.copy2(path, target)
        target.chmod(0o444)
