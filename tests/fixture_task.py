"""A tiny task for testing the tools and the server without building or training a model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.settings import Settings
from a2rl.tasks import Split, Task, TaskScore, TaskSpec, register


class FixtureTask(Task):
    spec = TaskSpec(id="fixture", level=1, title="Fixture task for tests",
                    description="# fixture\nA task that only tests use.\n", version="1",
                    default_budget="30m")

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        return [{"id": f"t{i}", "prompt": f"{i}+1", "answer": str(i + 1)} for i in range(5)]

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        return []

    def build_prompt(self, item: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": item["prompt"]}]

    def score_outputs(self, items: Sequence[dict[str, Any]], outputs: Sequence[str]) -> TaskScore:
        return TaskScore(score=0.0, n_items=0, n_correct=0)

    def base_model_dir(self, settings: Settings) -> Path:
        d = settings.home_dir / "models" / "fixture"
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text('{"model_type": "llama"}')
        return d


register("fixture", FixtureTask)


class ServicesFixtureTask(FixtureTask):
    """The fixture task with one per-run service, `echo` (`<run dir>/services/echo.sock`)."""

    spec = FixtureTask.spec.model_copy(update={"id": "fixture-services"})
    services = {"echo": lambda task, settings: lambda request: {"echo": request}}


register("fixture-services", ServicesFixtureTask)


class InputsFixtureTask(FixtureTask):
    """The fixture task declaring a read-only input it writes nothing to (`env/`, as a task
    whose environment is optional): the name is left for the agent to fill."""

    spec = FixtureTask.spec.model_copy(update={
        "id": "fixture-inputs", "readonly_paths": ["base_model", "data", "env"]})


register("fixture-inputs", InputsFixtureTask)
