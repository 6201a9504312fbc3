"""A real, local OpenAI-compatible chat completions server that answers from a script.

Tests of the `llm` agent go through real HTTP (httpx, status codes, retries) without a model:
each request gets the script's next step. A step is

- a final text (`"done"`): an assistant message without tool calls;
- a `Call` or a list of them: one assistant message with those tool calls. A call's arguments
  are a dict, a raw string (sent as is, e.g. malformed JSON) or a callable taking the request's
  messages (to read a job or submission id out of an earlier tool result);
- a callable taking the messages and returning one of the above (decided per request);
- a `Poll`: the same call again and again while `until(last tool text)` is false, then the
  next step (a training job polled until it ends, a score polled until graded).

`fail(status, times, retry_after=None)` makes the next requests fail with that status (and a
`Retry-After` header when given) before the script goes on; `fail(200)` is a 200 whose body is no
chat completion. With `api_key`, every request without that bearer key gets OpenAI's 401
("Incorrect API key provided"). `GET /v1/models` lists the model, as OpenAI's API does (the
`llm` agent's check before a run).
Every request body, its headers and every tool call issued are recorded. When the script runs
out the server answers a final text and sets `overrun`.

It is `http.server` in a daemon thread on 127.0.0.1 with an ephemeral port, so it needs nothing
beyond the standard library; `close()` (or leaving the `with` block) stops it and joins the thread.
"""

from __future__ import annotations

import json
import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Messages = list[dict[str, Any]]
Args = dict[str, Any] | str | Callable[[Messages], dict[str, Any]]


@dataclass
class Call:
    name: str
    arguments: Args = field(default_factory=dict)


@dataclass
class Poll:
    """Repeat `call` while `until(the text of the last tool result)` is false."""

    call: Call
    until: Callable[[str], bool]
    issued: int = 0


Reply = str | Call | list[Call]
Step = Reply | Poll | Callable[[Messages], Reply]


def tool_texts(messages: Messages) -> list[str]:
    """The contents of the tool messages, oldest first."""
    return [m.get("content") or "" for m in messages if m.get("role") == "tool"]


def last_tool_text(messages: Messages) -> str:
    texts = tool_texts(messages)
    return texts[-1] if texts else ""


def json_field(text: str, key: str) -> str | None:
    """The first string value of `key` in a tool result's JSON text.

    A regular expression, not json.loads: the agent may have cut a long result (a training
    log) in the middle, and the fields we need come before the output anyway.
    """
    match = re.search(rf'"{re.escape(key)}":\s*"([^"]*)"', text)
    return match.group(1) if match else None


def latest(messages: Messages, key: str) -> str:
    """The value of `key` in the most recent tool result that has it."""
    for text in reversed(tool_texts(messages)):
        value = json_field(text, key)
        if value is not None:
            return value
    raise KeyError(f"no tool result has {key!r}")


class _Server(ThreadingHTTPServer):
    # socketserver's backlog is 5: clients connecting at once on a loaded machine (16 threads
    # sharing one client) then saw connections fail and retried, which is no client's fault
    request_queue_size = 128


class FakeOpenAI:
    """The server; use as a context manager. `base_url` ends in /v1."""

    def __init__(self, steps: list[Step], model: str = "fake-model",
                 cost: float | None = None, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.steps = list(steps)
        self.cost = cost  # USD per response, as `usage.cost` (as OpenRouter reports it)
        self.model = model
        self.cursor = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.issued: list[dict[str, Any]] = []  # every tool call sent to the agent
        self.errors: list[str] = []  # exceptions raised by the script itself
        self.overrun = False
        self.usages: list[dict[str, Any]] = []  # the usage of every answer sent
        self._failures: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._n = 0
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def fail(self, status: int, times: int = 1, retry_after: str | None = None) -> None:
        with self._lock:
            self._failures.extend([(status, retry_after)] * times)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- answering --

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages: Messages = body.get("messages") or []
        reply = self._next_reply(messages)
        self._n += 1
        if isinstance(reply, str):
            message: dict[str, Any] = {"role": "assistant", "content": reply}
            finish = "stop"
        else:
            calls = [reply] if isinstance(reply, Call) else reply
            tool_calls = []
            for i, c in enumerate(calls):
                args = c.arguments(messages) if callable(c.arguments) else c.arguments
                raw = args if isinstance(args, str) else json.dumps(args)
                tc = {"id": f"call_{self._n}_{i}", "type": "function",
                      "function": {"name": c.name, "arguments": raw}}
                tool_calls.append(tc)
                self.issued.append({"name": c.name, "arguments": raw})
            message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
            finish = "tool_calls"
        usage: dict[str, Any] = {"prompt_tokens": len(json.dumps(messages)) // 4,
                                 "completion_tokens": 10, "total_tokens": 0}
        if self.cost is not None:
            usage["cost"] = self.cost
        self.usages.append(usage)
        return {"id": f"chatcmpl-{self._n}", "object": "chat.completion",
                "created": int(time.time()), "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage}

    def _next_reply(self, messages: Messages) -> Reply:
        while self.cursor < len(self.steps):
            step = self.steps[self.cursor]
            if isinstance(step, Poll):
                if step.issued and step.until(last_tool_text(messages)):
                    self.cursor += 1
                    continue
                step.issued += 1
                return step.call
            self.cursor += 1
            if callable(step) and not isinstance(step, Call):
                return step(messages)
            return step
        self.overrun = True
        return "the script has ended"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict[str, Any],
                      retry_after: str | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused_key(self) -> bool:
                """OpenAI's answer to a missing or wrong key, when the server has one."""
                sent = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if fake.api_key is None or sent == fake.api_key:
                    return False
                self._send(401, {"error": {
                    "message": "Incorrect API key provided: " + (sent[:3] + "***" if sent
                                                                 else "none"),
                    "type": "invalid_request_error", "code": "invalid_api_key"}})
                return True

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                elif not self._refused_key():
                    self._send(200, {"object": "list", "data": [
                        {"id": fake.model, "object": "model", "owned_by": "fake"}]})

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                if self._refused_key():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "invalid JSON body"}})
                    return
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if fake._failures:
                        status, retry_after = fake._failures.pop(0)
                        self._send(status, {"error": {"message": f"injected {status}"}},
                                   retry_after)
                        return
                    try:
                        payload = fake.answer(body)
                    except Exception:
                        fake.errors.append(traceback.format_exc())
                        self._send(500, {"error": {"message": traceback.format_exc()}})
                        return
                self._send(200, payload)

        return Handler
