"""A real, local OpenAI-compatible chat completions server that plays an AlpacaEval judge.

It reads the two outputs out of the AlpacaEval prompt (identifiers `m` and `M`) and answers with
a policy: `prefer_marker("GOOD")` picks the output containing the marker (the longer one when
neither or both do), `always("m")` always prefers the output shown first, `answer("...")`
sends a fixed text. Before the policy, queued faults are served in order: `fail(status, times)`
answers HTTP errors, `malformed(text, times)` answers a text that is not a verdict. Every request
body and its headers are recorded (header names in lower case).

`http.server` in a daemon thread on 127.0.0.1 with an ephemeral port; `close()` (or leaving the
`with` block) stops it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OUTPUT_RE = re.compile(r'"model_identifier": "(m|M)",\s*"output": """(.*?)"""\s*}', re.DOTALL)

Policy = Callable[[dict[str, str]], str]


FENCED_RE = re.compile(r"<model-output-([0-9a-f]{16})>(.*)</model-output-\1>", re.DOTALL)


def unfence(text: str) -> str:
    """An output's text without the judge's per-request fence (a2rl.tasks.untrusted), as a
    judge that heeds the fence reads it; unfenced text as it is."""
    m = FENCED_RE.fullmatch(text)
    return m.group(2) if m else text


def unfence_all(text: str) -> str:
    """`text` with every fenced output replaced by its content: a prompt as the harness, which
    fences nothing, would have written it."""
    return re.sub(r"<model-output-([0-9a-f]{16})>(.*?)</model-output-\1>",
                  lambda m: m.group(2), text, flags=re.DOTALL)


def shown_outputs(body: dict[str, Any]) -> dict[str, str]:
    """{"m": first output, "M": second output} from a judge request body."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return {ident: unfence(text) for ident, text in OUTPUT_RE.findall(user)}


def prefer_marker(marker: str) -> Policy:
    """Prefer the output containing `marker`; when neither or both do, prefer the longer."""
    def policy(outputs: dict[str, str]) -> str:
        has = {k: marker in v for k, v in outputs.items()}
        if has["m"] != has["M"]:
            return "m" if has["m"] else "M"
        return "m" if len(outputs["m"]) >= len(outputs["M"]) else "M"
    return policy


def always(identifier: str) -> Policy:
    return lambda outputs: identifier


def answer(text: str) -> Policy:
    return lambda outputs: text


class FakeJudge:
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or prefer_marker("GOOD")
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._faults: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, text = judge._respond(self.path, body, headers)
                payload = json.dumps(
                    {"id": "fake", "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}]}
                    if status == 200 else {"error": {"message": text}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # --- script -----------------------------------------------------------------------------
    def fail(self, status: int, times: int = 1) -> FakeJudge:
        with self._lock:
            self._faults += [("status", status)] * times
        return self

    def malformed(self, text: str = "Output (a)", times: int = 1) -> FakeJudge:
        with self._lock:
            self._faults += [("text", text)] * times
        return self

    def clear_faults(self) -> FakeJudge:
        with self._lock:
            self._faults.clear()
        return self

    def _respond(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            fault = self._faults.pop(0) if self._faults else None
        if not path.endswith("/chat/completions"):
            return 404, f"no route {path}"
        if fault is not None:
            kind, value = fault
            return (value, "scripted failure") if kind == "status" else (200, value)
        return 200, self.policy(shown_outputs(body))

    # --- lifecycle --------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
