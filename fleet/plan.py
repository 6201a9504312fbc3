"""A fleet's plan: which runs to make (tasks x agents x driver models x repeats) and what each
asks of a node. Read from a TOML file or built from `a2rl fleet` flags; validated here, at the
boundary, so that a typo fails before anything is scheduled.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from a2rl.settings import parse_duration

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


class FleetPlan(BaseModel):
    """Everything `a2rl fleet` needs besides the cluster's address and the store's URL."""

    name: str = Field(description="the fleet's id: running a plan with the same name resumes it")
    tasks: list[str] = Field(min_length=1)
    agents: list[AgentPlan] = Field(min_length=1)
    repeats: int = Field(1, ge=1)
    budget: str | None = Field(None, description="per run, e.g. 2h; default: the task's")
    gpus_per_run: float = Field(0, ge=0, description="GPUs each run asks Ray for")
    resource: str | None = Field(
        None, description="a custom Ray resource each run asks one unit of (nodes without GPUs)")
    backend: str | None = Field(None, description="local or docker; default: the node's setting")
    protocol: str = "heldout"
    profile: str = Field("a2rl", description="evaluation profile: a2rl or paper")
    max_submissions: int | None = None
    seed: int | None = Field(None, description="repeat i runs with seed + i")
    task_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="task id -> its options (`[fleet.task_options.<id>]`"
        "; -T on `a2rl run`)")

    model_config = {"extra": "forbid"}

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"fleet name {name!r}: use letters, digits, '.', '_' or '-'")
        return name

    @field_validator("budget")
    @classmethod
    def _valid_budget(cls, budget: str | None) -> str | None:
        if budget is not None:
            parse_duration(budget)
        return budget

    @model_validator(mode="after")
    def _valid_protocol(self) -> FleetPlan:
        if self.protocol not in ("heldout", "paper"):
            raise ValueError(f"protocol must be heldout or paper, not {self.protocol!r}")
        if self.profile not in ("a2rl", "paper"):  # a2rl.tasks.profiles (not imported: heavy)
            raise ValueError(f"profile must be a2rl or paper, not {self.profile!r}")
        return self

    def runs(self) -> list[RunSpec]:
        """The plan expanded into runs, in a stable order (tasks, agents, models, repeats)."""
        out = []
        for task in self.tasks:
            for agent in self.agents:
                for model in agent.models:
                    for i in range(self.repeats):
                        out.append(RunSpec(
                            fleet=self.name, task=task, agent=agent.name, model=model, repeat=i,
                            budget=self.budget, backend=self.backend, protocol=self.protocol,
                            profile=self.profile,
                            max_submissions=self.max_submissions,
                            seed=None if self.seed is None else self.seed + i,
                            options=dict(agent.options),
                            task_options={k: str(v) for k, v in
                                          self.task_options.get(task, {}).items()}))
        return out


class RunSpec(BaseModel):
    """One run of a fleet, as its Ray task receives it."""

    fleet: str
    task: str
    agent: str
    model: str | None
    repeat: int
    budget: str | None = None
    backend: str | None = None
    protocol: str = "heldout"
    profile: str = "a2rl"
    max_submissions: int | None = None
    seed: int | None = None
    options: dict[str, str] = Field(default_factory=dict)
    task_options: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What identifies the run within its fleet (the resume key, with the fleet's name)."""
        return (self.task, self.agent, self.model or "", self.repeat)

    @property
    def label(self) -> str:
        model = f" ({self.model})" if self.model else ""
        return f"{self.task}/{self.agent}{model}#{self.repeat}"


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
