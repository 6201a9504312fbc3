"""Streamable HTTP at /mcp for every run: the token selects the run, the gate keeps runs apart.

`HttpGate` (an ASGI middleware in front of the SDK's endpoint) answers at once, before the SDK
or any store write, whatever a run may not have (http_limits.py): per client address, a cap on
requests in flight; per run, caps on requests in flight and connections, a request rate. Then:

- a request without a valid token goes to the SDK, which answers 401 and touches no run;
- any method with an ended run's token gets 403 and a JSON-RPC error naming the run, and
  nothing is recorded (a closed record gets no more rows); the run's sessions are ended within
  `ENDED_POLL_S` of its end (`watch_ended`), whoever ended it;
- a POST's body must arrive within `server.body_timeout_s` (408 and the connection closed), and
  goes through the JSON-RPC guard: a refused message gets HTTP 400 and its JSON-RPC error and
  is recorded for the run (one store write, in the run's own threads);
- a request whose JSON-RPC id is that of a request of the same session still unanswered gets
  HTTP 400 and a JSON-RPC error: the SDK routes answers by id and would leave one waiting;
- an `initialize` (or the 2026 protocol's `server/discover`, which opens no session) is
  counted in the run's `mcp.initialize` row (the run's first before it is answered) and, when
  the run already holds `server.sessions_per_run` sessions, its least recently used one is
  ended;
- a resumed stream (GET with Last-Event-ID) whose event is no longer kept gets 404, so the
  client stops retrying.

Each session has its own bounded event store (event_store.py: SSE ids, `retry`, replay after
`Last-Event-ID`). The SDK's session manager has no hook for either; `SessionHooks` wraps two of
its methods (`_admit_session`, `_discard_session`: mcp is pinned in constraints.txt, and the
HTTP tests exercise both).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.streamable_http import LAST_EVENT_ID_HEADER, MCP_SESSION_ID_HEADER

from a2rl.settings import Settings
from a2rl.store import Store

from .app import A2RLServer, build_server
from .auth import RunTokenVerifier, TokenRun, ended_message, hash_token
from .http_connections import ConnectionTable, uvicorn_config
from .http_limits import HttpGate as GateState
from .http_limits import HttpLimits, Refused, Session
from .jsonrpc_guard import INVALID_REQUEST, Oversize, Refusal
from .run.owner import DeadlineWatch
from .transports import adopt_on_start, examined, max_message_bytes, oversize, refuse

log = logging.getLogger(__name__)

#: how often the server asks the store which of its runs have ended
ENDED_POLL_S = 1.0
#: what a client sends first, by protocol revision (2025-11-25, 2026-07-28), as counted
OPENINGS = {"initialize": "initialize", "server/discover": "discover"}
_SESSION = MCP_SESSION_ID_HEADER.encode()
_LAST_EVENT = LAST_EVENT_ID_HEADER.encode()


class SessionHooks:
    """The SDK session manager's sessions, as the gate sees them: each opened one gets its
    own event store and is counted to its run; each ended one is forgotten."""

    def __init__(self, manager: Any, gate: GateState) -> None:
        self.manager, self.gate = manager, gate
        admit, discard = manager._admit_session, manager._discard_session

        def admitted(requestor: Any) -> Any:
            transport = admit(requestor)
            if transport is not None and requestor is not None:
                transport._event_store = gate.session_opened(requestor["client_id"],
                                                             transport.mcp_session_id)
            return transport

        async def discarded(session_id: str, transport: Any) -> None:
            try:
                await discard(session_id, transport)
            finally:
                gate.session_closed(session_id)

        manager._admit_session, manager._discard_session = admitted, discarded

    async def end(self, session_id: str) -> None:
        transport = self.manager._server_instances.get(session_id)
        if transport is None:
            self.gate.session_closed(session_id)
            return
        await self.manager._discard_session(session_id, transport)


class HttpGate:
    """ASGI middleware in front of the SDK's /mcp endpoint (see the module's docstring)."""

    def __init__(self, app: Any, server: A2RLServer, state: GateState, hooks: SessionHooks,
                 connections: ConnectionTable | None, path: str = "/mcp") -> None:
        self.app, self.server, self.state, self.path = app, server, state, path
        self.hooks, self.connections = hooks, connections
        self.limit = max_message_bytes(server.a2rl_settings)
        self.verifier = verifier_of(server)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path", "").rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = str(client[0]) if client else ""
        refused = self.state.enter_address(address)
        if refused is not None:
            token = _bearer(dict(scope.get("headers") or []))
            hit, found = self.verifier.cached(hash_token(token)) if token else (False, None)
            if hit and found is not None and found.ended is None:  # counted where it is known
                self.state.refuse(found.run_id, "address")
            await _refused(send, refused, close=scope.get("method") == "POST")
            return
        try:
            await self._serve(scope, receive, send)
        finally:
            self.state.leave_address(address)

    async def _serve(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        token = _bearer(headers)
        found = await self.verifier.alookup(token) if token else None
        if found is None:  # the SDK answers 401
            await self.app(scope, receive, send)
            return
        if found.ended is not None:
            await self._ended(scope, receive, send, found)
            return
        run_id, method = found.run_id, scope.get("method")
        held = (self.connections.bind(scope.get("client"), run_id)
                if self.connections is not None else 1)
        refused = self.state.enter_run(run_id, held)
        if refused is not None:
            await _refused(send, refused, close=refused.close or method == "POST")
            return
        try:
            session = self._session(headers, run_id)
            if method == "POST":
                await self._post(scope, receive, send, run_id, session,
                                 opens=_SESSION not in headers)
                return
            last = headers.get(_LAST_EVENT, b"").decode("latin-1")
            if method == "GET" and session is not None and last \
                    and not session.events.knows(last):
                await _answer(send, 404, Refusal(INVALID_REQUEST, f"event {last[:40]} is no "
                              "longer kept (server.resume_bytes_per_session): the stream cannot "
                              "be resumed").response_bytes())
                return
            if session is not None:
                session.busy += 1
            try:
                await self.app(scope, receive, send)
            finally:
                if session is not None:
                    session.busy -= 1
        finally:
            self.state.leave_run(run_id)

    def _session(self, headers: dict[bytes, bytes], run_id: str) -> Session | None:
        session_id = headers.get(_SESSION, b"").decode("latin-1")
        session = self.state.sessions.get(session_id) if session_id else None
        if session is None or session.run_id != run_id:
            return None  # unknown, or another run's: the SDK answers 404
        return self.state.session_used(session_id)

    async def _post(self, scope: Any, receive: Any, send: Any, run_id: str,
                    session: Session | None, opens: bool) -> None:
        try:
            read = await self._read(receive)
        except _Gone:  # no whole message, and no one to answer: not a call
            return
        if read is None:
            self.state.refuse(run_id, "body_timeout")
            await _refused(send, Refused(408, "body_timeout", "the request's body did not "
                                         "arrive within "
                                         f"{self.state.limits.body_timeout_s:g} s "
                                         "(server.body_timeout_s)"), close=True)
            return
        body, over = read
        if over is not None:
            refusal, message = over.refusal(self.limit), None
        else:
            refusal, message = await examined(body)
        if refusal is not None:
            await refuse(self.server, run_id, refusal)
            await _answer(send, 400, refusal.response_bytes())
            return
        method, rid = _method_and_id(message)
        if method in OPENINGS:
            await self._opening(run_id, message, OPENINGS[method], opens and
                                method == "initialize", dict(scope.get("headers") or []))
        if session is None or rid is None or method is None:
            opened: list[bytes] = []

            async def noted(event: dict[str, Any]) -> None:  # the session it opens, if any
                if event["type"] == "http.response.start":
                    opened.extend(v for k, v in event.get("headers", []) if k == _SESSION)
                await send(event)

            try:
                await self.app(scope, _replay(body, receive), noted if session is None else send)
            finally:
                for made in opened:
                    self.state.session_answered(made.decode("latin-1"))
            return
        key = str(rid)
        if not session.events.begin(key):
            self.state.refuse(run_id, "duplicate_id")
            await _answer(send, 400, Refusal(INVALID_REQUEST, f"Invalid request: request id "
                          f"{key[:80]} is already in flight in this session; give each request "
                          "a new id", rid).response_bytes())
            return
        dispatched = False
        session.busy += 1

        async def watched(event: dict[str, Any]) -> None:
            nonlocal dispatched
            if event["type"] == "http.response.start" and event["status"] == 200:
                kinds = [v for k, v in event.get("headers", []) if k.lower() == b"content-type"]
                dispatched = bool(kinds) and kinds[0].startswith(b"text/event-stream")
            await send(event)

        try:
            await self.app(scope, _replay(body, receive), watched)
        finally:
            session.busy -= 1
            if not dispatched:  # the SDK refused it: no answer will be stored for it
                session.events.pending.discard(key)

    async def _opening(self, run_id: str, message: Any, kind: str, opens: bool,
                       headers: dict[bytes, bytes]) -> None:
        """A client's opening (`initialize`, or the 2026 protocol's `server/discover`),
        counted with the client's name; one that opens a session may end an older one."""
        params = message.get("params")
        info = params.get("clientInfo") if isinstance(params, dict) else None
        if isinstance(info, dict):
            name = f"{info.get('name', '?')} {info.get('version', '')}"
        else:
            name = headers.get(b"user-agent", b"?").decode("latin-1")
        row, evict = self.state.initialize(run_id, name[:80].strip(), kind, opens)
        for old in evict:
            await self.hooks.end(old.session_id)
        if not row.written:  # the run's first: in the store before it is answered
            await anyio.to_thread.run_sync(row.flush, limiter=self.server.limiters(run_id)[0])

    async def _ended(self, scope: Any, receive: Any, send: Any, found: TokenRun) -> None:
        """Refused before any tool or record sees it: the run's record is closed, and a row
        appended now would change its report. Nothing is recorded."""
        assert found.ended is not None
        rid = None
        if scope.get("method") == "POST":
            try:
                read = await self._read(receive)
            except _Gone:
                return
            if read is not None:
                body, over = read
                rid = over.refusal(self.limit).id if over is not None else _request_id(body)
        await _answer(send, 403, Refusal(INVALID_REQUEST, ended_message(
            found.run_id, found.ended), rid).response_bytes(),
            close=scope.get("method") == "POST" and rid is None)

    async def _read(self, receive: Any) -> tuple[bytes, Oversize | None] | None:
        """The body; or, once it passes the limit, what `Oversize` keeps of it (the rest is
        drained, not kept); None when it did not arrive within `server.body_timeout_s`; `_Gone`
        when the client left before sending it whole."""
        with anyio.move_on_after(self.state.limits.body_timeout_s):
            return await self._read_all(receive)
        return None

    async def _read_all(self, receive: Any) -> tuple[bytes, Oversize | None]:
        chunks: list[bytes] = []
        size, more, over = 0, True, None
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
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


