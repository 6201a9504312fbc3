"""A task's data as the harness asks about them: the part every task has (`Task.data_source`).

What the harness needs to know of a task's data, beyond its items (`train_items`,
`load_split`): the splits this installation's data give a run (`check_data` refuses an empty
dev or test before a run is made), their state for `a2rl tasks` (`data_status`: cheap,
offline), the host paths that carry hidden items (`hidden_data_paths`: every run's sandbox masks
them, the audit checks a run's reach of them), what tells this home's hidden splits from
another's (`Task.hidden_split_identity`, part of the baseline's key) and the audit's control
items. A task hands in the part that says it: the default (`TaskData`) for data generated or
shipped with the package, `SecretSeed` for hidden splits drawn from this home's secret seed
(arith, textquest, a plugin's echo), or its own subclass for data read from a folder or the
hub (GSM8K, AlpacaEval, ...). Each method is given the task (configured for its profile and
options), so one part serves every copy `with_profile` and `with_options` make.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2rl.settings import Settings

from .data_status import DataStatus, check_sizes
from .hidden_seed import seed_digest, seed_path
from .spec import SplitInfo

if TYPE_CHECKING:
    from .base import Task

__all__ = ["SecretSeed", "TaskData", "audit_control_items", "check_data", "data_status",
           "hidden_data_paths"]


class TaskData:
    """Data generated from a seed or shipped with the package: the spec's splits, nothing
    hidden on the host, the same hidden items on every home, no audit controls."""

    def splits(self, task: Task, settings: Settings) -> dict[str, SplitInfo]:
        """The splits this installation's data give a run, read from the data; raises
        `TaskDataError` (one line naming the file or option) when they are missing or not in
        the task's schema."""
        return dict(task.spec.splits)

    def status(self, task: Task, settings: Settings) -> DataStatus:
        """The data on this installation, as `a2rl tasks` lists them: cheap and offline."""
        return DataStatus(state="generated", splits=dict(task.spec.splits))

    def hidden_paths(self, task: Task, settings: Settings) -> list[Path]:
        """Host files or folders that carry hidden items (a data file shipped in a package, a
        hub cache, a data folder, a secret seed): declare anything a job could otherwise read
        under a mounted path. None for items that live only under `$A2RL_HOME`."""
        return []

    def hidden_identity(self, task: Task, settings: Settings) -> str | None:
        """What makes this home's hidden splits differ from another's with the same task,
        version and options: None where the data fix them; a digest of a secret seed (never
        the seed itself) for a task that draws them from one."""
        return None

    def control_items(self, task: Task, settings: Settings) -> list[dict[str, Any]] | None:
        """Items of the task's own kind the agent was never given and that are not hidden:
        the audit's control for short items (`a2rl.audit.contamination`). None: the visible
        train items serve (a task whose items are short should give these)."""
        return None


class SecretSeed(TaskData):
    """Hidden splits drawn by public code from this home's secret seed `name`
    (`a2rl.tasks.secret_seed`): the seed file is what carries them, and its digest tells this
    home's items from another's."""

    def __init__(self, name: str) -> None:
        self.name = name

    def hidden_paths(self, task: Task, settings: Settings) -> list[Path]:
        return [seed_path(settings, self.name)]

    def hidden_identity(self, task: Task, settings: Settings) -> str | None:
        return seed_digest(settings, self.name)


def check_data(task: Task, settings: Settings) -> dict[str, SplitInfo]:
    """The splits `task`'s data give, refused in one line (`TaskDataError`) when a split a
    run needs is empty: checked before a run is made, so that nothing is created for data
    that cannot make one."""
    splits = task.data_source.splits(task, settings)
    check_sizes(task.spec.id, splits, "this installation")
    return splits


def data_status(task: Task, settings: Settings) -> DataStatus:
    """`task`'s data on this installation, as `a2rl tasks` lists them (no download)."""
    return task.data_source.status(task, settings)


def hidden_data_paths(task: Task, settings: Settings) -> list[Path]:
    """The host paths that carry `task`'s hidden items (`TaskData.hidden_paths`)."""
    return task.data_source.hidden_paths(task, settings)


def audit_control_items(task: Task, settings: Settings) -> list[dict[str, Any]] | None:
    """The audit's control items of `task` (`TaskData.control_items`)."""
    return task.data_source.control_items(task, settings)
