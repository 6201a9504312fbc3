"""How commands print: one JSON document for `--json`, text through `printable`, and the
times and scores of tables.

`--json` prints exactly one JSON document on stdout and nothing else there; progress and
warnings go to stderr. JSON is written with every non-ASCII character escaped (`\\u202e`),
so the data stays exact and a terminal shows it without acting on any of it.

Every other line a command prints goes through `echo` or `write`, the CLI's one output seam:
they pass the text through `a2rl.display.printable`, so a control or bidi character the agent
wrote (in a command, a path, a log line, an error) is shown as an escape and moves nothing.
`cell` is for a value inside a line (a table column, a quoted excerpt): one line, whatever
the value holds. Errors go through `a2rl.cli.errors.say_error`, which does the same.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import typer

from a2rl.display import printable


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(with_ids(doc), indent=2, default=str) + "\n")


def echo(text: str = "", *, err: bool = False) -> None:
    """A line of a command's text output (stderr with `err`), its controls shown as escapes."""
    typer.echo(printable(text), err=err)


def write(text: str) -> None:
    """A document of text (a report, a table) on stdout, its controls shown as escapes."""
    sys.stdout.write(printable(text))


def cell(value: object) -> str:
    """A value shown inside a line: controls, tab and newline as escapes."""
    return printable(str(value), one_line=True)


def with_ids(doc: Any) -> Any:
    """Every `--json` document names a run `run_id` and a task `task_id`. Older keys stay one
    release as aliases beside them (`task` here; a run's `id` in `store.queries`, a task's
    `id` in `tasks --json`), since scripts read them; the aliases go in the next release."""
    if isinstance(doc, list):
        return [with_ids(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: with_ids(v) for k, v in doc.items()}
    if isinstance(out.get("task"), str) and "task_id" not in out:
        out = {"task_id": out["task"], **out}
    return out


def utc(iso: str) -> datetime:
    """A stored time (UTC; SQLite gives it back without its zone)."""
    at = datetime.fromisoformat(iso)
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def when(iso: str | None) -> str:
    """'2026-12-02 13:05' (UTC, as the store keeps every time)."""
    return utc(iso).strftime("%Y-%m-%d %H:%M") if iso else "-"


def duration(start: str | None, end: str | None) -> str:
    """'1h 05m', '3m 20s', '45s'; to now for a run still going."""
    if not start:
        return "-"
    b = utc(end) if end else datetime.now(UTC)
    return seconds((b - utc(start)).total_seconds())


def seconds(secs: float) -> str:
    """'8h 00m', '3m 20s', '45s'."""
    whole = max(0, int(secs))
    h, m, s = whole // 3600, whole % 3600 // 60, whole % 60
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
