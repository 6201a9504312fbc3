"""Rollouts: how an interactive (level-3) task is evaluated, by playing its hidden instances.

Lives with the tasks because it is the interactive tasks' evaluation strategy
(`InteractiveTask.evaluate`); the grader only hands it an engine (`a2rl.grading.seam`).

Why batched by step: a generation engine is fast on many prompts at once and slow per call
(on a GPU, plain `generate` runs about 15 decode steps per second whatever the batch). So
every hidden instance gets its own environment, all are stepped together, and each step makes
**one** `engine.generate` call over every episode still running. An environment that raises
(at creation, reset or any step) ends its own episode as failed, with the error recorded; the
others go on. The prompt and the action parsing are `a2rl_env`'s, the very code the agent
uses inside its workspace (docs/level3.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .envapi.a2rl_env import Env, EnvPool
from .spec import GraderSettings

if TYPE_CHECKING:
    from a2rl.grading.seam import GenerationEngine

    from .base import TaskScore
    from .interactive import InteractiveTask


def _factory(task: InteractiveTask, item: dict[str, Any]) -> Callable[[], Env]:
    return lambda: task.make_env(item)


def play(task: InteractiveTask, items: Sequence[dict[str, Any]], engine: GenerationEngine,
         grader: GraderSettings | None = None) -> EnvPool:
    """Play one episode per item, greedily, up to the task's step limit; the finished pool.
    `grader` overrides the task's generation settings (a capped length for smoke runs)."""
    rollout, grader = task.rollout, grader or task.spec.grader
    pool = EnvPool([str(it["id"]) for it in items], [_factory(task, it) for it in items],
                   instruction=rollout.instruction, window=rollout.history_window,
                   max_steps=rollout.max_steps)
    pool.reset()
    while active := pool.active():
        prompts = [[{"role": "user", "content": text}] for text in pool.prompts(active)]
        outputs = engine.generate(prompts, max_new_tokens=grader.max_new_tokens,
                                  stop=grader.stop)
        pool.step(dict(zip(active, outputs, strict=True)))
    return pool


def run_rollouts(task: InteractiveTask, items: Sequence[dict[str, Any]],
                 engine: GenerationEngine, grader: GraderSettings | None = None) -> TaskScore:
    """Play every item and score the episodes (success rate; per-episode records as items).
    A task with its own episode loop for its profile (ALFWorld's `paper` profile: ReAct with
    the full history) plays through `task.play_episodes`, which returns None to use ours."""
    episodes = task.play_episodes(items, engine, grader)
    if episodes is None:
        episodes = play(task, items, engine, grader).episodes
    return task.score_episodes(items, episodes)
