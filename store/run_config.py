"""A run's configuration, one type: what a run is made with, from every door.

`a2rl create` and `a2rl run` build a `RunConfig` from their flags, the orchestrator takes one,
a fleet expands its plan into one per run and hands each to its node as JSON, `create_run`
makes the run from one, and the run's row keeps it (`Run.config`, a JSON column read and
written as a `RunConfig`). A new knob is a field here (on `RunKnobs` when every run of a
fleet shares it: fleet plans then take it too), the code that uses it, and a flag of
`a2rl run`/`create` if users set it there.

Some fields are also columns of the run's row (`ROW_FIELDS`: the task, agent, protocol,
profile, fleet membership, ...), because SQL filters and sorts on them. The row's columns are
what a stored config says for those fields: written from the config when the run is made, and
laid over it when the row is read (`Run`'s mapper events), so a row written before the config
held them (older stores, older archives) reads as a whole config too.

`setup` is not a knob: it is what `create_run` settled from the settings, the task and the
machine when it made the run (the container, the workspace volume, the read-only inputs, the
baseline evaluations), recorded so that every later process builds the same run.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from a2rl.sections import GradingSettings

from .status import GradingClock, Profile, Protocol, RunKind

#: `$A2RL_SEED` of a run made without `--seed`
DEFAULT_JOB_SEED = 0


class RunConfigError(ValueError):
    """A configuration that cannot make a run, said in one line naming the field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RunSetup(BaseModel):
    """What `create_run` settled when it made the run: not asked for, so never given."""

    #: split -> id of the baseline evaluation the run pairs its scores with ({}: made before
    #: runs recorded it; `store.queries.match_baseline` finds it by score then)
    baseline_evaluations: dict[str, int | None] = Field(default_factory=dict)
    #: the local backend may run without bubblewrap (a toy task, or `sandbox.local.unsafe`)
    allow_unisolated: bool = False
    #: the workspace is a volume of its own (`sandbox.volume`), remounted when needed
    disk_volume: bool = False
    #: the workspace inputs the task declared read-only; None for a run made before runs
    #: recorded them (`a2rl.layout.LEGACY_READONLY_INPUTS` applies)
    readonly_paths: list[str] | None = None
    #: the sandbox backend's own options fixed when the run was made (a container's image
    #: and limits: `sandbox.registry.run_options`; {} for a backend that reads the
    #: settings at every start). Stored as `container` before backends were siblings.
    sandbox: dict[str, Any] = Field(default_factory=dict,
                                    validation_alias=AliasChoices("sandbox", "container"))

    model_config = ConfigDict(extra="forbid")


class JudgeIdentity(BaseModel):
    """The judge a judged task's scores come from: its endpoint (without credentials) and
    model. Its key stays where the grading process finds it (`judge.api_key_env`)."""

    base_url: str
    model: str

    model_config = ConfigDict(extra="forbid")


#: The fields of an `EvaluationConfig` stored before it held the grading section, and the
#: section's keys they were
_FLAT_GRADING = {"engine": "engine", "max_new_tokens_cap": "max_new_tokens",
                 "check_memory_gib": "checkpoint_check_memory_gib",
                 "check_timeout_s": "checkpoint_check_timeout_s"}


