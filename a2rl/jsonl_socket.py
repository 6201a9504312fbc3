"""One JSON line each way over a unix stream socket: the client side every caller shares.

Three callers speak this protocol to a server of their own: the host to a run's sandbox
supervisor (`a2rl.sandbox.client`, one request per connection, a token in it), host tools
to a run's services (`a2rl.server.services`), and a task's environment code inside the sandbox
to those services (DeepSearchQA's search: `tasks/deepsearchqa/backend.py`). A request is one
JSON object and a newline; the answer is one JSON line, `{"ok": true, "result": ...}` or
`{"ok": false, "error": "..."}`. What each caller makes of a failure differs (a `SandboxError`,
a `RuntimeError` the agent's code reads), so the steps are separate functions: `connect`,
`exchange`, `call`.

Standard library only, and no import of a2rl: the same file is written into a sandbox's `env/`
(as `a2rl_socket.py`) for the environment code there, which sees no a2rl package. The
supervisor's own server side stays in its folder (standard library only too).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

#: Unix socket paths are limited to 108 bytes (with the terminating NUL); a longer one is
#: reached through its folder's descriptor.
MAX_PATH_BYTES = 100
#: How long `connect` waits between tries while the server's accept queue is full.
FULL_QUEUE_WAIT_S = 0.02


class ServiceError(RuntimeError):
    """The server answered `{"ok": false, "error": ...}`: the message is its error."""


def connect(path: Path | str, timeout: float, *, full_queue_tries: int = 1) -> socket.socket:
    """A connected socket to `path`, with `timeout` on every later operation. While the
    server's accept queue is full (EAGAIN), try again up to `full_queue_tries` times in all
    (the supervisor's client waits a little; the sandbox's does not, so that a flood of
    connections is refused at once). Raises what `socket.connect` raises."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        for attempt in range(max(1, full_queue_tries)):
            try:
                _connect_once(sock, Path(path))
                return sock
            except BlockingIOError:
                if attempt + 1 >= full_queue_tries:
                    raise
                time.sleep(FULL_QUEUE_WAIT_S)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
    except BaseException:
        sock.close()
        raise


def _connect_once(sock: socket.socket, path: Path) -> None:
    name = str(path)
    if len(name.encode()) < MAX_PATH_BYTES:
        sock.connect(name)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


def exchange(sock: socket.socket, request: dict[str, Any]) -> bytes:
    """Send `request` as one JSON line on `sock` and read the answer's line; b"" when the
    server closed the connection without answering. Socket errors (a timeout) are raised."""
    sock.sendall(json.dumps(request).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def answer_of(data: bytes) -> dict[str, Any]:
    """The answer line as a JSON object; ValueError when it is none (garbage, or nothing)."""
    answer = json.loads(data or b"{}")
    if not isinstance(answer, dict):
        raise ValueError(f"not a JSON object: {data[:200]!r}")
    return answer


def call(path: Path | str, request: dict[str, Any], timeout: float = 60.0) -> Any:
    """One request on a fresh connection: the answer's `result`, or `ServiceError` with the
    server's error (or "no answer" when it closed without one)."""
    with connect(path, timeout) as sock:
        data = exchange(sock, request)
    answer = answer_of(data)
    if not answer.get("ok"):
        raise ServiceError(str(answer.get("error", "no answer")))
    return answer["result"]
