"""The HTTP server's connections: deadlines on headers, caps per address and in all.

Why: uvicorn has no deadline for a request still arriving and no bound on connections, so 300
connections that never finish their headers (or send a body a byte at a time after an early
answer) held the server's descriptors until it had none left for anyone. This is uvicorn's
h11 protocol with three additions:

- a connection must send a request's headers within `server.header_timeout_s` of its opening
  or of its previous answer (uvicorn's own keep-alive timeout closes a silent one sooner);
  past it it gets 408 and is closed. A request answered before its body was read whole (a
  401, a refusal) has its connection closed rather than kept reading what follows;
- at most `server.max_connections_per_address` connections from one address and
  `server.max_connections` in all: one more closes the longest idle connection of that address
  (of all, for the second bound), the one that has waited longest for headers first; when
  every one is serving a request the new one gets 503 and is closed. A client that sends its
  request at once is never the one closed;
- `ConnectionTable.bind` notes which run's token a connection's last request carried, so that
  the HTTP gate can cap a run's connections (`server.max_connections_per_run`).

Bodies have their deadline in the gate (transports: `server.body_timeout_s`), which reads them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from a2rl.settings import Settings

#: uvicorn's keep-alive: an idle connection between two requests is closed after it
KEEP_ALIVE_S = 5


def _raw_answer(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP answer with a JSON-RPC error, written where h11 cannot (no request yet)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32000, "message": message}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class ConnectionTable:
    """Every open connection of one server, by address and by the run whose token it carried."""

    def __init__(self, max_per_address: int, max_total: int, header_timeout_s: float) -> None:
        self.max_per_address, self.max_total = max_per_address, max_total
        self.header_timeout_s = header_timeout_s
        self.open: dict[GatedH11Protocol, str] = {}  # connection -> its address
        self.per_address: Counter[str] = Counter()
        self.by_client: dict[tuple[Any, ...], GatedH11Protocol] = {}
        self.run_of: dict[GatedH11Protocol, str] = {}
        self.per_run: Counter[str] = Counter()
        self.evicted = 0
        self.refused = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionTable:
        return cls(settings.server.max_connections_per_address, settings.server.max_connections,
                   settings.server.header_timeout_s)

    def opened(self, conn: GatedH11Protocol, address: str) -> bool:
        """Admit a new connection (closing the longest idle one where a bound is reached);
        False when it must be refused."""
        full = self.per_address[address] >= self.max_per_address
        if full and not self._evict([c for c, a in self.open.items() if a == address]):
            self.refused += 1
            return False
        if len(self.open) >= self.max_total and not self._evict(list(self.open)):
            self.refused += 1
            return False
        self.open[conn] = address
        self.per_address[address] += 1
        if conn.client is not None:
            self.by_client[tuple(conn.client)] = conn
        return True

    def _evict(self, among: list[GatedH11Protocol]) -> bool:
        idle = [c for c in among if c.idle_since is not None]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.idle_since or 0.0)
        oldest.close_idle()
        self.closed(oldest)  # now: its slot is the new connection's
        self.evicted += 1
        return True

    def closed(self, conn: GatedH11Protocol) -> None:
        address = self.open.pop(conn, None)
        if address is None:
            return
        self.per_address[address] -= 1
        if self.per_address[address] <= 0:
            del self.per_address[address]
        if conn.client is not None and self.by_client.get(tuple(conn.client)) is conn:
            del self.by_client[tuple(conn.client)]
        self._unbind(conn)

    def bind(self, client: Any, run_id: str) -> int:
        """The connection from `client` (scope["client"]) carries `run_id`'s token now; how
        many connections carry it (1 where the connection is not ours: a test's ASGI app)."""
        conn = self.by_client.get(tuple(client)) if client else None
        if conn is None:
            return 1
        if self.run_of.get(conn) != run_id:
            self._unbind(conn)
            self.run_of[conn] = run_id
            self.per_run[run_id] += 1
        return self.per_run[run_id]

    def _unbind(self, conn: GatedH11Protocol) -> None:
        run_id = self.run_of.pop(conn, None)
        if run_id is not None:
            self.per_run[run_id] -= 1
            if self.per_run[run_id] <= 0:
                del self.per_run[run_id]


class GatedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, bounded by `table` (a subclass per server sets it)."""

    table: ConnectionTable

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.idle_since: float | None = time.monotonic()
        self._deadline: asyncio.TimerHandle | None = None
        address = self.client[0] if self.client else ""
        if not self.table.opened(self, address):
            self.idle_since = None
            transport.write(_raw_answer(503, "Service Unavailable", "too many connections "
                                        f"from {address or 'this address'}, every one of them "
                                        "busy (server.max_connections_per_address); retry later"))
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.table.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.idle_since is None or self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(_raw_answer(408, "Request Timeout", "no request headers "
                                             f"within {self.table.header_timeout_s:g} s "
                                             "(server.header_timeout_s)"))
        self.close_idle()

    def close_idle(self) -> None:
        self._disarm()
        self.idle_since = None
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None \
                and not self.cycle.response_complete:
            self.idle_since = None  # a request's headers are in: it is being served
            self._disarm()

    def on_response_complete(self) -> None:
        if self.transport.is_closing():
            super().on_response_complete()
            return
        if self.conn.their_state not in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
            # answered before its body was read whole: what follows is no request of ours
            super().on_response_complete()
            self.close_idle()
            return
        self.idle_since = time.monotonic()
        self._arm()
        super().on_response_complete()  # may start a pipelined request (handle_events)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.idle_since = None
        self.table.closed(self)
        super().connection_lost(exc)


def protocol_for(table: ConnectionTable) -> type[GatedH11Protocol]:
    """The protocol class uvicorn builds each connection with, bound to `table`."""
    return type("A2RLHttpProtocol", (GatedH11Protocol,), {"table": table})


def uvicorn_config(app: Any, table: ConnectionTable, host: str, port: int,
                   **kwargs: Any) -> Any:
    """uvicorn's configuration for our MCP app: our protocol, a short keep-alive."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=protocol_for(table),  # type: ignore[arg-type]
                          timeout_keep_alive=KEEP_ALIVE_S, log_level="warning", **kwargs)
