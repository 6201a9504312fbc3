"""Transports: stdio for one run here; streamable HTTP at /mcp for every run (token per run)
in http_transport.py.

Both put the JSON-RPC guard (jsonrpc_guard.py) in front of the SDK: a message the SDK would
drop gets its JSON-RPC error, and the refusal is recorded for the run it came from.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
from mcp.server.stdio import stdio_server
from sqlmodel import select

from a2rl.sandbox.registry import clean_up
from a2rl.settings import Settings
from a2rl.store import Run, Store

from .app import A2RLServer, build_server
from .jsonrpc_guard import HEAD_SLACK, Oversize, Refusal, examine
from .recording import RecordClosed, record_refusal
from .run.owner import DeadlineWatch

# Messages above this size are inspected in a worker thread, off the event loop.
_INLINE_BYTES = 256 * 1024


def adopt_on_start(store: Store) -> None:
    """Each sandbox backend this store's runs used keeps what serves its live runs and removes
    what finalized runs left (a container backend's containers); the backends say how."""
    with store.session() as s:
        runs = s.exec(select(Run.backend, Run.id, Run.ended_at)).all()
    clean_up({(backend, run_id, ended is None) for backend, run_id, ended in runs},
             store.identity)


def max_message_bytes(settings: Settings) -> int:
    """The largest message read: a call at the argument limit, JSON escapes included."""
    return 2 * settings.recording.max_tool_args_bytes + 65_536


def oversize(settings: Settings) -> Oversize:
    """The keeper of a message past the limit: enough of its head to store each argument up
    to `recording.tool_arg_keep_bytes`, as any call's are."""
    return Oversize(min(settings.recording.tool_arg_keep_bytes + HEAD_SLACK,
                        max_message_bytes(settings)))


async def guard(raw: bytes) -> Refusal | None:
    return (await examined(raw))[0]


async def examined(raw: bytes) -> tuple[Refusal | None, Any]:
    """The guard's verdict on `raw` and the parsed message (`jsonrpc_guard.examine`)."""
    if len(raw) <= _INLINE_BYTES:
        return examine(raw)
    return await anyio.to_thread.run_sync(examine, raw)


async def refuse(server: A2RLServer, run_id: str, refusal: Refusal) -> None:
    """Record a refusal: one store write, in the run's own worker threads (a flood of them
    waits behind itself, not in the threads every run's recording shares)."""
    with contextlib.suppress(RecordClosed):  # ended a moment ago: its record is closed
        await anyio.to_thread.run_sync(record_refusal, server.store, run_id, refusal,
                                       server.transport,
                                       server.a2rl_settings.recording.tool_arg_keep_bytes,
                                       limiter=server.limiters(run_id)[0])


# -- stdio ---------------------------------------------------------------------------------

class _WireOut:
    """stdout for the SDK and the guard: one whole line per write, never two interleaved."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.lock = raw, anyio.Lock()

    async def write(self, text: str) -> None:
        async with self.lock:
            await anyio.to_thread.run_sync(self._write, text.encode())

    async def flush(self) -> None:  # every write is flushed whole
        return None

    def _write(self, data: bytes) -> None:
        self.raw.write(data)
        self.raw.flush()


class _GuardedStdin:
    """The lines of stdin that the SDK can take; the others are answered and recorded here."""

    def __init__(self, raw: BinaryIO, out: _WireOut, server: A2RLServer, run_id: str) -> None:
        self.raw, self.out, self.server, self.run_id = raw, out, server, run_id
        self.limit = max_message_bytes(server.a2rl_settings)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self.raw.readline, self.limit + 1)
            if not line:
                return
            if len(line) > self.limit and not line.endswith(b"\n"):
                over = oversize(self.server.a2rl_settings)
                over.feed(line)
                del line  # the rest is read in pieces and never held whole
                await anyio.to_thread.run_sync(self._skip_rest, over)
                refusal: Refusal | None = over.refusal(self.limit)
            elif not line.strip():
                continue
            else:
                refusal = await guard(line)
            if refusal is None:
                yield line.decode()
                continue
            # Recorded before it is answered, as every call is.
            await refuse(self.server, self.run_id, refusal)
            await self.out.write(json.dumps(refusal.response()) + "\n")

    def _skip_rest(self, over: Oversize) -> None:
        while True:
            chunk = self.raw.readline(1 << 20)
            over.feed(chunk.rstrip(b"\n") if chunk.endswith(b"\n") else chunk)
            if not chunk or chunk.endswith(b"\n"):
                return


def _claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """The wire, on private descriptors; fd 0 then reads /dev/null and fd 1 goes to stderr,
    so that nothing a handler or a child prints can tear a frame (as the SDK's own claim)."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb")


async def run_stdio_guarded(server: A2RLServer, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Serve one run over these byte streams, the guard in front of the SDK."""
    assert server.bound_run_id is not None
    out = _WireOut(stdout)
    guarded = _GuardedStdin(stdin, out, server, server.bound_run_id)
    lowlevel = server._lowlevel_server
    async with stdio_server(stdin=guarded, stdout=out) as (read_stream, write_stream):  # type: ignore[arg-type]
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def serve_stdio(settings: Settings, store: Store, run_id: str) -> None:
    adopt_on_start(store)
    server = build_server(settings, store, run_id=run_id, transport="stdio")
    server.registry.deadlines = DeadlineWatch(settings, store)
    server.registry.get(run_id)  # taken (when free) and watched from the start
    server.registry.pump.wake()  # drain what an earlier server left queued
    stdin, stdout = _claim_stdio()
    anyio.run(run_stdio_guarded, server, stdin, stdout)
