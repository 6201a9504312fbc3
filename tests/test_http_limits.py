"""The HTTP server's bounds as pure state: each session's event store (what is kept, what is
replayed), the per-run gate (caps, rate, sessions), the connection table's choice of the
connection to close, and the counted rows. The same bounds under real floods, through a real
server, are tests/security/test_http_fairness.py's."""

from __future__ import annotations

import time
from typing import Any

import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from a2rl.server.counted_rows import CountedRow
from a2rl.server.event_store import EventBudget, SessionEvents
from a2rl.server.http_connections import ConnectionTable
from a2rl.server.http_limits import HttpGate, HttpLimits, TokenBucket
from a2rl.store import Run, Store, ToolCall

from .helpers import calls

pytestmark = pytest.mark.anyio


def _note(text: str) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress",
                               params={"progressToken": 1, "progress": 0, "message": text})


def _answer(request_id: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"ok": request_id})


async def _replayed(events: SessionEvents, after: str) -> tuple[list[Any], str | None]:
    got: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        got.append(event)

    stream = await events.replay_events_after(after, collect)
    return [e.message for e in got], stream


async def test_a_stream_is_replayed_after_its_event_and_alone() -> None:
    events = SessionEvents("s", 100_000, EventBudget(1_000_000))
    prime_a = await events.store_event("1", None)
    prime_b = await events.store_event("2", None)
    await events.store_event("1", _note("a1"))
    await events.store_event("2", _note("b1"))
    messages, stream = await _replayed(events, prime_a)
    assert stream == "1" and [m.params["message"] for m in messages] == ["a1"]
    await events.store_event("1", _answer(1))
    messages, stream = await _replayed(events, prime_a)
    assert [type(m) for m in messages] == [JSONRPCNotification, JSONRPCResponse]
    assert stream is None  # its answer was sent: nothing more will come on it
    assert (await _replayed(events, prime_b))[1] == "2"
    assert not events.knows("999") and not events.knows("x") and events.knows(prime_b)
    assert (await _replayed(events, "999")) == ([], None)


async def test_events_are_bounded_per_session_and_in_all() -> None:
    budget = EventBudget(30_000)
    one, two = SessionEvents("a", 20_000, budget), SessionEvents("b", 20_000, budget)
    first = await one.store_event("1", _note("x" * 5000))
    for _ in range(5):
        await one.store_event("1", _note("x" * 5000))
    assert one.bytes <= 20_000 and not one.knows(first)  # the oldest went first
    for _ in range(5):
        await two.store_event("7", _note("y" * 5000))
    assert budget.bytes <= 30_000 and one.bytes + two.bytes == budget.bytes
    assert two.bytes > one.bytes  # the other session's older events went
    two.close()
    assert budget.bytes == one.bytes and not two.events
    await two.store_event("7", _note("after"))  # an ended session keeps nothing
    assert not two.events
    huge = await one.store_event("1", _note("z" * 50_000))  # over every bound: kept nowhere
    assert not one.knows(huge)


async def test_a_request_is_pending_until_its_answer_is_stored() -> None:
    events = SessionEvents("s", 100_000, EventBudget(1_000_000))
    assert events.begin("7") and not events.begin("7")
    await events.store_event("7", _note("working"))
    assert not events.begin("7")
    await events.store_event("7", _answer(7))
    assert events.begin("7")


def test_the_gate_caps_a_run_and_an_address() -> None:
    gate = HttpGate(HttpLimits(max_requests_per_run=2, requests_per_s=1000,
                               max_connections_per_run=3, max_requests_per_address=3))
    assert gate.enter_run("r-a", 1) is None and gate.enter_run("r-a", 1) is None
    refused = gate.enter_run("r-a", 1)
    assert refused is not None and refused.kind == "requests"
    assert "server.max_requests_per_run" in refused.message
    assert gate.enter_run("r-b", 1) is None  # another run is not held up
    gate.leave_run("r-a")
    assert gate.enter_run("r-a", 4).kind == "connections"  # type: ignore[union-attr]
    assert gate.runs["r-a"].refused.counts == {"requests": 1, "connections": 1}
    assert [gate.enter_address("h") for _ in range(3)] == [None] * 3
    assert gate.enter_address("h").kind == "requests"  # type: ignore[union-attr]
    gate.leave_address("h")
    assert gate.enter_address("h") is None


def test_a_runs_rate_passes_a_burst_then_refuses() -> None:
    bucket = TokenBucket(rate=2, burst=5)
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]
    bucket.at -= 1.0  # a second later: two more
    assert [bucket.take() for _ in range(3)] == [True, True, False]


