"""The command line's one error policy.

What a user can get wrong (a bad flag, bad settings, an unusable store, a run that does not
exist) is one `a2rl: ...` line on stderr and exit 2, never a traceback; an interrupt is one
line and the exit a shell reports for its signal; a genuine bug still shows its traceback.
Every command fails through `fail`, and the root group (`A2rlGroup`) catches the rest; every
error line goes through `say_error`, which shows control characters as escapes.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer
from sqlalchemy.exc import DBAPIError
from typer.core import TyperCommand, TyperGroup, TyperOption

from a2rl import interrupt
from a2rl.command import CommandError
from a2rl.display import printable
from a2rl.settings import SettingsError
from a2rl.store import StoreError
from a2rl.store.db import _reason


def say_error(message: str) -> None:
    """The one way an error reaches the terminal: a message often quotes input (a run id, a
    path, a job's error), so its controls are shown as escapes (`a2rl.display`)."""
    typer.echo(f"a2rl: {printable(message)}", err=True)


def fail(message: str, code: int = 2) -> NoReturn:
    say_error(message)
    raise typer.Exit(code)


def no_run(run_id: str) -> NoReturn:
    fail(f"run {run_id!r} does not exist (see a2rl runs)")


def message(exc: BaseException) -> str:
    """An exception's message as written (KeyError's str() adds quotes)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _hide_flag_types(params: list[Any]) -> list[Any]:
    """Help's type column: a flag takes no value, so none is shown (typer shows `<bool>`).
    An option's metavar is what that column prints; an empty one prints nothing."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class A2rlCommand(TyperCommand):
    """Every a2rl command: flags without a type in help (`_hide_flag_types`; the parameters
    as help reads them, --help and the completion options included)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _hide_flag_types(super().get_params(ctx))


class A2rlGroup(TyperGroup):
    """The program (and its groups: `config`, the tasks' own): turns what a user can get wrong
    into one `a2rl: ...` line on stderr with exit code 2, and an interrupt into one line and
    its signal's exit code."""

    def get_params(self, ctx: Any) -> list[Any]:  # as A2rlCommand's
        return _hide_flag_types(super().get_params(ctx))

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        code: Any = 0
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:
            # typer >= 0.29 carries its own copy of click, private (typer._click); of its
            # exceptions only the base, TyperException, is public. A usage error is the kind
            # that carries its command (ctx); "no arguments: the help" is told by its class
            # name, as typer's own rich_utils does.
            if type(exc).__name__ == "NoArgsIsHelpError":  # `a2rl` alone: the help, as shown
                exc.show()  # type: ignore[attr-defined]  # by click
            else:
                usage = hasattr(exc, "ctx")
                ctx = getattr(exc, "ctx", None)
                hint = f" (see {ctx.command_path if ctx else 'a2rl'} -h)" if usage else ""
                say_error(f"{exc.format_message()}{hint}")
            code = exc.exit_code
        except (SettingsError, StoreError) as exc:
            say_error(str(exc))
            code = 2
        except CommandError as exc:  # a command of a task's (or ours) failing in one line
            say_error(str(exc))
            code = exc.code
        except DBAPIError as exc:  # the store broke after it opened (disk full, server gone)
            say_error(f"the store failed: {_reason(exc)}")
            code = 2
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        """Ctrl-C, SIGTERM or SIGHUP (`a2rl.interrupt`) ending a command: one line and the
        exit a shell reports for that signal (130, 143, 129), never a traceback. Caught here,
        before typer turns every interrupt into a silent 130."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            signum = interrupt.cause()
            say_error(f"interrupted ({interrupt.name(signum)})")
            raise typer.Exit(interrupt.exit_code(signum)) from None
