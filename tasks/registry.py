"""The task registry: task ids to `Task` instances, one per (id, profile).

Built on `a2rl.registry.Registry`: the built-in tasks are registered here as `"module:Class"`
strings, and installed packages add tasks through the `a2rl.tasks` entry-point group (see
docs/adding-a-task.md). Nothing is imported until a task is used: `task_ids()` lists every id
from these strings and the installed metadata alone, while `get_task` imports and builds one
task, and `list_tasks` builds the ones it returns (it needs their specs). A task whose package
fails to load is left out of `list_tasks` (and named by `task_load_errors`) and is a one-line
`PluginLoadError` when asked for by id.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

from a2rl.grading.seam import register_task_loader
from a2rl.registry import PluginLoadError, Registry
from a2rl.settings import Settings, register_legacy_declarations

from .base import Task
from .profiles import check_profile
from .task_data import TaskData

#: The entry-point group an installed package declares its tasks under.
ENTRY_POINT_GROUP = "a2rl.tasks"

#: The tasks that ship with a2rl. Registered in code rather than as a2rl's own entry points:
#: an editable checkout then never lists a stale set (entry points are metadata, rewritten only
#: by a reinstall), and a plugin cannot take a built-in's id (code registrations win).
BUILTIN_TASKS: dict[str, str] = {
    "arith": "a2rl.tasks.arith.task:ArithTask",
    "gsm8k": "a2rl.tasks.gsm8k.task:GSM8KTask",
    "humaneval": "a2rl.tasks.humaneval.task:HumanEvalTask",
    "alpacaeval": "a2rl.tasks.alpacaeval.task:AlpacaEvalTask",
    "textquest": "a2rl.tasks.textquest.task:TextQuestTask",
    "webshop": "a2rl.tasks.webshop.task:WebShopTask",
    "alfworld": "a2rl.tasks.alfworld.task:AlfWorldTask",
    "deepsearchqa": "a2rl.tasks.deepsearchqa.task:DeepSearchQATask",
}

#: Command groups a task adds to the command line (`a2rl <group> ...`), as `"module:attr"`
#: strings of typer apps, imported when the command line is built: a task's own chores (a
#: download only it needs) stay in its folder. A group's commands fail with
#: `a2rl.command.CommandError`, which the CLI's error policy prints as one line.
TASK_COMMANDS: dict[str, str] = {
    "alfworld": "a2rl.tasks.alfworld.cli:app",
}


#: The task a command runs when none is named: the toy (offline, minutes on a CPU), which the
#: demo and `a2rl run` use by default. Shared code names it through this constant, never
#: by its id.
DEFAULT_TASK = "arith"


#: The option declarations of the built-in tasks that had global settings before tasks had
#: options (`TaskOptions.legacy_settings`): imported when settings load
#: (`declare_legacy_settings`, registered below), so that they accept those old names
#: (`A2RL_GSM8K_DIR`, `webshop_dir` in config.toml) before any task is built, while listing
#: tasks still imports none. A new task has no such settings and no entry here.
LEGACY_DECLARATIONS = ("a2rl.tasks.gsm8k.options", "a2rl.tasks.alpacaeval.options",
                       "a2rl.tasks.webshop.options", "a2rl.tasks.alfworld.options",
                       "a2rl.tasks.deepsearchqa.options")


def declare_legacy_settings() -> None:
    """Import the declarations above: each registers its old names with the settings."""
    for module in LEGACY_DECLARATIONS:
        import_module(module)


register_legacy_declarations(declare_legacy_settings)


def _is_task_factory(target: object) -> bool:
    """A `Task` subclass, or any other callable (a factory; its result is checked on build)."""
    if isinstance(target, type):
        return issubclass(target, Task)
    return callable(target)


TASKS: Registry[Task] = Registry("task", group=ENTRY_POINT_GROUP, check=_is_task_factory)
for _id, _target in BUILTIN_TASKS.items():
    TASKS.register(_id, _target, source="builtin")

_INSTANCES: dict[tuple[str, str], Task] = {}
_LOCK = threading.RLock()


def register(task_id: str, factory: str | Callable[[], Task]) -> None:
    """Add a task (a `Task` class, a factory, or `"module:attr"`); a later registration under
    the same id replaces the earlier one and its built instances."""
    with _LOCK:
        TASKS.register(task_id, factory)
        for key in [k for k in _INSTANCES if k[0] == task_id]:
            del _INSTANCES[key]


def unregister(task_id: str) -> None:
    """Remove a task registered in code, and its built instances (tests use this)."""
    with _LOCK:
        TASKS.unregister(task_id)
        for key in [k for k in _INSTANCES if k[0] == task_id]:
            del _INSTANCES[key]


def task_ids() -> list[str]:
    """Every task id, built-in and installed, sorted, without importing any task."""
    return sorted(TASKS.names())


def _build(task_id: str) -> Task:
    factory = TASKS.load(task_id)
    entry = TASKS.entry(task_id)
    try:
        task = factory()
    except Exception as exc:
        if entry.source == "builtin":
            raise
        raise PluginLoadError(f"task {task_id!r} ({entry.source}, {entry.target}) failed to "
                              f"build: {type(exc).__name__}: {exc}") from exc
    if not isinstance(task, Task):
        raise PluginLoadError(f"task {task_id!r} ({entry.source}, {entry.target}) built a "
                              f"{type(task).__name__}, not a Task")
    if task.spec.id != task_id:
        raise PluginLoadError(f"task {task_id!r} ({entry.source}) has spec.id "
                              f"{task.spec.id!r}; the two must match")
    if (wrong := misshapen_part(task)) is not None:
        raise PluginLoadError(f"task {task_id!r} ({entry.source}): {wrong} "
                              "(docs/adding-a-task.md, the parts a task hands in)")
    return task


def misshapen_part(task: Task) -> str | None:
    """What is wrong with the parts `task` hands in, or None. A task written for the older
    shape (a `services(settings)` method, a `prepare_workspace` override) would otherwise fail
    only when a run first uses the part; this says so when the task is built."""
    if not isinstance(task.services, Mapping):
        return "`services` must be a mapping of name -> handler factory, not a method"
    if not isinstance(task.workspace_parts, tuple) or not all(
            callable(part) for part in task.workspace_parts):
        return "`workspace_parts` must be a tuple of functions"
    if not isinstance(task.data_source, TaskData):
        return f"`data_source` must be a TaskData, not a {type(task.data_source).__name__}"
    if task.scorer is not None and not callable(task.scorer):
        return "`scorer` must be a callable (items, outputs) -> TaskScore"
    return None


def get_task(task_id: str, profile: str = "a2rl") -> Task:
    """The task `task_id` configured for evaluation profile `profile` (one instance each).

    Unknown ids raise `UnknownName` and broken plugins `PluginLoadError`, both `KeyError`s.
    """
    profile = check_profile(profile)
    with _LOCK:
        if (task_id, "a2rl") not in _INSTANCES:
            _INSTANCES[(task_id, "a2rl")] = _build(task_id)
        if (task_id, profile) not in _INSTANCES:
            _INSTANCES[(task_id, profile)] = _INSTANCES[(task_id, "a2rl")].with_profile(profile)
        return _INSTANCES[(task_id, profile)]


def task_for_grading(task_id: str, profile: str, options: Mapping[str, Any]) -> Task:
    """The task a run's grader evaluates: `task_id` under `profile`, with the run's recorded
    options pinned, no setting of the grading process read (the `TaskLoader` grading's worker
    finds through the seam)."""
    return get_task(task_id, profile).with_recorded_options(options)


def task_of_run(task_id: str, profile: str, options: Mapping[str, Any], *, resolved: bool,
                settings: Settings) -> Task:
    """The task a run being made is of: `options` pinned as they are when `resolved` (the
    CLI resolved them before its checks), else resolved now against `settings` (-T over
    them): the one resolution of a run's options (`a2rl.tasks.options`)."""
    task = get_task(task_id, profile)
    if resolved:
        return task.with_recorded_options(options)
    return task.with_options(options).resolved(settings)


register_task_loader(f"{__name__}:task_for_grading")


def task_load_errors() -> dict[str, str]:
    """Task id -> one-line reason, for each task that cannot be loaded or built."""
    errors: dict[str, str] = {}
    for task_id in task_ids():
        try:
            get_task(task_id)
        except PluginLoadError as exc:
            errors[task_id] = str(exc)
    return errors


def list_tasks(profile: str | None = None) -> list[Task]:
    """Every task (`profile` None or a2rl), or those that have the profile `profile` (under
    `paper`: the harness's tasks and the toys, which keep their a2rl evaluation); a task that
    cannot be loaded is left out (`task_load_errors` says why; `a2rl tasks` prints it)."""
    if profile not in (None, "a2rl"):
        check_profile(profile)  # type: ignore[arg-type]
    tasks = []
    for task_id in task_ids():
        try:
            task = get_task(task_id)
            if profile not in (None, "a2rl"):
                if not task.has_paper_profile and not task.spec.toy:
                    continue
                task = get_task(task_id, profile)  # type: ignore[arg-type]
        except PluginLoadError:
            continue
        tasks.append(task)
    return tasks