def test_an_initialize_past_the_cap_ends_the_runs_least_recently_used_session() -> None:
    gate = HttpGate(HttpLimits(sessions_per_run=2))
    for sid in ("s1", "s2"):
        assert gate.initialize("r-a", "cli 1")[1] == []
        gate.session_opened("r-a", sid)
    assert gate.initialize("r-a", "cli 1")[1] == []  # both still being answered: kept
    for sid in ("s1", "s2"):
        gate.session_answered(sid)
    gate.session_opened("r-b", "other")
    gate.session_used("s1")  # s2 is now the least recently used
    row, evict = gate.initialize("r-a", "cli 1")
    assert [s.session_id for s in evict] == ["s2"]
    gate.sessions["s2"].busy = 1  # a request in flight: the idle one goes first
    assert [s.session_id for s in gate.initialize("r-a", "cli 1")[1]] == ["s1"]
    assert row.counts == {"initialize": 5, "evicted": 2} and row.extra["clients"] == {"cli 1": 5}
    row, evict = gate.initialize("r-a", "cli 2", "discover", opens=False)  # no session
    assert evict == [] and row.counts["discover"] == 1
    gate.session_closed("s2")
    assert [s.session_id for s in gate.sessions_of("r-a")] == ["s1"]
    assert [s.session_id for s in gate.sessions_of("r-b")] == ["other"]


class _Conn:
    """A stand-in for a connection: what the table reads and calls."""

    def __init__(self, port: int, idle_since: float | None) -> None:
        self.client = ("127.0.0.1", port)
        self.idle_since = idle_since
        self.closed = False

    def close_idle(self) -> None:
        self.closed = True


def test_a_full_address_closes_its_longest_idle_connection_or_refuses() -> None:
    table = ConnectionTable(max_per_address=3, max_total=100, header_timeout_s=10)
    now = time.monotonic()
    busy, waited_long, idle = _Conn(1, None), _Conn(2, now - 5), _Conn(3, now - 1)
    for conn in (busy, waited_long, idle):
        assert table.opened(conn, "127.0.0.1")  # type: ignore[arg-type]
    newcomer = _Conn(4, now)
    assert table.opened(newcomer, "127.0.0.1")  # type: ignore[arg-type]
    assert waited_long.closed and not idle.closed and not busy.closed
    assert table.opened(_Conn(5, now), "10.0.0.9")  # type: ignore[arg-type]  # its own count
    idle.idle_since = newcomer.idle_since = None  # every one of them busy now
    assert not table.opened(_Conn(6, now), "127.0.0.1")  # type: ignore[arg-type]
    assert table.bind(("127.0.0.1", 1), "r-a") == 1 and table.bind(("127.0.0.1", 3), "r-a") == 2
    table.closed(busy)  # type: ignore[arg-type]
    assert table.per_run["r-a"] == 1 and table.per_address["127.0.0.1"] == 2


def test_a_counted_row_is_one_row_rewritten_in_place(store: Store, tmp_path: Any) -> None:
    with store.session() as s:
        s.add(Run(id="r-c", task_id="fixture", workspace=str(tmp_path), budget_s=60))
    row = CountedRow(store, "r-c", "http.refused", "http",
                     lambda c: f"{sum(c.values())} refused", ("rate", "requests"), every_s=0.2)
    for _ in range(50):
        row.add("rate")
    row.add("requests", 2)
    deadline = time.monotonic() + 5
    while not calls(store, "r-c") and time.monotonic() < deadline:
        time.sleep(0.05)
    row.add("rate")
    row.flush()
    rows = calls(store, "r-c")
    assert [(r.tool, r.arguments, r.error) for r in rows] == [
        ("http.refused", {"rate": 51, "requests": 2}, "53 refused")]
    with store.session() as s:
        assert s.get(ToolCall, rows[0].id).is_error  # type: ignore[union-attr]


async def test_a_refusal_of_an_ended_run_writes_nothing(store: Store, tmp_path: Any) -> None:
    """The record closes at the write: a call that reaches a server before it has seen the
    end is refused there, unrecorded."""
    from a2rl.server.recording import RecordClosed, astart_call, start_call
    from a2rl.store import utcnow

    with store.session() as s:
        s.add(Run(id="r-e", task_id="fixture", workspace=str(tmp_path), budget_s=60,
                  ended_at=utcnow(), end_reason="finished"))
    with pytest.raises(RecordClosed, match="finished"):
        await astart_call(store, "r-e", "budget_status", {}, "http", 100)
    start_call(store, "r-e", "budget_status", {}, "http")  # the server's own rows still may
    assert [c.tool for c in calls(store, "r-e")] == ["budget_status"]
