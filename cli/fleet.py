"""`a2rl fleet`: a plan (tasks x agents x models x repeats) run on a Ray cluster into one
store, each task's options checked before Ray starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from a2rl.cli import context
from a2rl.cli.errors import fail
from a2rl.cli.options import (
    BACKENDS,
    PROFILES,
    JsonFlag,
    choices,
    given_task_options,
    key_values,
)
from a2rl.cli.output import echo, print_json
from a2rl.cli.preflight import check_run
from a2rl.settings import Settings
from a2rl.store.run_config import one_line
from a2rl.tasks import OptionsError, parse_assignments


def fleet(
    plan_file: Annotated[str | None, typer.Option(
        "--plan", help="a TOML plan (see the README); flags given override it")] = None,
    name: Annotated[str | None, typer.Option(
        help="the fleet's name; running it again resumes it")] = None,
    task: Annotated[list[str] | None, typer.Option(help="a task id (repeatable)")] = None,
    agent: Annotated[list[str] | None, typer.Option(
        help="NAME or NAME:MODEL (repeatable)")] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="runs per task, agent and model")
                       ] = None,
    budget: Annotated[str | None, typer.Option(help="per run, e.g. 2h")] = None,
    gpus_per_run: Annotated[float | None, typer.Option(help="GPUs each run asks Ray for")
                            ] = None,
    resource: Annotated[str | None, typer.Option(
        help="a custom Ray resource each run takes one unit of (nodes without GPUs)")] = None,
    backend: Annotated[choices(*BACKENDS) | None, typer.Option(
        help="sandbox backend on every node")] = None,
    seed: Annotated[int | None, typer.Option(help="repeat i runs with seed + i")] = None,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="evaluation profile: a2rl (ours) or paper (docs/paper-fidelity.md)")] = None,
    agent_option: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE passed to every agent's connector")] = None,
    task_option: Annotated[list[str] | None, typer.Option(
        "-T", "--task-option", metavar="[TASK.]KEY=VALUE",
        help="a task option for every task of the plan, or for TASK only (repeatable)")] = None,
    address: Annotated[str | None, typer.Option(
        help="auto, ray://HOST:10001 or HOST:6379; default: a local Ray instance")] = None,
    slots: Annotated[int, typer.Option(
        help="units of --resource a local Ray instance offers")] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Run a plan (tasks x agents x models x repeats) on a Ray cluster, into one store."""
    # a2rl.fleet imports the server (its run clock) and with it the MCP SDK: ~0.4 s of
    # every command's start-up
    from a2rl.fleet import FleetRunner, load_plan, plan_from_flags

    options = key_values(agent_option, "--agent-option")
    fields = {"budget": budget, "gpus_per_run": gpus_per_run, "resource": resource,
              "backend": backend, "seed": seed, "profile": profile}
    try:
        if plan_file:
            plan = load_plan(Path(plan_file), name=name, repeats=repeats, tasks=task, **fields)
        else:
            if not (name and task and agent):
                fail("give --plan FILE, or --name, --task and --agent")
            plan = plan_from_flags(name or "", task or [], agent or [], repeats or 1, options,
                                   **fields)
    except ValidationError as exc:
        fail(f"bad plan{f' {plan_file}' if plan_file else ''}: {one_line(exc)}")
    except OSError as exc:
        fail(f"--plan {plan_file}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"bad plan{f' {plan_file}' if plan_file else ''}: {exc}")
    if options and plan_file:
        for a in plan.agents:
            a.options.update(options)
    settings = context.settings()
    plan.task_options = _fleet_task_options(plan.tasks, plan.task_options, task_option,
                                            settings, plan.profile)
    # what `a2rl run` checks before a run, once per task, agent and model, before Ray starts;
    # on a remote cluster only the agents' options (the nodes check the rest, the same way)
    checked: set[tuple[str, str | None, str | None]] = set()
    for config in plan.runs():
        if (key := (config.task_id, config.agent, config.driver_model)) not in checked:
            checked.add(key)
            check_run(settings, config, on_this_machine=address is None)
    store = context.store(settings)
    if address and store.dialect == "sqlite":
        echo("a2rl: warning: the store is a SQLite file, which nodes on other machines "
             "cannot reach; set A2RL_DB_URL to a PostgreSQL URL", err=True)
    runner = FleetRunner(plan, store, settings.database_url, say=context.progress(),
                         address=address,
                         local_resources={plan.resource: slots} if plan.resource else None)
    try:
        result = runner.run()
    except RuntimeError as exc:
        fail(str(exc))
    from a2rl.analysis.compare import tally, tally_line  # a2rl.analysis: ~70 ms of start-up

    counted = tally(store, result.fleet)  # the fleet's runs as compare counts them
    if as_json:
        print_json({**result.model_dump(), "counts": result.counts,
                    "results": counted.model_dump()})
    else:
        for r in result.runs:  # !: the audit flagged it; its end kind ("agent crashed")
            end = (counted.end_kinds.get(r.run_id or "") or "").replace("_", " ")
            mark = "!" if r.run_id in counted.flagged else ""
            echo(f"{r.label:40} {r.state:12} {(r.run_id or '-') + mark:15} {end:16} "
                 f"{r.host or ''}")
        echo(f"fleet {result.fleet}: {result.planned} planned, {result.already_done} "
             f"already finished; this time {result.counts or 'nothing to run'}")
        echo(f"in the store: {tally_line(counted)}")
        echo(f"compare them: a2rl compare --fleet {result.fleet}")
    if result.stopped or any(r.state == "failed" for r in result.runs):
        raise typer.Exit(1)


def _fleet_task_options(tasks: list[str], planned: dict[str, dict[str, Any]],
                        pairs: list[str] | None, settings: Settings,
                        profile: str) -> dict[str, dict[str, str]]:
    """Each task's options: the plan's `[task_options.<id>]`, then `-T TASK.KEY=VALUE` for
    one task and `-T KEY=VALUE` for all; each checked against its task before Ray starts."""
    try:
        given = parse_assignments(pairs or [])
    except OptionsError as exc:
        fail(str(exc))
    unknown = sorted({k.rpartition(".")[0] for k in given if "." in k} - set(tasks))
    if unknown:
        fail(f"-T {unknown[0]}.KEY=VALUE: {unknown[0]!r} is not a task of this plan")
    out: dict[str, dict[str, str]] = {}
    for task in tasks:
        mine = {k: str(v) for k, v in planned.get(task, {}).items()}
        for key, value in given.items():
            target, dot, name = key.rpartition(".")
            if not dot:
                mine[key] = value
            elif target == task:
                mine[name] = value
        pairs_of_task = [f"{k}={v}" for k, v in mine.items()]
        out[task] = given_task_options(task, pairs_of_task, profile)
    return {task: opts for task, opts in out.items() if opts}
