"""Recording: every tool call is a row, written before its result returns.

The row is created when the call starts (so that revisions and jobs it causes can point to
it) and completed when it ends, whether it succeeded, was refused by argument validation,
raised a `ToolError` or was cancelled. This is the one place that records; tools don't.
"""

from __future__ import annotations

import json
import time
from typing import Any

from a2rl.store import Store, ToolCall

SUMMARY_CHARS = 2_000


def start_call(store: Store, run_id: str, tool: str, arguments: dict[str, Any],
               transport: str | None) -> int:
    with store.session() as s:
        row = ToolCall(run_id=run_id, tool=tool, arguments=_jsonable(arguments),
                       transport=transport)
        s.add(row)
        s.flush()
        assert row.id is not None
        return row.id


def end_call(store: Store, call_id: int, started: float, summary: str, error: str | None) -> None:
    with store.session() as s:
        row = s.get(ToolCall, call_id)
        assert row is not None
        row.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        row.result_summary = summary[:SUMMARY_CHARS]
        row.is_error = error is not None
        row.error = error
        s.add(row)


def summarize(result: Any) -> tuple[str, str | None]:
    """A short text of a CallToolResult, and its error text when it is one."""
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        text = json.dumps(structured, default=str)
    else:
        parts = getattr(result, "content", None) or []
        text = " ".join(getattr(p, "text", "") for p in parts)
    if getattr(result, "is_error", False):
        return text, text or "error"
    return text, None


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=repr))
