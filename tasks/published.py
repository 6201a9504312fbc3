"""The published figures a run can be set beside: those of its task's spec under the run's
profile (`TaskSpec.published`, declared in each task's `published.py`) for the run's base
model.

Only a `paper` run matches: the figures were measured with the reference harness's
evaluation, and a baseline of another protocol (our `a2rl` profile's prompts, extraction,
splits) is a different number, not a deviation from theirs. The base model matches by the
name the run records (`Run.base_model`, a hub id), exactly: another base model's score says
nothing about this one's.
"""

from __future__ import annotations

from .profiles import PROFILES
from .registry import get_task
from .spec import PublishedFigure


def published_figures(task_id: str, profile: str | None,
                      base_model: str | None) -> tuple[PublishedFigure, ...]:
    """The figures published for `task_id` under `profile` with `base_model`; none for
    another profile or base model, and none for a task that cannot be loaded (a plugin
    uninstalled since the run, an optional dependency missing)."""
    if not base_model or profile not in PROFILES:
        return ()
    try:
        spec = get_task(task_id, profile).spec
    except (KeyError, ImportError, ValueError):
        return ()
    return tuple(f for f in spec.published
                 if f.profile == profile and f.base_model == base_model)
