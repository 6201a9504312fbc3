"""Bounds on one run's task services: connections, requests per second, bytes; refusals counted.

Why: a service socket is in the sandbox's reach, every request answered is a stored row and,
with a web backend, a paid call on the operator's key. So a run's services (all of them
together: one budget per run, shared by its `ServiceHost`s) hold at most
`server.services.max_connections` connections, answer at most
`server.services.requests_per_s` requests per second (a token bucket holding one second's
worth, so a short burst passes), and carry at most
`server.services.max_bytes` of requests and answers per serving process (checked before each
request;
the answer that crosses it is still sent, so the total may pass it by one answer). What is over
a bound is refused at once with one JSON line, never queued or left hanging.

Refusals are counted here, by bound, and kept in one `ToolCall` row per run and process (tool
`service.refused`, arguments `{"connections": n, "rate": n, "bytes": n}`, a `CountedRow`):
a flood of refusals costs counters, not one store write each, and the report and `a2rl show`
list the row with the run's other calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from a2rl.settings import Settings
from a2rl.store import Store

from .counted_rows import CountedRow

REFUSED_TOOL = "service.refused"
KINDS = ("connections", "rate", "bytes")


@dataclass(frozen=True)
class ServiceLimits:
    max_connections: int
    requests_per_s: float
    max_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ServiceLimits:
        ours = settings.server.services
        return cls(ours.max_connections, ours.requests_per_s, ours.max_bytes)


class RunServiceBudget:
    """The bounds' state for one run's services in this process; thread-safe."""

    def __init__(self, limits: ServiceLimits, store: Store | None = None,
                 run_id: str = "") -> None:
        self.limits, self.store, self.run_id = limits, store, run_id
        self._lock = threading.Lock()
        self._open = 0
        self._tokens = max(1.0, limits.requests_per_s)
        self._refill_at = time.monotonic()
        self.bytes_carried = 0
        self.row = CountedRow(store, run_id, REFUSED_TOOL, "unix", _describe, KINDS)

    # -- connections ---------------------------------------------------------------------
    def open_connection(self) -> str | None:
        """Take a connection slot; the refusal's message when none is free."""
        with self._lock:
            if self._open < self.limits.max_connections:
                self._open += 1
                return None
        self._note("connections")
        return (f"refused: this run already holds {self.limits.max_connections} service "
                "connections (server.services.max_connections); close one and retry")

    def close_connection(self) -> None:
        with self._lock:
            self._open -= 1

    @property
    def open_connections(self) -> int:
        return self._open

    # -- requests ------------------------------------------------------------------------
    def admit(self, request_bytes: int) -> str | None:
        """Charge one request of `request_bytes`; the refusal's message when it is over a
        bound (a refused request is not charged: it costs neither a token nor bytes)."""
        with self._lock:
            if self.bytes_carried + request_bytes > self.limits.max_bytes:
                kind = "bytes"
            else:
                now = time.monotonic()
                burst = max(1.0, self.limits.requests_per_s)
                self._tokens = min(burst, self._tokens
                                   + (now - self._refill_at) * self.limits.requests_per_s)
                self._refill_at = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    self.bytes_carried += request_bytes
                    return None
                kind = "rate"
        self._note(kind)
        if kind == "bytes":
            return (f"refused: this run's services have carried their {self.limits.max_bytes} "
                    "bytes (server.services.max_bytes); no more requests are answered")
        return (f"refused: over {self.limits.requests_per_s:g} service requests per second "
                "(server.services.requests_per_s); wait a moment and retry")

    def charge(self, answer_bytes: int) -> None:
        with self._lock:
            self.bytes_carried += answer_bytes

    # -- refusals ------------------------------------------------------------------------
    @property
    def refused(self) -> Mapping[str, int]:
        return self.row.counts

    def _note(self, kind: str) -> None:
        self.row.add(kind)

    def flush(self) -> None:
        """Write the refusal counts to the run's `service.refused` row (made on first use)."""
        self.row.flush()

    def close(self) -> None:
        """Write what is still unwritten (the host is stopping)."""
        self.row.close()


def _describe(counts: Mapping[str, int]) -> str:
    summary = ", ".join(f"{n} over {kind}" for kind, n in counts.items() if n)
    return f"{sum(counts.values())} service requests or connections refused: {summary}"
