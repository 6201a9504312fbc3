"""What a command anywhere in a2rl raises to fail with one line: `CommandError`.

The command line's error policy (`a2rl.cli.errors`) prints it as `a2rl: MESSAGE` and exits
with its code, never a traceback. It lives in the root package so that commands a task
declares (`tasks.registry.TASK_COMMANDS`) can fail the same way without importing the CLI,
which sits above every task.
"""

from __future__ import annotations


class CommandError(Exception):
    """A command's failure as the user should read it: one line, and the exit `code`
    (2: what the user got wrong; 1: what failed while doing it)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
