"""What one run, and one client address, may hold of the HTTP server every run shares.

Why: one server serves every run's agent, and an agent is hostile by assumption. Before these
bounds one token's `initialize` loop filled the SDK's session table for everyone, 300 slow
bodies took every descriptor, and 300 refused calls in flight made another run wait seconds
for `run_command true`. So, per run (its token): at most `server.max_requests_per_run` requests
in flight (open streams included), `server.requests_per_s` requests a second (a token bucket
holding as many as may be in flight, so that an agent's parallel calls pass),
`server.max_connections_per_run` connections, and
`server.sessions_per_run` MCP sessions (opening one more ends that run's least recently used
one: a run can only push out its own); per client address, `server.max_requests_per_address`
requests in flight. A request over a bound is answered at once (429, with the bound's name)
and costs a counter: refusals are kept in the run's `http.refused` row (`CountedRow`), never a
store write each. Each `initialize` (and each `server/discover`, the 2026 protocol's opening)
is counted in the run's `mcp.initialize` row.

All state here is touched from the event loop only (the counted rows write in their own
threads); the connection layer (http_connections.py) knows which connection carried which
run's token.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from a2rl.settings import Settings
from a2rl.store import Store

from .counted_rows import CountedRow
from .event_store import EventBudget, SessionEvents

REFUSED_TOOL = "http.refused"
INITIALIZE_TOOL = "mcp.initialize"
#: every bound a refusal can name, in the row's arguments (0 when none was hit)
KINDS = ("rate", "requests", "connections", "body_timeout", "duplicate_id", "address")
#: distinct client names kept in the `mcp.initialize` row (the rest are counted as "(other)")
MAX_CLIENT_NAMES = 16


@dataclass(frozen=True)
class HttpLimits:
    sessions_per_run: int = 8
    session_idle_s: float = 900.0
    requests_per_s: float = 20.0
    max_requests_per_run: int = 64
    max_connections_per_run: int = 128
    max_requests_per_address: int = 256
    body_timeout_s: float = 30.0
    resume_bytes_per_session: int = 2_000_000
    resume_bytes: int = 64_000_000

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        ours = settings.server
        return cls(ours.sessions_per_run, ours.session_idle_s, ours.requests_per_s,
                   ours.max_requests_per_run, ours.max_connections_per_run,
                   ours.max_requests_per_address, ours.body_timeout_s,
                   ours.resume_bytes_per_session, ours.resume_bytes)


class Refused(NamedTuple):
    """A request answered at once: its HTTP status, the bound's name, the message."""

    status: int
    kind: str
    message: str
    close: bool = False  # the connection is closed after the answer (its body is unread)


class TokenBucket:
    """`rate` a second, a burst of `burst` (at least one)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, max(1.0, burst)
        self.tokens, self.at = self.burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class Session:
    session_id: str
    run_id: str
    events: SessionEvents
    used_at: float = field(default_factory=time.monotonic)
    busy: int = 1  # requests in flight (its opening one, from its admission)
    opening: bool = True  # its `initialize` is still being answered: never ended then


class RunShare:
    """One run's share of the server in this process."""

    def __init__(self, limits: HttpLimits, store: Store | None, run_id: str) -> None:
        self.run_id = run_id
        self.in_flight = 0
        # as many at once as may be in flight: an agent's parallel calls pass
        self.bucket = TokenBucket(limits.requests_per_s,
                                  max(limits.requests_per_s, limits.max_requests_per_run))
        self.sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        # nothing written once the run has ended: a closed record gets no more rows
        self.refused = CountedRow(store, run_id, REFUSED_TOOL, "http", _describe_refused, KINDS,
                                  open_only=True)
        self.opened = CountedRow(store, run_id, INITIALIZE_TOOL, "http", _describe_opened,
                                 ("initialize", "discover", "evicted"), is_error=False,
                                 open_only=True)
        self.clients: Counter[str] = Counter()


