"""Transports: stdio for one run, streamable HTTP at /mcp for every run (token per run).

Both put the JSON-RPC guard (jsonrpc_guard.py) in front of the SDK: a message the SDK would
drop gets its JSON-RPC error here, and the refusal is recorded for the run it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
from mcp.server.stdio import stdio_server
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.tools.sandbox.registry import clean_up

from .app import A2RLServer, build_server
from .auth import RunTokenVerifier, TokenRun, ended_message
from .jsonrpc_guard import HEAD_SLACK, INVALID_REQUEST, Oversize, Refusal, inspect
from .recording import record_refusal
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
    return 2 * settings.max_tool_args_bytes + 65_536


def oversize(settings: Settings) -> Oversize:
    """The keeper of a message past the limit: enough of its head to store each argument up
    to `tool_arg_keep_bytes`, as any call's are."""
    return Oversize(min(settings.tool_arg_keep_bytes + HEAD_SLACK, max_message_bytes(settings)))


async def guard(raw: bytes) -> Refusal | None:
    if len(raw) <= _INLINE_BYTES:
        return inspect(raw)
    return await anyio.to_thread.run_sync(inspect, raw)


async def refuse(server: A2RLServer, run_id: str, refusal: Refusal) -> None:
    await anyio.to_thread.run_sync(record_refusal, server.store, run_id, refusal,
                                   server.transport, server.a2rl_settings.tool_arg_keep_bytes)


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


# -- streamable HTTP -------------------------------------------------------------------------

class JsonRpcGuardMiddleware:
    """ASGI middleware in front of the SDK's /mcp endpoint.

    Only a POST with a valid run token is inspected: without one the SDK answers 401 as
    before and no run is touched. The token of a run that has ended gets HTTP 403 and a
    JSON-RPC error naming the run, and nothing is recorded. A refused body is answered with
    HTTP 400 and the JSON-RPC error, and recorded for the token's run; any other body is
    replayed to the SDK untouched.
    """

    def __init__(self, app: Any, server: A2RLServer, path: str = "/mcp") -> None:
        self.app, self.server, self.path = app, server, path
        self.limit = max_message_bytes(server.a2rl_settings)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or scope.get("path", "").rstrip("/") != self.path):
            await self.app(scope, receive, send)
            return
        found = await self._run_of(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        body, over = await self._read(receive)
        if found.ended is not None:
            # Refused before any tool or record sees it: the run's record is closed, and a
            # row appended now would change its report. Nothing is recorded.
            rid = over.refusal(self.limit).id if over is not None else _request_id(body)
            await _answer(send, 403, Refusal(INVALID_REQUEST, ended_message(
                found.run_id, found.ended), rid).response_bytes())
            return
        refusal = over.refusal(self.limit) if over is not None else await guard(body)
        if refusal is None:
            await self.app(scope, _replay(body, receive), send)
            return
        await refuse(self.server, found.run_id, refusal)
        await _answer(send, 400, refusal.response_bytes())

    async def _run_of(self, scope: Any) -> TokenRun | None:
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        verifier = self.server._token_verifier
        if not isinstance(verifier, RunTokenVerifier):
            return None
        return await anyio.to_thread.run_sync(verifier.lookup, token.strip())

    async def _read(self, receive: Any) -> tuple[bytes, Oversize | None]:
        """The body; or, once it passes the limit, what `Oversize` keeps of it (the rest is
        drained, not kept)."""
        chunks: list[bytes] = []
        size, more, over = 0, True, None
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if over is not None:
                over.feed(chunk)
            elif size <= self.limit:
                chunks.append(chunk)
            else:
                over = oversize(self.server.a2rl_settings)
                for kept in (*chunks, chunk):
                    over.feed(kept)
                chunks = []
            more = message.get("more_body", False)
        return b"".join(chunks), over


async def _answer(send: Any, status: int, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def _request_id(body: bytes) -> str | int | None:
    """The JSON-RPC id of a request, so that the client can match the refusal to it."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    rid = doc.get("id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def http_app(settings: Settings, store: Store,  # type: ignore[no-untyped-def]
             watch_deadlines: bool = False):
    """The Starlette app (for tests and embedding); run `app.router.lifespan` as usual.
    `watch_deadlines` (`a2rl serve --http`): the runs it owns are finalized at their deadline."""
    server = build_server(settings, store, run_id=None, transport="http")
    if watch_deadlines:
        server.registry.deadlines = DeadlineWatch(settings, store)
    server.registry.pump.wake()

    @server.custom_route("/health", methods=["GET"])
    async def health(_request):  # type: ignore[no-untyped-def]
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": True})

    app = server.streamable_http_app(streamable_http_path="/mcp", host=settings.http_host,
                                     max_request_body_size=max_message_bytes(settings))
    app.add_middleware(JsonRpcGuardMiddleware, server=server)
    return app


def serve_http(settings: Settings, store: Store) -> None:
    import uvicorn

    adopt_on_start(store)
    config = uvicorn.Config(http_app(settings, store, watch_deadlines=True),
                            host=settings.http_host,
                            port=settings.http_port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
