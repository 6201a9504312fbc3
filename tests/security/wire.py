"""Raw MCP wires for the protocol attacks: a real `a2rl serve` process fed bytes as they are.

`StdioWire` writes lines to `a2rl serve --run ID`'s stdin and reads its stdout; `HttpWire`
POSTs bodies to `a2rl serve --http` (real uvicorn) with the run's token and session. Both do
the legacy handshake first, then `send(raw)` returns the JSON-RPC message that answers it,
or fails the test when none comes within the timeout (a dropped message).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

from a2rl.settings import Settings

A2RL = str(Path(sys.executable).parent / "a2rl")
PROTOCOL = "2025-11-25"
TIMEOUT_S = 20.0
STARTUP_S = 120.0


def server_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url)
    return env


def _initialize(request_id: int = 0) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"}}}).encode()


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()


class StdioWire:
    def __init__(self, settings: Settings, run_id: str, log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen([A2RL, "serve", "--run", run_id], env=server_env(settings),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.buffer = b""
        self._write(_initialize())
        self._read_line(STARTUP_S)  # a loaded 2-core machine takes tens of seconds to import
        self._write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def _write(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def send(self, raw: bytes) -> dict[str, Any]:
        self._write(raw)
        return self._read_line()

    def _read_line(self, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no answer on stdio: the message was dropped"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"the stdio server exited (rc {self.proc.poll()})"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`a2rl serve --http` on a free loopback port."""

    def __init__(self, settings: Settings, log: Path, env: dict[str, str] | None = None) -> None:
        """`env`: more variables for the server (A2RL_HTTP_... settings)."""
        self.port = free_port()
        self.log = log.open("wb")
        self.proc = subprocess.Popen([A2RL, "serve", "--http", "--port", str(self.port)],
                                     env={**server_env(settings), **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        deadline = time.monotonic() + STARTUP_S
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
                return
            except httpx2.TransportError:
                assert self.proc.poll() is None, "the HTTP server exited"
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


class HttpWire:
    """One MCP session of one run on an `HttpServer`, spoken in raw POST bodies."""

    def __init__(self, server: HttpServer, token: str) -> None:
        self.server = server
        self.client = httpx2.Client(timeout=TIMEOUT_S, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        resp = self.client.post(server.url, content=_initialize())
        assert resp.status_code == 200, resp.text
        self.client.headers["mcp-session-id"] = resp.headers["mcp-session-id"]
        self.client.headers["mcp-protocol-version"] = PROTOCOL
        self.last_status = self.client.post(
            server.url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        ).status_code

    def send(self, raw: bytes) -> dict[str, Any]:
        resp = self.client.post(self.server.url, content=raw)
        self.last_status = resp.status_code
        message = message_of(resp)
        assert message is not None, f"no JSON-RPC answer over HTTP ({resp.status_code}): " \
                                    f"{resp.text[:300]}"
        return message

    def alive(self) -> bool:
        return self.server.alive()

    def close(self) -> None:
        self.client.close()


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