class HttpGate:
    """The per-run and per-address bounds of one HTTP server."""

    def __init__(self, limits: HttpLimits, store: Store | None = None) -> None:
        self.limits, self.store = limits, store
        self.runs: dict[str, RunShare] = {}
        self.sessions: dict[str, Session] = {}
        self.address_requests: Counter[str] = Counter()
        self.events = EventBudget(limits.resume_bytes)

    def share(self, run_id: str) -> RunShare:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = RunShare(self.limits, self.store, run_id)
        return found

    # -- requests ---------------------------------------------------------------------------
    def enter_address(self, address: str) -> Refused | None:
        """Take a request slot of `address`, or the refusal (not counted to any run)."""
        if self.address_requests[address] >= self.limits.max_requests_per_address:
            return Refused(429, "requests", f"too many requests in flight from {address} "
                           f"({self.limits.max_requests_per_address}, "
                           "http_max_requests_per_address); wait for an answer and retry")
        self.address_requests[address] += 1
        return None

    def leave_address(self, address: str) -> None:
        self.address_requests[address] -= 1
        if self.address_requests[address] <= 0:
            del self.address_requests[address]

    def enter_run(self, run_id: str, connections: int) -> Refused | None:
        """Take a request slot of the run, whose token `connections` connections now carry;
        or the refusal, counted in the run's `http.refused` row."""
        share = self.share(run_id)
        refused = None
        if connections > self.limits.max_connections_per_run:
            refused = Refused(429, "connections", f"this run's token holds {connections - 1} "
                              f"connections ({self.limits.max_connections_per_run}, "
                              "http_max_connections_per_run); reuse one", close=True)
        elif share.in_flight >= self.limits.max_requests_per_run:
            refused = Refused(429, "requests", "this run already has "
                              f"{self.limits.max_requests_per_run} requests in flight "
                              "(server.max_requests_per_run); wait for an answer and retry")
        elif not share.bucket.take():
            refused = Refused(429, "rate", f"over {self.limits.requests_per_s:g} requests per "
                              "second for this run (server.requests_per_s); wait a moment and "
                              "retry")
        if refused is not None:
            self.refuse(run_id, refused.kind)
            return refused
        share.in_flight += 1
        return None

    def leave_run(self, run_id: str) -> None:
        share = self.runs.get(run_id)
        if share is not None:
            share.in_flight -= 1

    def refuse(self, run_id: str, kind: str) -> None:
        self.share(run_id).refused.add(kind)

    # -- sessions -----------------------------------------------------------------------------
    def initialize(self, run_id: str, client: str, kind: str = "initialize",
                   opens: bool = True) -> tuple[CountedRow, list[Session]]:
        """A client's opening of the run (`kind`: initialize, or discover in the 2026
        protocol), counted with the client's name; when it `opens` a session, the run's least
        recently used sessions that must end so that the new one fits."""
        share = self.share(run_id)
        with share.opened.lock:
            if client not in share.clients and len(share.clients) >= MAX_CLIENT_NAMES:
                client = "(other)"
            share.clients[client] += 1
            share.opened.extra["clients"] = dict(share.clients)
        evict = _to_end(list(share.sessions.values()), self.limits.sessions_per_run - 1) \
            if opens else []
        share.opened.add(kind)
        if evict:
            share.opened.add("evicted", len(evict))
        return share.opened, evict

    def session_opened(self, run_id: str, session_id: str) -> SessionEvents:
        """A session the SDK admitted for `run_id`: its event store."""
        events = SessionEvents(session_id, self.limits.resume_bytes_per_session, self.events)
        session = Session(session_id, run_id, events)
        self.share(run_id).sessions[session_id] = session
        self.sessions[session_id] = session
        return events

    def session_answered(self, session_id: str) -> None:
        """The request that opened the session has its answer."""
        session = self.sessions.get(session_id)
        if session is not None and session.opening:
            session.opening = False
            session.busy -= 1

    def session_used(self, session_id: str) -> Session | None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.used_at = time.monotonic()
            share = self.runs.get(session.run_id)
            if share is not None and session_id in share.sessions:
                share.sessions.move_to_end(session_id)
        return session

    def session_closed(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        session.events.close()
        share = self.runs.get(session.run_id)
        if share is not None:
            share.sessions.pop(session_id, None)

    def sessions_of(self, run_id: str) -> list[Session]:
        share = self.runs.get(run_id)
        return list(share.sessions.values()) if share is not None else []

    def run_ids(self) -> list[str]:
        return list(self.runs)

    def run_ended(self, run_id: str) -> RunShare | None:
        """Forget the run (its sessions are ended by the caller, its rows written)."""
        return self.runs.pop(run_id, None)

    def close(self) -> None:
        """Write every run's counts (the server is stopping)."""
        for share in list(self.runs.values()):
            share.refused.close()
            share.opened.close()


def _to_end(sessions: list[Session], keep: int) -> list[Session]:
    """Which of a run's sessions (least recently used first) end so that `keep` remain: the
    idle ones first, then the busy ones; never one whose opening is still being answered
    (ending it would cut that answer: such a session counts past the cap for that moment)."""
    ready = [s for s in sessions if not s.opening]
    over = len(sessions) - keep
    if over <= 0:
        return []
    idle = [s for s in ready if not s.busy]
    return (idle + [s for s in ready if s.busy])[:over]


def _describe_refused(counts: Mapping[str, int]) -> str:
    summary = ", ".join(f"{n} over {kind}" for kind, n in counts.items() if n)
    return f"{sum(counts.values())} HTTP requests refused at once: {summary}"


def _describe_opened(counts: Mapping[str, int]) -> str:
    text = f"{counts.get('initialize', 0)} MCP sessions opened over HTTP"
    if counts.get("discover"):
        text += f", {counts['discover']} sessionless connections (server/discover)"
    if counts.get("evicted"):
        text += (f"; {counts['evicted']} older ones ended to keep the run within "
                 "server.sessions_per_run")
    return text
