"""One run cannot lock the others out of the HTTP server (issue 43): each flood of
bench/http_floods.py, from one run's token (or none), against a real `a2rl serve --http` with
small bounds, while another run's real MCP client calls `run_command true`. Each test asserts
that the other run is answered, that the server's descriptors and memory come back, and that
the flood is in its run's record (counted, not a row each). Plus the ended run's token on every
method, the duplicate id, and a real client resuming a stream it lost.

The figures (latency ratios at the issue's sizes) are bench/http_fairness.py's.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from a2rl.server import create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

from ..conftest import require_bwrap
from ..helpers import calls
from .wire import HttpServer

_PATH = Path(__file__).resolve().parents[2] / "bench" / "http_floods.py"
_spec = importlib.util.spec_from_file_location("http_floods", _PATH)
assert _spec is not None and _spec.loader is not None
floods = importlib.util.module_from_spec(_spec)
sys.modules["http_floods"] = floods  # dataclasses look their module up there
_spec.loader.exec_module(floods)

pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]

LIMITS = {"A2RL_SERVER__SESSIONS_PER_RUN": "3", "A2RL_SERVER__REQUESTS_PER_S": "40",
          "A2RL_SERVER__MAX_REQUESTS_PER_RUN": "8", "A2RL_SERVER__MAX_CONNECTIONS_PER_RUN": "16",
          "A2RL_SERVER__MAX_REQUESTS_PER_ADDRESS": "64",
          "A2RL_SERVER__MAX_CONNECTIONS_PER_ADDRESS": "100",
          "A2RL_SERVER__HEADER_TIMEOUT_S": "1.5", "A2RL_SERVER__BODY_TIMEOUT_S": "1.5",
          "A2RL_SERVER__SSE_RETRY_MS": "200"}
FLOOD_S = 2.0
#: descriptors and MB the server may keep after a flood (a loaded machine's noise)
FD_SLACK, RSS_SLACK_MB = 12, 40.0


@pytest.fixture(scope="module")
def fair_settings(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=a2rl_home,
                    db_url=f"sqlite:///{tmp_path_factory.mktemp('fair') / 'a2rl.db'}")


@pytest.fixture(scope="module")
def fair_store(fair_settings: Settings) -> Iterator[Store]:
    s = Store(fair_settings.database_url)
    yield s
    s.close()


@pytest.fixture(scope="module")
def server(fair_settings: Settings, fair_store: Store,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    require_bwrap()
    s = HttpServer(fair_settings, tmp_path_factory.mktemp("fair-http") / "server.log",
                   env=LIMITS)
    yield s
    s.close()


class Pair:
    """The victim's run and the attacker's, each with its token."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings, self.store = settings, store
        self.victim = create_run(settings, store, task_id="fixture", budget="30m",
                                 baseline=False)
        self.attacker = create_run(settings, store, task_id="fixture", budget="30m",
                                   baseline=False)

    def rows(self, tool: str) -> list[Any]:
        return [c for c in calls(self.store, self.attacker.run.id) if c.tool == tool]

    def close(self) -> None:
        for created in (self.victim, self.attacker):
            finish_run(self.settings, self.store, created.run.id)


@pytest.fixture
def pair(fair_settings: Settings, fair_store: Store) -> Iterator[Pair]:
    p = Pair(fair_settings, fair_store)
    yield p
    p.close()


async def _under_flood(server: HttpServer, pair: Pair, flood: Any) -> tuple[Any, list[float]]:
    """Run `flood(stop)` for FLOOD_S while the victim calls; the flood's counts and the
    victim's latencies. The victim is answered every time, and the server's descriptors and
    memory come back once the flood ends."""
    victim = floods.Victim(server.url, pair.victim.token, timeout_s=30)
    probe = floods.ProcessProbe(server.proc.pid)
    await victim.latencies(n=3)  # warm: the victim's run is served, its sandbox started
    rss, fds = probe.sample()
    stop = anyio.Event()
    result: dict[str, Any] = {}

    async def flooding() -> None:
        result["counts"] = await flood(stop)

    async def victim_calls() -> None:
        await anyio.sleep(0.5)  # the flood is under way
        result["victim"] = await victim.latencies(stop=stop)

    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.watch, stop)
        tg.start_soon(flooding)
        tg.start_soon(victim_calls)
        await anyio.sleep(FLOOD_S)
        stop.set()
    times, failed = result["victim"]
    assert times and failed == 0, f"the other run went unanswered {failed} times: {times}"
    deadline = time.monotonic() + 10  # the flood's connections close; its sessions stay capped
    while probe.fds() > fds + FD_SLACK and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert probe.fds() <= fds + FD_SLACK, (fds, probe.peak_fds, probe.fds())
    assert probe.rss_mb() <= rss + RSS_SLACK_MB, (rss, probe.peak_rss_mb, probe.rss_mb())
    assert server.alive()
    return result["counts"], times


