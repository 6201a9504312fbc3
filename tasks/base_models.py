"""Resolving a base model name (a task's `default_base_model`) to a local directory.

Names resolve in order: a built-in (the embedded tiny model), a local directory holding a
`config.json`, then a Hugging Face hub id (`owner/name`, fetched once into `$A2RL_HOME/models/hub`;
see `hub.py`). Resolution is by name so a spec stays plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.settings import Settings

from .hub import ensure_hub_model, is_hub_id
from .tiny_model import ensure_base_model

if TYPE_CHECKING:
    from .base import Task

BASE_MODELS: dict[str, Callable[[Settings], Path]] = {"tiny-llama": ensure_base_model}


def resolve_base_model(name: str, settings: Settings) -> Path:
    """The cached directory of base model `name`, building or fetching it when needed."""
    if name in BASE_MODELS:
        return BASE_MODELS[name](settings)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    if is_hub_id(name):
        return ensure_hub_model(name, settings)
    raise KeyError(f"unknown base model {name!r}; known: {', '.join(sorted(BASE_MODELS))}")


def base_model_name(task: Task, settings: Settings) -> str:
    """The base model `task` uses: the constructor's override, then the task's option
    `base_model` (-T, `[tasks.<id>]`, the deprecated `task_base_models[<task>]`), then the
    global `base_model`, then the spec's default (a hub id, a folder or `tiny-llama`)."""
    return (task.base_model_override or task.options(settings).base_model
            or settings.base_model or task.spec.default_base_model)
