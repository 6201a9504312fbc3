"""Recording: every tool call is a row, written before its result returns.

The row is created when the call starts (so that revisions and jobs it causes can point to
it) and completed when it ends, whether it succeeded, was refused by argument validation,
raised a `ToolError` or was cancelled. A message the JSON-RPC guard refused is a row too
(`record_refusal`). This is the one place that decides what a call's row holds (its rows
are written by `a2rl.store.records.toolcalls`); tools don't record.

What is stored in the row is bounded whatever the agent sends: a string argument longer than
`keep_bytes` is stored cut, and `_truncated` keeps its sha256 and full size (the string stays
a string, so queries such as `arguments->>'command'` still work); result summaries are cut to
`SUMMARY_CHARS`. The sandbox runs the whole argument, though, and the audit must read what
ran (a command padded past the cut hid what followed it, issue 43): so a cut call's whole
arguments are kept as one content-addressed blob, named by `ToolCall.arguments_blob`, while the
run's `whole_run_bytes` last (the store is shared; past it the row says nothing was kept and
the audit reports the cut as unread). The `a*` functions run the store writes in a worker
thread, so that a slow store never holds the event loop (over HTTP, every run's calls share
it).
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import partial
from typing import Any

import anyio
from sqlalchemy import func
from sqlmodel import select

from a2rl.store import Blob, Store, ToolCall
from a2rl.store.records import toolcalls
from a2rl.store.records.toolcalls import RecordClosed as RecordClosed  # raised through here

from .jsonrpc_guard import MESSAGE_KEY, Refusal, scrub

SUMMARY_CHARS = 2_000
MAX_STORED_KEYS = 64
MAX_STORED_DEPTH = 64  # no tool takes nested arguments; deeper ones are noted, not stored
TRUNCATED_KEY = "_truncated"


def start_call(store: Store, run_id: str, tool: str, arguments: dict[str, Any],
               transport: str | None, keep_bytes: int = 65_536,
               cut: dict[str, Any] | None = None, whole_run_bytes: int | None = None,
               error: str | None = None, open_only: bool = False) -> int:
    """The call's row, numbered in its run; with `error`, a call already over (written once,
    not started and ended: a refusal). `whole_run_bytes`: the run's allowance for whole
    arguments of cut calls (0: no limit; None: keep none, for a message read in part).
    `open_only`: `RecordClosed` when the run has ended, read under the same lock as the
    number, so that no call of an agent lands in a record that is closed (an HTTP server
    learns of an end made elsewhere a moment later)."""
    stored = stored_arguments(arguments, keep_bytes)
    whole_sha = None
    if cut is not None:
        # A message read in part: only its whole size and sha256 mean something (a value's
        # own would be those of the piece that was read).
        stored[TRUNCATED_KEY] = {MESSAGE_KEY: cut}
    elif whole_run_bytes is not None and stored.get(TRUNCATED_KEY):
        whole_sha = keep_whole(store, run_id, arguments, whole_run_bytes)
    return toolcalls.open_call(
        store, run_id, tool, stored, transport, arguments_blob=whole_sha,
        error=error[:SUMMARY_CHARS] if error is not None else None, open_only=open_only)


def end_call(store: Store, call_id: int, started: float, summary: str, error: str | None) -> None:
    toolcalls.close_call(store, call_id, round((time.perf_counter() - started) * 1000, 3),
                         summary[:SUMMARY_CHARS],
                         error[:SUMMARY_CHARS] if error is not None else None)


async def astart_call(store: Store, run_id: str, tool: str, arguments: dict[str, Any],
                      transport: str | None, keep_bytes: int,
                      whole_run_bytes: int | None = None) -> int:
    """An agent's call: `RecordClosed` when its run has ended."""
    return await anyio.to_thread.run_sync(partial(
        start_call, store, run_id, tool, arguments, transport, keep_bytes, None,
        whole_run_bytes, open_only=True))


def keep_whole(store: Store, run_id: str, arguments: dict[str, Any],
               run_bytes: int) -> str | None:
    """Store a cut call's whole arguments (JSON) as a blob; its sha256, or None when the run's
    `run_bytes` (0: no limit) would be passed. Counted per call (a repeat costs its size
    again): a bound on what one run may add to the shared store, not an exact tally."""
    try:
        data = json.dumps(arguments, default=repr).encode()
    except (TypeError, ValueError, RecursionError):  # nested past Python's stack: not kept
        return None
    if run_bytes > 0:
        with store.session() as s:
            kept = s.exec(select(func.coalesce(func.sum(Blob.size), 0)).select_from(ToolCall)
                          .join(Blob, Blob.sha256 == ToolCall.arguments_blob)  # type: ignore[arg-type]
                          .where(ToolCall.run_id == run_id)).one()
        if kept + len(data) > run_bytes:
            return None
    return store.put_blob(data)


async def aend_call(store: Store, call_id: int, started: float, summary: str,
                    error: str | None) -> None:
    # Shielded: a cancelled call is still completed in the store.
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(end_call, store, call_id, started, summary, error)


def record_refusal(store: Store, run_id: str, refusal: Refusal, transport: str | None,
                   keep_bytes: int = 65_536) -> int:
    """A message the guard refused, as a failed call of the tool it named (if any): one
    store write (none, `RecordClosed`, when the run has ended)."""
    return start_call(store, run_id, refusal.tool, refusal.arguments, transport, keep_bytes,
                      refusal.cut, error=refusal.message, open_only=True)


def stored_arguments(arguments: dict[str, Any], keep_bytes: int) -> dict[str, Any]:
    """The arguments as stored: JSON-able, surrogate-free, each value at most `keep_bytes`,
    at most `MAX_STORED_KEYS` of them, none nested deeper than `MAX_STORED_DEPTH`."""
    out: dict[str, Any] = {}
    truncated: dict[str, dict[str, Any]] = {}
    for index, (key, value) in enumerate(arguments.items()):
        if index == MAX_STORED_KEYS:  # no tool has this many; the rest are counted only
            truncated["(more arguments)"] = {"count": len(arguments) - index}
            break
        key = scrub(str(key))[:200]
        if isinstance(value, str):
            # A string is encoded once, and scrubbed only when it cannot be: a regular
            # expression and a JSON round trip over a 100 MB argument cost seconds on a
            # loaded machine, before the call's own size check could refuse it.
            try:
                data = value.encode()
            except UnicodeEncodeError:  # a lone surrogate: stored as U+FFFD
                value = scrub(value)
                data = value.encode()
            if len(data) > keep_bytes:
                truncated[key] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                value = data[:keep_bytes].decode(errors="ignore")
            out[key] = value
            continue
        if too_deep(value, MAX_STORED_DEPTH):
            value = f"(not stored: nested deeper than {MAX_STORED_DEPTH} levels)"
        else:
            value = scrub(_jsonable(value))
        if isinstance(value, str):
            data = value.encode()
            if len(data) > keep_bytes:
                truncated[key] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                value = data[:keep_bytes].decode(errors="ignore")
        elif not isinstance(value, (int, float, bool)) and value is not None:
            data = json.dumps(value).encode()
            if len(data) > keep_bytes:
                truncated[key] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                value = data[:keep_bytes].decode(errors="ignore")
        out[key] = value
    if truncated:
        out[TRUNCATED_KEY] = truncated
    return out


def too_deep(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and dicts more than `limit` levels (iteratively: the
    value may be deeper than Python's recursion limit)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


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
    except (TypeError, ValueError, RecursionError):
        return json.loads(json.dumps(value, default=repr))