def _counted(pair: Pair, tool: str, ready: Any = bool) -> dict[str, Any]:
    """The arguments of the attacker's counted row `tool`, once `ready(arguments)` (a counted
    row is rewritten at most once a second)."""
    deadline = time.monotonic() + 5
    while True:
        rows = pair.rows(tool)
        assert len(rows) <= 1, rows
        if rows and ready(rows[0].arguments) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows, f"no {tool} row"
    return dict(rows[0].arguments)


async def test_an_initialize_loop_stays_within_its_runs_sessions(server: HttpServer,
                                                                 pair: Pair) -> None:
    async with httpx2.AsyncClient(timeout=30) as h:
        first = await floods.open_session(h, server.url, pair.attacker.token)
    counts, _ = await _under_flood(server, pair, lambda stop: floods.initialize_loop(
        server.url, pair.attacker.token, stop))
    opened = counts.statuses["200"]
    assert opened > 3, counts  # the loop ran...
    async with httpx2.AsyncClient(timeout=30) as h:  # ...and pushed out its own first session
        resp = await h.post(server.url, content=floods.call_body(1, "budget_status", {}),
                            headers=floods.headers_for(pair.attacker.token, first))
        assert resp.status_code == 404, resp.text
    record = _counted(pair, "mcp.initialize", lambda a: a["initialize"] == opened + 1)
    assert record["initialize"] == opened + 1, (record, counts)
    assert record["evicted"] >= opened + 1 - 3, record
    assert record["clients"] == {"flood 1": opened + 1}
    turned = counts.statuses["429"]
    if turned:
        refused = _counted(pair, "http.refused", lambda a: sum(a.values()) == turned)
        assert sum(refused.values()) == turned, (refused, counts)


async def test_slow_bodies_and_half_requests_cannot_take_the_descriptors(
        server: HttpServer, pair: Pair) -> None:
    host, port = "127.0.0.1", server.port
    slow: dict[str, Any] = {}

    async def both(stop: anyio.Event) -> Any:
        async def bodies() -> None:
            slow["bodies"] = await floods.slow_bodies(host, port, pair.attacker.token, stop, 40)

        async def halves() -> None:
            slow["halves"] = await floods.half_requests(host, port, stop, 40)

        async with anyio.create_task_group() as tg:
            tg.start_soon(bodies)
            tg.start_soon(halves)
        return slow

    await _under_flood(server, pair, both)
    bodies, halves = slow["bodies"].statuses, slow["halves"].statuses
    assert halves["408"] > 0, halves  # cut at the header deadline, answered
    assert bodies["408"] > 0 and bodies["429"] > 0, bodies  # cut at the body deadline, capped
    # each body cut at its deadline is counted to the run; a 408 of the flood's can also be
    # a header deadline on a reused connection (a loaded machine), which names no run: so
    # the count is checked to be there, not to match every 408
    refused = _counted(pair, "http.refused", lambda a: a["body_timeout"] > 0)
    assert refused["body_timeout"] > 0, (refused, bodies)


async def test_refused_calls_in_flight_cost_another_run_nothing(server: HttpServer,
                                                                 pair: Pair) -> None:
    counts, _ = await _under_flood(server, pair, lambda stop: floods.refused_in_flight(
        server.url, pair.attacker.token, stop, 60))
    statuses = counts.statuses
    assert statuses["400"] > 0 and statuses["429"] > 0, statuses
    # Each refusal read whole is a row of its own; each turned away at once is counted.
    assert len(pair.rows("read_file")) == statuses["400"], statuses
    refused = _counted(pair, "http.refused", lambda a: sum(a.values()) == statuses["429"])
    assert sum(refused.values()) == statuses["429"], (refused, statuses)


