"""A fleet's plan: which runs to make (tasks x agents x driver models x repeats) and what each
asks of a node. Read from a TOML file or built from `a2rl fleet` flags; validated here, at the
boundary, so that a typo fails before anything is scheduled. Each planned run is a
`RunConfig`, handed to its node as JSON.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from a2rl.store import Run, RunConfig, RunKnobs

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class AgentPlan(BaseModel):
    """One agent system and the driver models it runs with (none: the connector's default)."""

    name: str
    models: list[str | None] = Field(default_factory=lambda: [None])
    options: dict[str, str] = Field(default_factory=dict)

    model_config = {"extra": "forbid"}

    @field_validator("models")
    @classmethod
    def _some_model(cls, models: list[str | None]) -> list[str | None]:
        return models or [None]


class FleetPlan(RunKnobs):
    """Everything `a2rl fleet` needs besides the cluster's address and the store's URL: which
    runs (tasks x agents x driver models x repeats), what each asks of Ray, and the knobs
    every run shares (`RunKnobs`: budget, backend, protocol, profile, ...; `seed` is the
    first repeat's, repeat i runs with seed + i)."""

    name: str = Field(description="the fleet's id: running a plan with the same name resumes it")
    tasks: list[str] = Field(min_length=1)
    agents: list[AgentPlan] = Field(min_length=1)
    repeats: int = Field(1, ge=1)
    gpus_per_run: float = Field(0, ge=0, description="GPUs each run asks Ray for")
    resource: str | None = Field(
        None, description="a custom Ray resource each run asks one unit of (nodes without GPUs)")
    task_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="task id -> its options (`[fleet.task_options.<id>]`"
        "; -T on `a2rl run`)")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"fleet name {name!r}: use letters, digits, '.', '_' or '-'")
        return name

    def runs(self) -> list[RunConfig]:
        """The plan expanded into runs, in a stable order (tasks, agents, models, repeats):
        each a whole `RunConfig`, which its node makes the run of."""
        shared = self.model_dump(include=set(RunKnobs.model_fields))
        out = []
        for task in self.tasks:
            for agent in self.agents:
                for model in agent.models:
                    for i in range(self.repeats):
                        out.append(RunConfig.parse({
                            **shared, "task_id": task, "agent": agent.name,
                            "driver_model": model, "fleet_id": self.name, "fleet_repeat": i,
                            "seed": None if self.seed is None else self.seed + i,
                            "agent_options": dict(agent.options),
                            "task_options": {k: str(v) for k, v in
                                             self.task_options.get(task, {}).items()}}))
        return out


def resume_key(run: Run | RunConfig) -> tuple[str, str, str, int]:
    """What identifies a run within its fleet (the resume key, with the fleet's name): of a
    planned run and of a stored one alike."""
    return (run.task_id, run.agent or "", run.driver_model or "", run.fleet_repeat or 0)


def run_label(config: RunConfig) -> str:
    """`task/agent (model)#repeat`: a fleet's run as progress lines and results name it."""
    model = f" ({config.driver_model})" if config.driver_model else ""
    return f"{config.task_id}/{config.agent}{model}#{config.fleet_repeat or 0}"


def load_plan(path: Path, **overrides: object) -> FleetPlan:
    """A plan from a TOML file (see the README's fleet section); flags given override it."""
    data = tomllib.loads(path.read_text())
    data = data.get("fleet", data)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return FleetPlan.model_validate(data)


def parse_agent(text: str) -> tuple[str, str | None]:
    """`name` or `name:model` (the form `--agent` takes on the command line)."""
    name, _, model = text.partition(":")
    if not name:
        raise ValueError(f"--agent takes NAME or NAME:MODEL, not {text!r}")
    return name, model or None


def plan_from_flags(name: str, tasks: list[str], agents: list[str], repeats: int,
                    options: dict[str, str], **fields: object) -> FleetPlan:
    """A plan from `a2rl fleet` flags: `--agent NAME[:MODEL]` may repeat, models group by agent."""
    grouped: dict[str, list[str | None]] = {}
    for text in agents:
        agent, model = parse_agent(text)
        grouped.setdefault(agent, []).append(model)
    return FleetPlan.model_validate({
        "name": name, "tasks": tasks, "repeats": repeats,
        "agents": [{"name": a, "models": m, "options": options} for a, m in grouped.items()],
        **{k: v for k, v in fields.items() if v is not None}})