class EvaluationConfig(BaseModel):
    """Everything that decides a run's scores besides the checkpoint, frozen when the run is
    made (`a2rl.grading.frozen.freeze`): every evaluation of the run, on any process or node,
    uses exactly this, and a process that cannot (the engine missing, the judge unreachable,
    another grader version) refuses with one line rather than grade under other settings.
    `a2rl regrade` re-scores under it with today's grader code (or a second reading under
    another profile). Runs made before it existed read it from their first evaluation's
    provenance (`source` "provenance").

    The grading settings are the `[grading]` section itself (`grading`), recorded whole, not
    copied field by field: a grading setting added later is frozen with the run the day it
    exists, under the name users set it by."""

    task_id: str
    task_version: str
    prompt_version: str
    profile: str = "a2rl"
    #: the task's options as resolved when the run was made
    task_options: dict[str, Any] = Field(default_factory=dict)
    grader_version: str
    #: the `[grading]` section as it was when the run was made, its engine's "auto" resolved
    #: on that machine (`transformers`, `static`, `vllm`): the engine, the generation cap, the
    #: checkpoint check's limits and the run's grading limits. A record from before it held
    #: the section holds only the engine, the cap and the check's limits (`grading_over`).
    grading: GradingSettings
    #: the name and version the engine reported
    engine_name: str = ""
    engine_version: str = ""
    #: the generation settings every evaluation uses (the task's, capped by
    #: `grading.max_new_tokens`)
    generation: dict[str, Any] = Field(default_factory=dict)
    #: judged tasks: the judge; None where no judge decides a score
    judge: JudgeIdentity | None = None
    #: what tells this home's hidden splits from another's (a secret seed's digest), where
    #: the task draws them from one
    hidden_splits: str | None = None
    #: "frozen": recorded when the run was made; "provenance": read back from the first
    #: evaluation of a run made before runs froze it
    source: str = "frozen"

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """A record stored before it held the grading section (`engine`, `max_new_tokens_cap`,
        `check_memory_gib`, `check_timeout_s` beside the rest): those are the section's."""
        if not isinstance(data, dict) or "grading" in data:
            return data
        data = dict(data)
        grading = {key: data.pop(old) for old, key in _FLAT_GRADING.items() if old in data}
        return {**data, "grading": grading}

    @field_serializer("grading")
    def _recorded_keys(self, grading: GradingSettings, info: SerializationInfo
                       ) -> dict[str, Any]:
        """The keys the record holds, and only those: stored and read back, a record from
        before it held the section whole still says which keys are the run's."""
        return grading.model_dump(mode=info.mode, exclude_unset=True)

    @property
    def engine(self) -> str:
        """The engine kind the grader loads."""
        return self.grading.engine

    def grading_over(self, current: GradingSettings) -> GradingSettings:
        """The run's grading settings: the recorded section, and `current`'s (a process's own)
        only for a key the record does not hold (one from before records held the section
        whole, or read from provenance)."""
        recorded = self.grading.model_dump(include=set(self.grading.model_fields_set))
        return GradingSettings.model_validate({**current.model_dump(), **recorded})

    def identity(self) -> dict[str, Any]:
        """What two evaluations must share to be paired: the engine, the generation settings
        and the grader's version (and the task's)."""
        return {"engine": self.engine_name or self.engine, "engine_version": self.engine_version,
                "generation": self.generation, "grader_version": self.grader_version,
                "task_version": self.task_version, "prompt_version": self.prompt_version}


#: Keys of a run's config as stored before `RunConfig` (one flat dict) that are `setup`'s now.
_LEGACY_SETUP_KEYS = ("baseline_evaluations", "allow_unisolated", "disk_volume",
                      "readonly_paths", "container")
#: Knobs a legacy config kept only inside its `container` settings.
_LEGACY_CONTAINER_KNOBS = ("gpus", "share_gpus", "keep_container")


class RunKnobs(BaseModel):
    """The knobs every run of a fleet shares (`a2rl.fleet.FleetPlan` takes these too): what
    the run is held to, apart from which task and agent it is."""

    budget: str | None = Field(None, description="e.g. 30m, 2h; default: the task's")
    backend: str | None = Field(None, description="sandbox backend; default: the setting")
    protocol: Protocol = Field(Protocol.heldout, description=(
        "heldout: dev scores during the run, test at the end; paper: test every time"))
    profile: Profile = Field(Profile.a2rl, description=(
        "evaluation profile: a2rl (ours) or paper (the reference harness's)"))
    grading_clock: GradingClock = Field(GradingClock.counted, description=(
        "counted: grading time uses the budget; paused: the deadline moves by it"))
    max_submissions: int | None = Field(None, ge=1, description="default: unlimited")
    seed: int | None = None
    unsafe_local: bool | None = Field(None, description=(
        "allow the local backend without bubblewrap for any task; default: the setting"))
    network: bool = Field(False, description="the sandbox reaches the internet (bridge)")
    keep_container: bool = Field(False, description="keep the run's container when it ends")

    model_config = ConfigDict(extra="forbid")

    @field_validator("budget")
    @classmethod
    def _a_duration(cls, budget: str | None) -> str | None:
        if budget is not None:
            from a2rl.settings import parse_duration

            parse_duration(budget)  # a ValueError that says what a duration looks like
        return budget

    @field_validator("protocol", "profile", "grading_clock", mode="before")
    @classmethod
    def _one_of(cls, value: Any, info: Any) -> Any:
        """A word of the field's enum, or one line listing them."""
        choices = tuple(cls.model_fields[info.field_name].annotation)  # type: ignore[arg-type]
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {value!r}")
        return value


