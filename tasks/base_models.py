"""Resolving a base model name (a task's `default_base_model`) to a local directory.

Only the embedded tiny model is built in; real tasks will add resolvers (a Hugging Face snapshot
on a user's machine). Resolution is by name so a spec stays plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from a2rl.settings import Settings

from .tiny_model import ensure_base_model

BASE_MODELS: dict[str, Callable[[Settings], Path]] = {"tiny-llama": ensure_base_model}


def resolve_base_model(name: str, settings: Settings) -> Path:
    """The cached directory of base model `name`, building or fetching it when needed."""
    if name in BASE_MODELS:
        return BASE_MODELS[name](settings)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise KeyError(f"unknown base model {name!r}; known: {', '.join(sorted(BASE_MODELS))}")
