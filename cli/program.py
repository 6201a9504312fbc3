"""The `a2rl` program: its root options, and every command in the order help lists them.

Each command lives in the module of its group (`lifecycle`, `views`, `fleet`, `info`,
`storage`); this is the one place they are named and registered.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

import a2rl
from a2rl import interrupt
from a2rl.cli import config, context, fleet, info, lifecycle, reproduce, storage, views
from a2rl.cli.errors import A2rlCommand, A2rlGroup
from a2rl.cli.options import LOG_LEVELS, choices
from a2rl.cli.output import echo
from a2rl.display import printable
from a2rl.registry import resolve_target
from a2rl.tasks.registry import TASK_COMMANDS

HELP = "a2rl: can LLM agents engineer post-training? An MCP benchmark harness."

app = typer.Typer(
    cls=A2rlGroup, add_completion=True, no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Locals would print the run's token and API keys along with a bug's traceback.
    pretty_exceptions_show_locals=False,
    help=HELP)
config_app = typer.Typer(cls=A2rlGroup, help="Settings.", no_args_is_help=True)

#: (typer app, command name, function): help lists them in this order, groups last
COMMANDS: list[tuple[typer.Typer, str, Callable[..., Any]]] = [
    (app, "create", lifecycle.create),
    (app, "finish", lifecycle.finish),
    (app, "serve", lifecycle.serve),
    (app, "runs", views.runs),
    (app, "show", views.show),
    (app, "audit", views.audit),
    (app, "run", lifecycle.run),
    (app, "agents", info.agents),
    (app, "gc", storage.gc),
    (app, "report", views.report),
    (app, "view", views.view),
    (app, "compare", views.compare),
    (app, "regrade", reproduce.regrade),
    (app, "replay", reproduce.replay),
    (app, "fleet", fleet.fleet),
    (app, "export", storage.export),
    (app, "import", storage.import_),
    (app, "tasks", info.tasks),
    (app, "demo", lifecycle.demo),
    (config_app, "show", config.config_show),
    (config_app, "migrate", config.config_migrate),
]
for _typer, _name, _function in COMMANDS:
    _typer.command(_name, cls=A2rlCommand)(_function)
app.add_typer(config_app, name="config")


def _add_task_commands() -> None:
    """The command groups tasks declare (`tasks.registry.TASK_COMMANDS`), after ours: each
    command takes the program's command class, and the root group's error policy."""
    for group, target in TASK_COMMANDS.items():
        task_app = resolve_target(target)
        assert isinstance(task_app, typer.Typer), target
        for command in task_app.registered_commands:
            command.cls = command.cls or A2rlCommand
        app.add_typer(task_app, name=group, cls=A2rlGroup)


_add_task_commands()


class PrintableFormatter(logging.Formatter):
    """Log lines on the terminal, their controls shown as escapes (`a2rl.display`): a
    library's message may quote what the agent wrote (a path, a command, a request)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def configure_logging(level: str) -> None:
    """One stderr handler for every library, at `level`. Installed before any server is
    built, so that the MCP library's own setup (a handler at INFO) does not apply and its
    per-request lines stay out of the progress lines. Child `a2rl serve` processes inherit
    the level through A2RL_LOG_LEVEL."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name("a2rl")
        handler.setFormatter(PrintableFormatter("a2rl: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    for handler in root.handlers:
        if handler.get_name() == "a2rl":  # loggers with their own level propagate here too
            handler.setLevel(level.upper())
    root.setLevel(level.upper())
    os.environ["A2RL_LOG_LEVEL"] = level


def _version(value: bool) -> None:
    if value:
        echo(f"a2rl {a2rl.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="no progress lines; only warnings and errors")] = False,
    log_level: Annotated[choices(*LOG_LEVELS), typer.Option(
        envvar="A2RL_LOG_LEVEL", help="libraries' log lines shown on stderr (the MCP "
        "server's per-request lines are info)")] = "warning",
) -> None:
    """a2rl: can LLM agents engineer post-training? An MCP benchmark harness."""
    context.set_quiet(quiet)
    configure_logging("error" if quiet else log_level)


def main() -> None:
    # Library progress bars would drown the demo's own progress lines.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    interrupt.install()  # SIGTERM and SIGHUP end a command as Ctrl-C does: cleanly
    app()
