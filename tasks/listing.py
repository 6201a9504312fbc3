"""What `a2rl tasks --profile` shows of a task: the evaluation settings in force for its profile.

Read from the task's parts (its spec, its generation settings, its base model and, for an
interactive task, how its episodes are played); the task says none of it itself.
"""

from __future__ import annotations

from typing import Any

from a2rl.settings import Settings

from .base import Task
from .base_models import base_model_name
from .interactive import InteractiveTask


def profile_settings(task: Task, settings: Settings | None = None) -> dict[str, Any]:
    """Splits, generation, budget and base model of `task` under its profile, then its own
    notes (prompt format, answer extraction, success threshold...), then, for an interactive
    task, its episodes' step limit and history window."""
    spec = task.spec
    base_model = (base_model_name(task, settings) if settings is not None
                  else task.base_model_override or spec.default_base_model)
    shown = {"task_id": spec.id, "profile": task.profile,
             "splits": {name: {"n_items": info.n_items, "visible": info.visible,
                               "source": info.source} for name, info in spec.splits.items()},
             "max_new_tokens": spec.grader.max_new_tokens, "stop": list(spec.grader.stop),
             "default_budget": spec.default_budget, "base_model": base_model, **spec.notes}
    if isinstance(task, InteractiveTask):
        shown.update(max_steps=task.rollout.max_steps,
                     history_window=task.rollout.history_window)
    return shown