class RunConfig(RunKnobs):
    """Everything a run is made with. Defaults are what `a2rl create` does with no flag."""

    #: the task (see a2rl tasks); None: the default task (`tasks.registry.DEFAULT_TASK`),
    #: chosen where the run is made (`with_task`), since the store sits below the tasks.
    #: A stored run always has one (its row's column).
    task_id: str | None = None
    #: the agent system driving the run (`a2rl run`); None: a run made for an agent the user
    #: starts (`a2rl create`)
    agent: str | None = None
    driver_model: str | None = Field(None, description="the agent's model (--model)")
    #: spending limits on the driver model (`a2rl run --max-cost/--max-tokens`): the agent is
    #: stopped once its usage passes one (`a2rl.store.ledger.SpendLimit`); None: no limit
    max_cost: float | None = Field(None, gt=0, description="USD of driver model cost")
    max_tokens: int | None = Field(None, gt=0, description="driver tokens, input and output")
    #: KEY=VALUE for the agent's connector (endpoints, keys). They may hold an API key, so
    #: no dump shows them (`exclude`): not the store, an archive or `--json`; only a fleet's
    #: node gets them (`node_json`). A run read back from the store has none.
    agent_options: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    #: -T key=value (`a2rl.tasks.options`), resolved by `create_run`; or, with
    #: `task_options_resolved`, every option as already resolved (`a2rl create/run` resolve
    #: them once, before their checks). The run records them resolved.
    task_options: dict[str, Any] = Field(default_factory=dict)
    task_options_resolved: bool = False
    gpus: list[str] = Field(default_factory=list, description="GPU ids for a container")
    share_gpus: bool = False  # allow a GPU another running sandbox holds
    #: membership of an `a2rl fleet`: the fleet, the repeat index (with task, agent and
    #: driver model, the resume key) and the node that runs it
    fleet_id: str | None = None
    fleet_repeat: int | None = Field(None, ge=0)
    fleet_node: str | None = None
    #: what makes the run: an agent, or `a2rl replay` re-running the recipe of run
    #: `replay_of` without its agent
    kind: RunKind = RunKind.agent
    replay_of: str | None = None
    #: filled by `create_run` (what a caller gives is replaced)
    setup: RunSetup = Field(default_factory=RunSetup)
    #: the run's frozen evaluation config, made by `create_run` (what a caller gives is
    #: replaced); None for a run made before runs froze it (`a2rl.grading.frozen.run_config`
    #: reads it from the run's first evaluation then)
    evaluation: EvaluationConfig | None = None

    @field_validator("gpus")
    @classmethod
    def _device_numbers(cls, gpus: list[str]) -> list[str]:
        ids = [g.strip() for g in gpus if g.strip()]
        if any(not g.isdigit() for g in ids):
            raise ValueError(f"takes device numbers such as 0 or 0,1, not {','.join(gpus)!r}")
        return ids

    @model_validator(mode="before")
    @classmethod
    def _from_legacy(cls, data: Any) -> Any:
        """A config stored before this type (one flat dict of the sandbox's settings, read
        from an older store or archive): its settled parts moved under `setup`."""
        if not isinstance(data, dict) or "setup" in data \
                or not any(k in data for k in _LEGACY_SETUP_KEYS):
            return data
        data = dict(data)
        setup = {k: data.pop(k) for k in _LEGACY_SETUP_KEYS if k in data}
        container = setup.pop("container", None) or {}
        for knob in _LEGACY_CONTAINER_KNOBS:
            if knob in container:
                data.setdefault(knob, container[knob])
        if setup.get("readonly_paths") is None:
            setup.pop("readonly_paths", None)
        setup["sandbox"] = container
        setup["baseline_evaluations"] = setup.get("baseline_evaluations") or {}
        return {**data, "setup": setup}

    def grading_settings(self, current: GradingSettings) -> GradingSettings:
        """The grading settings the run is held to: its frozen section (`current` only where
        that does not say: a run made before runs froze it)."""
        return current if self.evaluation is None else self.evaluation.grading_over(current)

    @property
    def feedback_split(self) -> str:
        """The split the agent's submissions are scored on while it works, and its best one
        chosen by: test under the paper protocol, else dev."""
        return "test" if self.protocol == Protocol.paper else "dev"

    def job_seed(self) -> int:
        """The seed every job of the run finds in `$A2RL_SEED`: the run's `seed`, 0 when it
        has none (the same for every run: a run's recipe is deterministic where its training
        is). `a2rl replay` gives each replica another."""
        return self.seed if self.seed is not None else DEFAULT_JOB_SEED

    def row_values(self) -> dict[str, Any]:
        """The fields the run's row keeps in columns of their own (`ROW_FIELDS`)."""
        return {name: getattr(self, name) for name in ROW_FIELDS}

    def stored(self) -> dict[str, Any]:
        """The JSON the run's row keeps: everything but the agent's options."""
        return self.model_dump(mode="json")

    def with_task(self, default: str) -> RunConfig:
        """This config with `default` as its task when it names none."""
        return self if self.task_id else self.model_copy(update={"task_id": default})

    def node_json(self) -> str:
        """The whole config as JSON, the agent's options included: what a fleet hands the
        node that makes the run (`RunConfig.parse` reads it back)."""
        return json.dumps({**self.model_dump(mode="json"), "agent_options": self.agent_options})

    @classmethod
    def build(cls, **fields: Any) -> RunConfig:
        """`RunConfig(**fields)`, or a `RunConfigError` in one line naming the field."""
        return cls.parse(fields)

    @classmethod
    def parse(cls, data: Any) -> RunConfig:
        """A config from a dict or a JSON text (what a fleet node receives), or a
        `RunConfigError` in one line naming the field."""
        try:
            if isinstance(data, str | bytes):
                return cls.model_validate_json(data)
            return cls.model_validate(data)
        except ValidationError as exc:
            raise one_line(exc) from None

    @classmethod
    def from_stored(cls, data: dict[str, Any] | None) -> RunConfig:
        """A config as a run's row keeps it, of any age: a legacy flat dict loads, and a key
        this version does not know (a newer a2rl's) is left out rather than refusing the
        run."""
        data = cls._from_legacy(dict(data or {}))
        known = {k: v for k, v in data.items() if k in cls.model_fields}
        return cls.parse(known)


#: The fields of a `RunConfig` that are also columns of the run's row (same names).
ROW_FIELDS = ("task_id", "backend", "protocol", "profile", "grading_clock", "max_submissions",
              "seed", "agent", "driver_model", "fleet_id", "fleet_repeat", "fleet_node", "kind",
              "replay_of")


def one_line(exc: ValidationError) -> RunConfigError:
    """A validation error as one line: `profile: must be one of a2rl, paper, not 'x'`;
    several joined by `; `. The first field named is the error's `field`."""
    parts, first = [], None
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        first = first or (str(error["loc"][0]) if error["loc"] else None)
        cause = (error.get("ctx") or {}).get("error")
        text = str(cause) if isinstance(cause, ValueError) else error["msg"]
        if error["type"] == "extra_forbidden":
            text = "is not a setting of a run"
        parts.append(f"{where}: {text}" if where else text)
    return RunConfigError("; ".join(parts), first)
