"""The floods of issue 43 against an `a2rl serve --http`, and what another run sees meanwhile.

Used by bench/http_fairness.py (the figures in bench/RESULTS.md) and by
tests/security/test_http_fairness.py (the same floods, smaller). Each flood runs until its
`stop` event is set, from one token (or none), and returns its counts:

- `initialize_loop`: `initialize` after `initialize` on one token, never closing a session;
- `slow_bodies`: connections that send a POST's headers with the token and then a byte of
  body now and then; `half_requests`: connections without a token that never finish their
  headers. Each reopens when the server closes it, so the pressure stays;
- `refused_in_flight`: many workers each sending, again and again, a call the server refuses
  after reading it (a lone surrogate in an argument: a recorded refusal);
- `duplicate_ids`: one session sending slow calls, each followed by more requests with the
  same JSON-RPC id while it is in flight.

`Victim` is another run's real MCP client calling `run_command true`; `ProcessProbe` reads the
server's resident memory and open descriptors from /proc.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2

PROTOCOL = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def initialize_body(request_id: int = 0) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"}}}).encode()


def call_body(request_id: int | str, tool: str, arguments: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()


def headers_for(token: str | None, session: str | None = None) -> dict[str, str]:
    out = {"Content-Type": "application/json", "Accept": ACCEPT}
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    if session is not None:
        out["mcp-session-id"] = session
        out["mcp-protocol-version"] = PROTOCOL
    return out


async def open_session(client: httpx2.AsyncClient, url: str, token: str) -> str:
    """A raw MCP session (the legacy handshake); its id."""
    resp = await client.post(url, content=initialize_body(), headers=headers_for(token))
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    session = resp.headers["mcp-session-id"]
    await client.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                      headers=headers_for(token, session))
    return session


@dataclass
class FloodCounts:
    statuses: Counter[str] = field(default_factory=Counter)

    def note(self, what: int | str) -> None:
        self.statuses[str(what)] += 1


async def initialize_loop(url: str, token: str, stop: anyio.Event, workers: int = 4
                          ) -> FloodCounts:
    counts = FloodCounts()

    async def worker() -> None:
        async with httpx2.AsyncClient(timeout=30) as client:
            while not stop.is_set():
                try:
                    resp = await client.post(url, content=initialize_body(),
                                             headers=headers_for(token))
                    counts.note(resp.status_code)
                except httpx2.HTTPError as exc:
                    counts.note(type(exc).__name__)
                    await anyio.sleep(0.05)

    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
    return counts


async def _trickle(host: str, port: int, head: bytes, stop: anyio.Event, counts: FloodCounts,
                   every_s: float = 0.5) -> None:
    """Open a connection, send `head`, then a byte every `every_s`; reopen when closed."""
    while not stop.is_set():
        try:
            async with await anyio.connect_tcp(host, port) as sock:
                counts.note("opened")
                await sock.send(head)
                while not stop.is_set():
                    with anyio.move_on_after(every_s):
                        data = await sock.receive()
                        counts.note(data.split(b" ", 2)[1].decode() if data.startswith(
                            b"HTTP/1.1 ") else "data")
                        break  # answered: the server closes it (or will); open another
                    await sock.send(b"x")
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError,
                anyio.ClosedResourceError):
            counts.note("closed")
            await anyio.sleep(0.05)


async def slow_bodies(host: str, port: int, token: str, stop: anyio.Event, n: int = 300
                      ) -> FloodCounts:
    head = (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nAccept: {ACCEPT}\r\n"
            "Content-Length: 100000\r\n\r\n{").encode()
    counts = FloodCounts()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(_trickle, host, port, head, stop, counts)
    return counts


async def half_requests(host: str, port: int, stop: anyio.Event, n: int = 300) -> FloodCounts:
    head = f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode()
    counts = FloodCounts()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(_trickle, host, port, head, stop, counts)
    return counts


REFUSED = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file",'
           b'"arguments":{"path":"x\\udcff"}}}')


async def refused_in_flight(url: str, token: str, stop: anyio.Event, n: int = 300
                            ) -> FloodCounts:
    counts = FloodCounts()
    limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as client:
        session = await open_session(client, url, token)

        async def worker(i: int) -> None:
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    resp = await client.post(url, content=REFUSED % (i * 1_000_000 + k),
                                             headers=headers_for(token, session))
                    counts.note(resp.status_code)  # and again at once, Retry-After or not
                except httpx2.HTTPError as exc:
                    counts.note(type(exc).__name__)
                    await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(worker, i)
    return counts


async def duplicate_ids(url: str, token: str, stop: anyio.Event, copies: int = 8
                        ) -> FloodCounts:
    """Each round: a 1 s call with id R, then `copies` requests with id R while it runs."""
    counts = FloodCounts()
    async with httpx2.AsyncClient(timeout=60) as client:
        session = await open_session(client, url, token)
        request_id = 1000
        while not stop.is_set():
            request_id += 1
            first = call_body(request_id, "run_command", {"command": "sleep 1", "wait_s": 5})

            async def slow(body: bytes = first) -> None:
                resp = await client.post(url, content=body, headers=headers_for(token, session))
                counts.note(f"first:{resp.status_code}")
                counts.note("first answered" if message_of(resp) else "first unanswered")

            async def copy(n: int, rid: int = request_id) -> None:
                await anyio.sleep(0.2 + 0.01 * n)
                body = call_body(rid, "budget_status", {})
                resp = await client.post(url, content=body, headers=headers_for(token, session))
                answer = message_of(resp)
                counts.note(f"copy:{resp.status_code}")
                counts.note("copy answered" if answer and answer.get("id") == rid
                            else "copy unanswered")

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow)
                    for n in range(copies):
                        tg.start_soon(copy, n)
            except httpx2.HTTPError as exc:
                counts.note(type(exc).__name__)
    return counts


def message_of(resp: httpx2.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of a response, whether JSON or an SSE stream."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if isinstance(message, dict) and "jsonrpc" in message:
                    return message
        return None
    try:
        message = resp.json()
    except ValueError:
        return None
    return message if isinstance(message, dict) and "jsonrpc" in message else None


class Victim:
    """Another run's real MCP client: `run_command true`, timed."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url, self.token, self.timeout_s = url, token, timeout_s

    async def latencies(self, stop: anyio.Event | None = None, n: int | None = None,
                        pause_s: float = 0.05) -> tuple[list[float], int]:
        """Seconds per call, until `stop` or `n` calls; and how many got no answer in time
        (a failed call counts as unanswered, at the timeout)."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        times: list[float] = []
        failed = 0
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"},
                                      timeout=self.timeout_s) as http, \
                Client(streamable_http_client(self.url, http_client=http),
                       mode="legacy") as client:
            while (n is None or len(times) < n) and not (stop and stop.is_set()):
                started = time.monotonic()
                ok = False
                with anyio.move_on_after(self.timeout_s):
                    try:
                        r = await client.call_tool("run_command",
                                                   {"command": "true", "wait_s": 20})
                        ok = not r.is_error and r.structured_content["exit_code"] == 0
                    except Exception:
                        ok = False
                times.append(time.monotonic() - started)
                failed += not ok
                await anyio.sleep(pause_s)
        return times, failed


@dataclass
class ProcessProbe:
    """A process's resident memory (MB) and open descriptors, read from /proc."""

    pid: int
    peak_rss_mb: float = 0.0
    peak_fds: int = 0

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def sample(self) -> tuple[float, int]:
        rss, fds = self.rss_mb(), self.fds()
        self.peak_rss_mb, self.peak_fds = max(self.peak_rss_mb, rss), max(self.peak_fds, fds)
        return rss, fds

    async def watch(self, stop: anyio.Event, every_s: float = 0.25) -> None:
        while not stop.is_set():
            self.sample()
            with anyio.move_on_after(every_s):
                await stop.wait()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _flood_main(name: str, url: str, token: str, seconds: float) -> dict[str, Any]:
    """One flood for `seconds`, in a process of its own (the attacker's CPU is not the
    victim's client's): its counts."""
    port = int(url.split(":")[2].split("/")[0])
    stop = anyio.Event()
    out: dict[str, Any] = {}

    async def run() -> None:
        if name == "initialize":
            out.update((await initialize_loop(url, token, stop)).statuses)
        elif name == "slow-bodies":
            async def bodies() -> None:
                out["bodies"] = (await slow_bodies("127.0.0.1", port, token, stop)).statuses

            async def halves() -> None:
                out["halves"] = (await half_requests("127.0.0.1", port, stop)).statuses

            async with anyio.create_task_group() as tg:
                tg.start_soon(bodies)
                tg.start_soon(halves)
        elif name == "refused":
            out.update((await refused_in_flight(url, token, stop)).statuses)
        else:
            out.update((await duplicate_ids(url, token, stop)).statuses)

    finished = anyio.Event()

    async def run_then_say() -> None:
        await run()
        finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_then_say)
        await anyio.sleep(seconds)
        stop.set()
        with anyio.move_on_after(60):  # its last requests end (or a hung server is left)
            await finished.wait()
        tg.cancel_scope.cancel()
    return out


if __name__ == "__main__":  # python http_floods.py NAME URL TOKEN SECONDS
    import sys

    print(json.dumps(anyio.run(_flood_main, sys.argv[1], sys.argv[2], sys.argv[3],
                               float(sys.argv[4]))))
