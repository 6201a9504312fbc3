"""The task registry: ids to `Task` instances, built lazily so listing tasks stays cheap."""

from __future__ import annotations

from collections.abc import Callable

from .base import Task
from .profiles import check_profile

_FACTORIES: dict[str, Callable[[], Task]] = {}
_INSTANCES: dict[tuple[str, str], Task] = {}


def register(task_id: str, factory: Callable[[], Task]) -> None:
    """Add a task; a later registration under the same id replaces the earlier one."""
    _FACTORIES[task_id] = factory
    for key in [k for k in _INSTANCES if k[0] == task_id]:
        del _INSTANCES[key]


def get_task(task_id: str, profile: str = "a2rl") -> Task:
    """The task `task_id` configured for evaluation profile `profile` (one instance each)."""
    profile = check_profile(profile)
    if task_id not in _FACTORIES:
        known = ", ".join(sorted(_FACTORIES)) or "none"
        raise KeyError(f"unknown task {task_id!r}; known tasks: {known}")
    if (task_id, "a2rl") not in _INSTANCES:
        _INSTANCES[(task_id, "a2rl")] = _FACTORIES[task_id]()
    if (task_id, profile) not in _INSTANCES:
        _INSTANCES[(task_id, profile)] = _INSTANCES[(task_id, "a2rl")].with_profile(profile)
    return _INSTANCES[(task_id, profile)]


def list_tasks(profile: str | None = None) -> list[Task]:
    """Every task (`profile` None or a2rl), or those that have the profile `profile`."""
    from .profiles import PAPER_TASKS

    ids = sorted(_FACTORIES)
    if profile not in (None, "a2rl"):
        ids = [i for i in ids if i in PAPER_TASKS]
    return [get_task(task_id, profile or "a2rl") for task_id in ids]


def _register_builtin() -> None:
    from .alfworld.task import AlfWorldTask
    from .alpacaeval.task import AlpacaEvalTask
    from .arith.task import ArithTask
    from .deepsearchqa.task import DeepSearchQATask
    from .gsm8k.task import GSM8KTask
    from .humaneval.task import HumanEvalTask
    from .textquest.task import TextQuestTask
    from .webshop.task import WebShopTask

    register("arith", ArithTask)
    register("gsm8k", GSM8KTask)
    register("humaneval", HumanEvalTask)
    register("alpacaeval", AlpacaEvalTask)
    register("textquest", TextQuestTask)
    register("webshop", WebShopTask)
    register("alfworld", AlfWorldTask)
    register("deepsearchqa", DeepSearchQATask)


_register_builtin()
