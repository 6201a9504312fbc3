"""The task registry: ids to `Task` instances, built lazily so listing tasks stays cheap."""

from __future__ import annotations

from collections.abc import Callable

from .base import Task

_FACTORIES: dict[str, Callable[[], Task]] = {}
_INSTANCES: dict[str, Task] = {}


def register(task_id: str, factory: Callable[[], Task]) -> None:
    """Add a task; a later registration under the same id replaces the earlier one."""
    _FACTORIES[task_id] = factory
    _INSTANCES.pop(task_id, None)


def get_task(task_id: str) -> Task:
    if task_id not in _FACTORIES:
        known = ", ".join(sorted(_FACTORIES)) or "none"
        raise KeyError(f"unknown task {task_id!r}; known tasks: {known}")
    if task_id not in _INSTANCES:
        _INSTANCES[task_id] = _FACTORIES[task_id]()
    return _INSTANCES[task_id]


def list_tasks() -> list[Task]:
    return [get_task(task_id) for task_id in sorted(_FACTORIES)]


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
