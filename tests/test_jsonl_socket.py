"""The one newline-JSON unix-socket client (`a2rl.jsonl_socket`) against a real server: a
result, a refusal, a path longer than a socket address holds, and nobody listening."""

from __future__ import annotations

import socketserver
import threading
from pathlib import Path

import pytest

from a2rl import jsonl_socket


class _Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline()
        if b'"refuse"' in line:
            self.wfile.write(b'{"ok": false, "error": "refused: too many"}\n')
        else:
            self.wfile.write(b'{"ok": true, "result": ' + line.strip() + b"}\n")


def test_call_answers_refuses_and_reaches_a_long_path(tmp_path: Path) -> None:
    folder = tmp_path / ("d" * 60) / ("e" * 60)
    folder.mkdir(parents=True)
    path = folder / "s.sock"
    assert len(str(path).encode()) > 108  # too long for a socket address
    server = socketserver.UnixStreamServer(f"{tmp_path}/s.sock", _Echo)
    (tmp_path / "s.sock").rename(path)  # bound at a short name, reached at the long one
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert jsonl_socket.call(path, {"query": "x", "k": 2}, timeout=5) == {"query": "x",
                                                                              "k": 2}
        with pytest.raises(jsonl_socket.ServiceError, match="refused: too many"):
            jsonl_socket.call(path, {"refuse": 1}, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(OSError):  # nobody listens: the caller says what that means
        jsonl_socket.call(tmp_path / "none.sock", {}, timeout=1)
