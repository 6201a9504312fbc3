"""Commands about the installation rather than a run: the `tasks` and their options, the
`agents` and the settings (`config show`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from a2rl.cli import context
from a2rl.cli.errors import fail, message
from a2rl.cli.options import PROFILES, JsonFlag, TaskOptionOpt, choices, task_options
from a2rl.cli.output import echo, print_json
from a2rl.clients.registry import agent_lines, list_connectors
from a2rl.settings import Settings
from a2rl.tasks import (
    OptionsError,
    TaskDataError,
    check_data,
    data_status,
    get_task,
    list_tasks,
    profile_settings,
    task_load_errors,
)


def tasks(
    task_id: Annotated[str | None, typer.Argument(
        metavar="[TASK]", help="one task: its options (set with -T key=value)")] = None,
    profile: Annotated[choices(*PROFILES) | None, typer.Option(
        help="show the evaluation settings in force under this profile (a2rl or paper)")
    ] = None,
    task_option: TaskOptionOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List the tasks with their levels and the splits this installation's data give; with
    --profile, each task's evaluation settings; with a task id, its data and options (-T:
    as a run with them would have them)."""
    if task_id is not None:
        _print_task_options(task_id, as_json, profile, task_option)
        return
    if task_option:
        fail("-T applies to one task: a2rl tasks TASK -T key=value")

    try:
        found = list_tasks(profile)
    except ValueError as exc:
        fail(str(exc))
    for reason in task_load_errors().values():  # a broken plugin: said once, the rest listed
        echo(f"warning: {reason}", err=True)
    if profile is not None:
        docs = [profile_settings(t, context.settings()) for t in found]
        if as_json:
            print_json([{**d, "task": d["task_id"]} for d in docs])  # "task": the old alias
            return
        for doc in docs:
            echo(f"{doc.pop('task_id')} ({doc.pop('profile')} profile)")
            _print_profile_settings(doc)
        return
    settings = context.settings()
    statuses = {t.spec.id: data_status(t, settings) for t in found}  # offline, no download
    rows = [{"task_id": t.spec.id, "id": t.spec.id, "level": t.spec.level, "title": t.spec.title,
             "default_budget": t.spec.default_budget,
             "splits": {name: info.n_items for name, info in statuses[t.spec.id].splits.items()},
             "data": statuses[t.spec.id].model_dump(exclude={"splits"})}
            for t in found]
    if as_json:
        print_json(rows)
        return
    for r in rows:
        echo(f"{r['task_id']:12} level {r['level']}  {r['title']}  "
                   f"[{statuses[r['task_id']].sizes()}]")
        if (line := _data_line(statuses[r["task_id"]])) is not None:
            echo(f"{'':12} {line}")
    if any(not s.exact for s in statuses.values()):
        echo("~: the full data's sizes; a run states its own (a2rl tasks TASK reads them)")


def _data_line(status: Any) -> str | None:
    """A task's data in one line, unless they are generated or shipped (nothing to say)."""
    if status.state == "not_downloaded":
        return f"not downloaded: {status.fetch}"
    if status.state == "invalid":
        return f"data unusable: {status.note}"
    return f"data: {status.note}" if status.note else None


def _print_profile_settings(doc: dict[str, Any]) -> None:
    """A task's evaluation settings under a profile (`a2rl.tasks.profile_settings`), a line each."""
    for key, value in doc.items():
        if key == "splits":
            value = "; ".join(
                f"{name} {s['n_items']} ({'visible' if s['visible'] else 'hidden'}, "
                f"{s['source']})" for name, s in value.items())
        echo(f"  {key:16} {value}")


def _print_task_options(task_id: str, as_json: bool, profile: str | None = None,
                        pairs: list[str] | None = None) -> None:
    """`a2rl tasks <id>`: the splits its data give, the task's options (name, type, default,
    description) and the values now in force from config.toml, the deprecated settings and
    `-T`; with --profile, first the evaluation settings in force under that profile."""
    try:
        task = get_task(task_id, profile or "a2rl").with_recorded_options(
            task_options(task_id, pairs, context.settings(), profile or "a2rl"))
    except KeyError as exc:
        fail(message(exc))
    evaluation = profile_settings(task, context.settings()) if profile is not None else None
    rows = task.options_model.describe()
    try:
        current = task.options_record(context.settings())
    except OptionsError as exc:
        fail(str(exc))
    for row in rows:
        row["value"] = current.get(row["name"])
    data = _task_data(task, context.settings())
    if as_json:
        print_json({"task_id": task.spec.id, "id": task.spec.id, "title": task.spec.title,
                    "options": rows, "data": data}
                   | ({"evaluation": evaluation} if evaluation is not None else {}))
        return
    echo(f"{task.spec.id}: {task.spec.title} (level {task.spec.level})")
    echo(f"data: {data['line']}")
    for name, split in data["splits"].items():
        seen = "visible" if split["visible"] else "hidden"
        echo(f"  {name:6} {split['n_items']:>6}  {seen:7} {split['source']}")
    if evaluation is not None:
        echo(f"evaluation ({evaluation.pop('profile')} profile):")
        evaluation.pop("task_id")
        _print_profile_settings(evaluation)
    echo("options (-T key=value, or [tasks." + task.spec.id + "] in config.toml):")
    for row in rows:
        default = row["default"] if row["default"] != "" else '""'
        echo(f"  {row['name']:16} {row['type']:6} default {default}")
        note = row["description"]
        if row["deprecated_setting"]:
            note += f" (deprecated setting: {row['deprecated_setting']})"
        echo(f"      {note}")
        if row["value"] != row["default"]:
            echo(f"      now: {row['value']!r}")


def _task_data(task: Any, settings: Settings) -> dict[str, Any]:
    """What a run of `task` would have: the splits its data give, read from them (a local
    copy is read; a hub dataset not yet cached is not downloaded here), or why none."""
    status = data_status(task, settings)
    splits, line = status.splits, status.note or "generated (the same on every machine)"
    if status.state == "not_downloaded":
        line = f"not downloaded: {status.fetch}; the full data's splits:"
    elif status.state == "invalid":
        line = f"unusable: {status.note}"
    else:
        try:
            splits = check_data(task, settings)
        except TaskDataError as exc:
            status.state, line = "invalid", f"unusable: {exc}"
    return {"state": status.state, "line": line, "fetch": status.fetch,
            "splits": {name: info.model_dump() for name, info in splits.items()}}


def agents(as_json: JsonFlag = False) -> None:
    """List the agent systems and whether each is installed."""
    rows = list_connectors()
    if as_json:
        print_json(rows)
        return
    for line in agent_lines(rows):
        echo(line)