async def test_a_duplicate_id_in_flight_is_answered_with_an_error(server: HttpServer,
                                                                   pair: Pair) -> None:
    token = pair.attacker.token
    async with httpx2.AsyncClient(timeout=30) as h:
        session = await floods.open_session(h, server.url, token)
        headers = floods.headers_for(token, session)
        answers: dict[str, Any] = {}

        async def slow() -> None:
            resp = await h.post(server.url, headers=headers, content=floods.call_body(
                7, "run_command", {"command": "sleep 1.5; echo slow", "wait_s": 10}))
            answers["slow"] = floods.message_of(resp)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.sleep(0.5)
            with anyio.fail_after(5):  # answered at once, not left waiting
                dup = await h.post(server.url, headers=headers,
                                   content=floods.call_body(7, "budget_status", {}))
        assert dup.status_code == 400, dup.text
        assert dup.json()["id"] == 7 and "already in flight" in dup.json()["error"]["message"]
        assert "slow" in str(answers["slow"]["result"]), answers  # the first got its own answer
        again = await h.post(server.url, headers=headers,  # answered: the id is free again
                             content=floods.call_body(7, "budget_status", {}))
        assert floods.message_of(again)["id"] == 7 and "result" in floods.message_of(again)
    assert _counted(pair, "http.refused", lambda a: a["duplicate_id"])["duplicate_id"] == 1


async def test_an_ended_runs_token_is_refused_on_every_method(server: HttpServer,
                                                               pair: Pair) -> None:
    token = pair.attacker.token
    async with httpx2.AsyncClient(timeout=30) as h:
        session = await floods.open_session(h, server.url, token)
        headers = floods.headers_for(token, session)
        async with h.stream("GET", server.url, headers={**headers, "Accept":
                                                        "text/event-stream"}) as stream:
            assert stream.status_code == 200
            before = len(calls(pair.store, pair.attacker.run.id))
            await anyio.to_thread.run_sync(finish_run, pair.settings, pair.store,
                                           pair.attacker.run.id)
            # At once, before the server has seen the end: refused all the same, unrecorded.
            resp = await h.post(server.url, headers=headers,
                                content=floods.call_body(2, "budget_status", {}))
            assert "has ended" in resp.text and "its record is closed" in resp.text, resp.text
            with anyio.fail_after(15):  # the run's session ends: its open stream is closed
                async for _ in stream.aiter_raw():
                    pass
        for method in ("GET", "POST", "DELETE"):
            resp = await h.request(method, server.url, headers=headers,
                                   content=floods.call_body(3, "budget_status", {})
                                   if method == "POST" else None)
            assert resp.status_code == 403, (method, resp.status_code, resp.text)
            message = resp.json()["error"]["message"]
            assert message.startswith(f"run {pair.attacker.run.id} has ended"), message
        assert len(calls(pair.store, pair.attacker.run.id)) == before  # nothing appended


async def test_a_client_that_loses_its_stream_gets_its_answer(server: HttpServer,
                                                              pair: Pair) -> None:
    """A real MCP client, through a proxy that cuts every connection while a long call runs:
    the client resumes the call's stream (GET with Last-Event-ID) and gets its answer."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    proxy = _CuttingProxy(server.port)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        url = f"http://127.0.0.1:{proxy.port}/mcp"
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {pair.victim.token}"},
                                      timeout=30) as h, \
                Client(streamable_http_client(url, http_client=h), mode="legacy") as client:
            async def cut_later() -> None:
                await anyio.sleep(1.0)
                await proxy.cut()

            tg.start_soon(cut_later)
            with anyio.fail_after(30):
                result = await client.call_tool("run_command", {
                    "command": "sleep 2.5; echo after-the-cut", "wait_s": 10})
        tg.cancel_scope.cancel()
    assert proxy.cuts == 1 and proxy.resumed, "the stream was not cut and resumed"
    assert not result.is_error and "after-the-cut" in result.structured_content["output"]


class _CuttingProxy:
    """A TCP proxy to the server that can cut every open connection at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cuts = 0
        self.resumed = False
        self._open: set[Any] = set()

    async def serve(self, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._pipe)

    async def _pipe(self, client: Any) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.target_port) as upstream:
            self._open.update((client, upstream))

            async def copy(src: Any, dst: Any, sniff: bool) -> None:
                try:
                    async for chunk in src:
                        if sniff and self.cuts and b"last-event-id" in chunk.lower():
                            self.resumed = True
                        await dst.send(chunk)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                finally:
                    await dst.aclose()

            async with anyio.create_task_group() as tg:
                tg.start_soon(copy, client, upstream, True)
                tg.start_soon(copy, upstream, client, False)
            self._open.difference_update((client, upstream))

    async def cut(self) -> None:
        self.cuts += 1
        for stream in list(self._open):
            await stream.aclose()
