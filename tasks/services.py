"""Per-run services a task's code inside the sandbox reaches: the part a task hands in
(`Task.services`), and what its handlers may answer.

A sandbox has no network; a task whose environment needs something outside it (DeepSearchQA's
search engine, its key and index) declares services: name -> a factory that, given the task
configured for the run and the settings, makes the handler of one request. The serving process
binds each on a unix socket in the run's `services/` folder and records every request
(`a2rl.server.services`); the sandbox's code speaks to it with `a2rl.jsonl_socket`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from a2rl.settings import Settings

if TYPE_CHECKING:
    from .base import Task

__all__ = ["Handler", "ServiceAnswer", "ServiceFactory", "service_handlers"]

#: One request (a parsed JSON object) -> a JSON-able result or a `ServiceAnswer`; raise
#: ValueError for a refused request (its message goes back to the caller).
Handler = Callable[[dict[str, Any]], Any]
#: Makes a service's handler for a run: the task as the run configured it, the settings.
ServiceFactory = Callable[["Task", Settings], Handler]


@dataclass(frozen=True)
class ServiceAnswer:
    """What a service handler may return instead of a plain result: `result` goes back to
    the sandbox, `record` only into the store's row of the request. For what the harness must
    keep and the sandbox must not learn (how many search results were withheld for carrying
    a hidden answer tells which words are hidden answers)."""

    result: Any
    record: dict[str, Any]


def service_handlers(task: Task, settings: Settings) -> dict[str, Handler]:
    """The handlers of `task`'s services for a run (none for most tasks)."""
    return {name: make(task, settings) for name, make in task.services.items()}