class _Gone(Exception):
    """The client disconnected before its request's body was whole."""


def verifier_of(server: A2RLServer) -> RunTokenVerifier:
    verifier = server._token_verifier
    assert isinstance(verifier, RunTokenVerifier), "an HTTP server checks run tokens"
    return verifier


async def watch_ended(state: GateState, verifier: RunTokenVerifier,
                      hooks: SessionHooks) -> None:
    """End the sessions of runs that have ended, whoever ended them (`a2rl finish`, the
    deadline, another server), and write their counted rows."""
    while True:
        await anyio.sleep(ENDED_POLL_S)
        run_ids = state.run_ids()
        if not run_ids:
            continue
        try:
            ended = await anyio.to_thread.run_sync(verifier.ended_among, run_ids)
            for run_id in ended:
                share = state.run_ended(run_id)
                if share is None:
                    continue
                for session in list(share.sessions.values()):
                    await hooks.end(session.session_id)
                await anyio.to_thread.run_sync(share.refused.flush)
                await anyio.to_thread.run_sync(share.opened.flush)
        except Exception:  # a store briefly away, a session that would not end: next time
            log.warning("could not end the sessions of ended runs", exc_info=True)


def _bearer(headers: dict[bytes, bytes]) -> str | None:
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _method_and_id(message: Any) -> tuple[str | None, str | int | None]:
    """A request's method and id (None, None for a notification or a response)."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None, None
    rid = message.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return message["method"], None
    return message["method"], rid


async def _answer(send: Any, status: int, payload: bytes, close: bool = False,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode()), *(extra or [])]
    if close:  # its body is unread: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _refused(send: Any, refused: Refused, close: bool = False) -> None:
    extra = [(b"retry-after", b"1")] if refused.status == 429 else []
    await _answer(send, refused.status, Refusal(INVALID_REQUEST, f"refused: {refused.message}"
                                                ).response_bytes(), close, extra)


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
    """The Starlette app (for tests and embedding); run `app.router.lifespan` as usual, and
    serve it with `http_config` (its connection bounds). `watch_deadlines` (`a2rl serve
    --http`): the runs it owns are finalized at their deadline."""
    server = build_server(settings, store, run_id=None, transport="http")
    if watch_deadlines:
        server.registry.deadlines = DeadlineWatch(settings, store)
    server.registry.pump.wake()

    @server.custom_route("/health", methods=["GET"])
    async def health(_request):  # type: ignore[no-untyped-def]
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": True})

    limits = HttpLimits.from_settings(settings)
    state = GateState(limits, store)
    connections = ConnectionTable.from_settings(settings)
    # Resumable streams: each session's transport gets its own event store when it is
    # admitted (SessionHooks); the manager's own would be shared by every session.
    app = server.streamable_http_app(
        streamable_http_path="/mcp", host=settings.server.host,
        max_request_body_size=max_message_bytes(settings), event_store=None,
        retry_interval=settings.server.sse_retry_ms, session_idle_timeout=limits.session_idle_s)
    hooks = SessionHooks(server.session_manager, state)
    app.add_middleware(HttpGate, server=server, state=state, hooks=hooks,
                       connections=connections)
    app.state.a2rl_connections = connections
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as value, anyio.create_task_group() as tg:
            tg.start_soon(watch_ended, state, verifier_of(server), hooks)
            try:
                yield value
            finally:
                tg.cancel_scope.cancel()
                await anyio.to_thread.run_sync(state.close)

    app.router.lifespan_context = lifespan
    return app


def http_config(settings: Settings, store: Store, host: str, port: int,
                watch_deadlines: bool = False, **kwargs: Any) -> Any:
    """uvicorn's configuration serving `http_app` with its connection bounds."""
    app = http_app(settings, store, watch_deadlines=watch_deadlines)
    return uvicorn_config(app, app.state.a2rl_connections, host, port, **kwargs)


def serve_http(settings: Settings, store: Store) -> None:
    import uvicorn

    adopt_on_start(store)
    config = http_config(settings, store, settings.server.host, settings.server.port,
                         watch_deadlines=True)
    anyio.run(uvicorn.Server(config).serve)
