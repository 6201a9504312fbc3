"""`InteractiveTask`: the base of level-3 tasks, graded by rollouts in an environment.

Why a separate base: a level-3 task has no fixed outputs to score. Its hidden split is a list of
environment instances; its `evaluate` (`run_rollouts`, below) plays each one with the submitted
model and scores the episodes. The task also writes the environment API into the workspace
(`env/`, read-only) so the agent can roll out on training instances. The contract is in
docs/level3.md.

Why rollouts are batched by step: a generation engine is fast on many prompts at once and slow
per call (on a GPU, plain `generate` runs about 15 decode steps per second whatever the batch).
So every hidden instance gets its own environment, all are stepped together, and each step
makes **one** `engine.generate` call over every episode still running. An environment that
raises (at creation, reset or any step) ends its own episode as failed, with the error
recorded; the others go on. The prompt and the action parsing are `a2rl_env`'s, the very code
the agent uses inside its workspace (docs/level3.md). The grader only hands in an engine
(`a2rl.grading.seam`).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from a2rl.layout import ENV, INTERACTIVE_READONLY_INPUTS
from a2rl.settings import Settings

from .base import ItemResult, Messages, Task, TaskScore
from .envapi.a2rl_env import Env, EnvPool, Episode, render_prompt
from .spec import GraderSettings
from .workspace import write_readonly

if TYPE_CHECKING:
    from a2rl.grading.seam import GenerationEngine

#: The read-only inputs of an interactive task's workspace (its `TaskSpec.readonly_paths`).
READONLY_PATHS: list[str] = list(INTERACTIVE_READONLY_INPUTS)

#: Files of the generic API written into every interactive workspace's env/.
API_FILES = ("a2rl_env.py",)


class RolloutSettings(BaseModel):
    """How episodes are played, for the grader and (through env/manifest.json) the agent."""

    instruction: str = Field(description="task-wide text that starts every prompt")
    max_steps: int = Field(10, ge=1, description="actions per episode at most")
    history_window: int = Field(1, ge=0, description="earlier (observation, action) pairs shown")


def write_env(task: Task, workspace: Path, settings: Settings, link_base_model: bool) -> None:
    """An interactive task's workspace part: env/, the generic API, the task's backend, the
    manifest and the README, all read-only. Nothing of the hidden splits goes there."""
    assert isinstance(task, InteractiveTask)
    files = {name: resources.files("a2rl.tasks.envapi").joinpath(name).read_text()
             for name in API_FILES}
    files.update(task.env_backend_files())
    files["manifest.json"] = json.dumps(task.manifest(), indent=1) + "\n"
    files["README.md"] = task.env_readme()
    write_readonly(workspace / ENV, files)


class InteractiveTask(Task):
    """A level-3 task. Subclasses set `spec` (level 3, readonly_paths with "env"), `rollout`,
    `backend_name`, and implement the data methods and `make_env`."""

    rollout: RolloutSettings
    #: The backend module's name inside env/ (env/<backend_name>.py).
    backend_name: str
    #: The workspace gets env/ (`write_env`); a task with more to show adds its own parts.
    workspace_parts = (write_env,)

    @abstractmethod
    def make_env(self, item: dict[str, Any]) -> Env:
        """The environment of one instance of any split (`item` from `load_split`)."""

    @abstractmethod
    def env_backend_files(self) -> dict[str, str]:
        """File name -> text of the backend written into env/ (besides the generic API)."""

    def episode_group(self, item: dict[str, Any]) -> str | None:
        """A group name for per-group success rates (ALFWorld: the task type); None: none."""
        return None

    # --- evaluation -------------------------------------------------------------------------
    def evaluate(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                 grader: GraderSettings) -> TaskScore:
        """Rollouts: play every hidden instance with the engine's model, score the episodes."""
        return run_rollouts(self, items, engine, grader)

    def play_episodes(self, items: Sequence[dict[str, Any]], engine: GenerationEngine,
                      grader: GraderSettings | None = None) -> list[Episode] | None:
        """This task's own episode loop for its profile (ALFWorld's `paper`: ReAct), or None
        to be played by the shared loop (`play`, below)."""
        return None

    def env_readme(self) -> str:
        return resources.files("a2rl.tasks.envapi").joinpath("README.md").read_text()

    def manifest(self) -> dict[str, Any]:
        return {"task": self.spec.id, "backend": self.backend_name,
                "prompt_version": self.spec.prompt_version,
                "max_new_tokens": self.spec.grader.max_new_tokens,
                **self.rollout.model_dump()}

    # --- prompts --------------------------------------------------------------------------
    def build_prompt(self, item: dict[str, Any]) -> Messages:
        """The grader's chat messages for one step: `item` holds `observation`, `history`
        (earlier (observation, action) pairs) and optionally `admissible`."""
        text = render_prompt(self.rollout.instruction, item.get("history", []),
                             item["observation"], item.get("admissible"),
                             self.rollout.history_window)
        return [{"role": "user", "content": text}]

    def score_episodes(self, items: Sequence[dict[str, Any]],
                       episodes: Sequence[Episode]) -> TaskScore:
        """Success rate (Wilson interval), mean reward and steps, errors, and per-group
        success; one `ItemResult` per episode with its full record."""
        results: list[ItemResult] = []
        groups: dict[str, list[int]] = {}
        for item, ep in zip(items, episodes, strict=True):
            results.append(ItemResult(
                id=ep.id, prompt=ep.observations[0] if ep.observations else "",
                output=ep.transcript(), expected="success", correct=ep.success,
                parsed=ep.actions[-1] if ep.actions else None, episode=ep.to_dict()))
            group = self.episode_group(item)
            if group is not None:
                groups.setdefault(group, []).append(int(ep.success))
        n = len(results)
        metrics: dict[str, Any] = {
            "mean_reward": sum(e.total_reward for e in episodes) / n if n else 0.0,
            "mean_steps": sum(e.steps for e in episodes) / n if n else 0.0,
            "n_errors": sum(e.error is not None for e in episodes),
            "rollout": self.rollout.model_dump(),
        }
        if groups:
            metrics["success_by_group"] = {g: sum(v) / len(v) for g, v in sorted(groups.items())}
        return TaskScore.from_items(results, metric="success_rate", count=False, **metrics)


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
