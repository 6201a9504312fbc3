"""`toolcall` rows: every tool call of a run, numbered in its run, opened and then completed.

A call's row is opened when it starts (so that the revisions and jobs it causes can name it)
and completed when it ends; a refusal is opened already over. A counted row (`a2rl.server.
counted_rows`: refusals of a flood, sessions opened) is made once and rewritten in place. No
call lands in the record of a run that has ended (`open_only`: `RecordClosed`, read under
the run's lock, with the number). What a row holds (arguments cut to their bounds, summaries)
is decided by the server's recording (`a2rl.server.recording`); here are the writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func
from sqlmodel import select

from ..db import Store
from ..models import Run, ToolCall


class RecordClosed(Exception):
    """The run has ended: its record takes no more calls (`reason`: why it ended)."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} has ended ({reason})")
        self.run_id, self.reason = run_id, reason


def open_call(store: Store, run_id: str, tool: str, arguments: dict[str, Any],
              transport: str | None, *, arguments_blob: str | None = None,
              error: str | None = None, open_only: bool = False) -> int:
    """The call's row, numbered in its run (the run's row locked, so that concurrent calls
    of one run number apart); with `error`, a call already over (a refusal: its summary and
    error both `error`). `open_only`: `RecordClosed` when the run has ended."""
    with store.session() as s:
        run = s.exec(select(Run.ended_at, Run.end_reason, Run.status).where(
            Run.id == run_id).with_for_update()).first()
        if open_only and run is not None and run[0] is not None:
            raise RecordClosed(run_id, str(run[1] or run[2]))
        last = s.exec(select(func.max(ToolCall.seq)).where(ToolCall.run_id == run_id)).one()
        row = ToolCall(run_id=run_id, tool=tool, arguments=arguments, transport=transport,
                       seq=(last or 0) + 1, arguments_blob=arguments_blob)
        if error is not None:
            row.result_summary = row.error = error
            row.is_error = True
        s.add(row)
        s.flush()
        assert row.id is not None
        return row.id


def close_call(store: Store, call_id: int, duration_ms: float, summary: str,
               error: str | None) -> None:
    """The call ended after `duration_ms`: its summary, and its error when it failed."""
    with store.session() as s:
        row = s.get(ToolCall, call_id)
        if row is None:
            raise KeyError(f"no tool call {call_id}")
        row.duration_ms = duration_ms
        row.result_summary = summary
        row.is_error = error is not None
        row.error = error
        s.add(row)


def write_counted(store: Store, row_id: int | None, run_id: str, tool: str, transport: str,
                  *, arguments: dict[str, Any], summary: str, is_error: bool,
                  open_only: bool) -> int | None:
    """A counted row's counts (`arguments`) and summary, the row made when `row_id` is None
    (or gone); its id, or None when `open_only` and the run has ended (nothing written)."""
    with store.session() as s:
        if open_only and s.exec(select(Run.ended_at).where(
                Run.id == run_id)).first() is not None:
            return None
        row = s.get(ToolCall, row_id) if row_id is not None else None
        if row is None:
            row = ToolCall(run_id=run_id, tool=tool, transport=transport)
        row.arguments, row.result_summary = arguments, summary
        row.is_error, row.error = is_error, summary if is_error else None
        s.add(row)
        s.flush()
        return row.id


def number_older(conn: Connection) -> None:
    """Each older tool call's number within its run (`ToolCall.seq`), in the order of its id
    (the order calls were recorded in): schema v6's migration, and an archive from before it.
    A correlated count, which SQLite and PostgreSQL both run."""
    conn.exec_driver_sql(
        "UPDATE toolcall SET seq = (SELECT COUNT(*) FROM toolcall AS earlier "
        "WHERE earlier.run_id = toolcall.run_id AND earlier.id <= toolcall.id) "
        "WHERE seq IS NULL")
