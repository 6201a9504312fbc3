"""`[server]` and `[server.services]`: the MCP server shared by every run (`server/`: what one
token or one address may hold of it, README "Serving many runs") and one run's task services
(unix sockets in the sandbox, `server/services.py`)."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class ServicesSettings(Section):
    max_connections: int = Field(
        16, ge=1, description="connections one run's task services (unix sockets in the "
        "sandbox) hold open at once; one more is refused with a one-line error")
    requests_per_s: float = Field(
        20.0, gt=0, description="requests per second one run's task services answer (a burst of "
        "as many); faster ones are refused at once, never queued (each may be a paid call)")
    max_bytes: int = Field(
        256_000_000, ge=1, description="bytes of requests and answers one run's task services "
        "carry per serving process; past it every request is refused")


class ServerSettings(Section):
    host: str = Field("127.0.0.1", description="address `a2rl serve --http` listens on")
    port: int = Field(8765, ge=1, le=65535, description="port `a2rl serve --http` listens on")
    max_wait_s: float = Field(60.0, gt=0, description="upper bound on any tool's wait_s")
    max_run_threads: int = Field(
        8, ge=1, description="worker threads one run's tool calls hold at once, and as many for "
        "its waits on jobs; more wait their turn (a server serves many runs over HTTP: one run's "
        "calls must not starve the rest)")
    sessions_per_run: int = Field(
        8, ge=1, description="MCP sessions one run holds open on the HTTP server; opening one "
        "more ends that run's least recently used session (never another run's)")
    session_idle_s: float = Field(
        900.0, gt=0, description="an HTTP session with no request in flight (no open stream) "
        "for this long is ended; a run's sessions also end when the run ends")
    header_timeout_s: float = Field(
        10.0, gt=0, description="seconds a connection has to send a request's headers (from "
        "its opening or its previous answer); past it the connection is closed")
    body_timeout_s: float = Field(
        30.0, gt=0, description="seconds a request has to send its whole body once its headers "
        "are in; past it it gets 408 and the connection is closed")
    requests_per_s: float = Field(
        20.0, gt=0, description="HTTP requests per second one run's token is answered (a burst "
        "of as many as max_requests_per_run); faster ones get 429 at once, counted in the "
        "run's http.refused row")
    max_requests_per_run: int = Field(
        64, ge=1, description="HTTP requests of one run's token in flight at once (open "
        "streams included); one more gets 429 at once")
    max_connections_per_run: int = Field(
        128, ge=1, description="connections whose last request carried one run's token; one more "
        "gets 429 and is closed")
    max_requests_per_address: int = Field(
        256, ge=1, description="HTTP requests in flight from one client address (all its runs "
        "and token-less requests together); one more gets 429 at once")
    max_connections_per_address: int = Field(
        512, ge=1, description="connections open from one client address; one more closes that "
        "address's longest idle connection, or is refused with 503 when none is idle")
    max_connections: int = Field(
        4096, ge=1, description="connections open to the HTTP server from every address "
        "together (file descriptors); past it as per address")
    resume_bytes_per_session: int = Field(
        2_000_000, ge=0, description="bytes of server messages one HTTP session keeps so that a "
        "client that lost a stream gets them again (SSE Last-Event-ID); the oldest go first")
    resume_bytes: int = Field(
        64_000_000, ge=0, description="the same for every session together; the oldest go "
        "first")
    sse_retry_ms: int = Field(
        1000, ge=0, description="the SSE retry a client waits before it resumes a lost stream")
    services: ServicesSettings = Field(default_factory=ServicesSettings)
