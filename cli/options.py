"""The options commands share, and what turns their values into the library's.

One type per option a user meets in several commands (help, choices and completion the same
everywhere), and the parsers that refuse a bad value in one line before anything is made.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from a2rl.cli.errors import fail, message
from a2rl.sandbox.registry import BACKENDS as BACKEND_REGISTRY
from a2rl.settings import Settings
from a2rl.store.run_config import RunConfig, RunConfigError
from a2rl.store.status import GradingClock, Profile, Protocol, RunStatus
from a2rl.tasks import OptionsError, get_task, parse_assignments


def choices(*values: str) -> Any:
    """A choice type for an option: help shows `[a|b|c]`, shell completion offers the values
    and anything else is refused with the list. Values known only at run time work the same:
    `Annotated[choices(*names()) | None, typer.Option(help=...)]`."""
    return Literal[values]  # type: ignore[valid-type]


#: the backends' registry's names, an installed package's included (its entry points are read,
#: none of them imported: 4 ms at start)
BACKENDS = tuple(BACKEND_REGISTRY.names())
NETWORKS = ("none", "bridge")
FORMATS = ("md", "html", "json")
# the store's words, its enums the one owner
PROTOCOLS = tuple(p.value for p in Protocol)
PROFILES = tuple(p.value for p in Profile)
RUN_STATUSES = tuple(s.value for s in RunStatus)
GRADING_CLOCKS = tuple(c.value for c in GradingClock)
LOG_LEVELS = ("debug", "info", "warning", "error")

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON document")]
RunIdArg = Annotated[str, typer.Argument(help="a run id")]
TaskFilterOpt = Annotated[str | None, typer.Option(help="only runs of this task")]
AgentFilterOpt = Annotated[str | None, typer.Option(help="only runs of this agent")]
GpusOpt = Annotated[str | None, typer.Option(
    help="GPUs for the run's container, e.g. 0 or 0,1 (docker backend)")]
NetworkOpt = Annotated[choices(*NETWORKS), typer.Option(
    help="the sandbox's network: none, or bridge (internet)")]
KeepOpt = Annotated[bool, typer.Option(help="keep the run's container when it ends")]
BackendOpt = Annotated[choices(*BACKENDS) | None, typer.Option(
    help="sandbox backend; default: the sandbox.backend setting")]
ProtocolOpt = Annotated[choices(*PROTOCOLS), typer.Option(
    help="heldout: dev scores during the run, test at the end; paper: test every time")]
GradingClockOpt = Annotated[choices(*GRADING_CLOCKS), typer.Option(
    help="counted: grading time uses the budget; paused: the deadline moves by it")]
UnsafeLocalOpt = Annotated[bool, typer.Option(
    help="allow the local backend without bubblewrap for any task")]
ProfileOpt = Annotated[choices(*PROFILES), typer.Option(
    help="evaluation profile: a2rl (ours) or paper (the reference harness's; "
    "docs/paper-fidelity.md)")]
MaxSubmissionsOpt = Annotated[int | None, typer.Option(min=1, help="default: unlimited")]
TaskOptionOpt = Annotated[list[str] | None, typer.Option(
    "-T", "--task-option", metavar="KEY=VALUE",
    help="a task option (repeatable; see a2rl tasks <id>), over \\[tasks.<id>] in config.toml")]


def gpu_ids(gpus: str | None) -> list[str]:
    """--gpus 0,1 as the run config's list (which checks that each is a device number)."""
    return [g.strip() for g in (gpus or "").split(",") if g.strip()]


def check_task(task: str) -> None:
    """Refuse an unknown task before anything is created or printed."""
    try:
        get_task(task)
    except KeyError as exc:
        fail(message(exc))


#: RunConfig fields whose flag is not `--` and the field's name with dashes
FLAG_OF_FIELD = {"task_id": "--task", "driver_model": "--model", "task_options": "-T",
                 "agent_options": "--agent-option"}


def run_config(**fields: Any) -> RunConfig:
    """The run's `RunConfig` from a command's flags, built once; a bad value is one line
    naming its flag (`--budget: bad duration 'soon': ...`)."""
    try:
        return RunConfig.build(**fields)
    except RunConfigError as exc:
        if exc.field is None:
            fail(str(exc))
        flag = FLAG_OF_FIELD.get(exc.field, "--" + exc.field.replace("_", "-"))
        fail(f"{flag}{str(exc).removeprefix(exc.field)}")


def task_options(task: str, pairs: list[str] | None, settings: Settings,
                 profile: str = "a2rl") -> dict[str, Any]:
    """`task`'s options as a run made now records them, resolved here once (defaults,
    deprecated settings, `[tasks.<id>]`, then `-T key=value`): the run's checks and
    `create_run` take them as they are (`RunConfig.task_options_resolved`). A bad key or value
    is one line naming the task, the key and what is allowed, before anything is made."""
    try:
        given = parse_assignments(pairs or [])
        return get_task(task, profile).with_options(given).resolved(settings).options_record()
    except OptionsError as exc:
        fail(str(exc))
    except (KeyError, ValueError) as exc:
        fail(message(exc))


def given_task_options(task: str, pairs: list[str] | None, profile: str = "a2rl"
                       ) -> dict[str, str]:
    """`-T key=value` pairs for `task`, their keys and values checked against its options now
    (no setting read: the process that makes the run resolves them, e.g. a fleet's node)."""
    try:
        given = parse_assignments(pairs or [])
        task_obj = get_task(task, profile)
        task_obj.options_model.validated(task_obj.spec.id, given)
    except OptionsError as exc:
        fail(str(exc))
    except (KeyError, ValueError) as exc:
        fail(message(exc))
    return given


def key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """Repeated `flag KEY=VALUE` options as a dict (`a2rl.tasks.parse_assignments`, the one
    parser); a malformed one fails the command with a one-line message naming `flag`."""
    try:
        return parse_assignments(items or [], flag)
    except OptionsError as exc:
        fail(str(exc))
