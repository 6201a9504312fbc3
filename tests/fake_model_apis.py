"""Fake model APIs: real local HTTP servers that speak each agent CLI's wire protocol.

The agent CLIs are driven end to end in tests without a network or an API key. Each server
answers from a script: one tool call per model turn, in order, then a final text. The turn is
derived from the conversation the CLI sends (how many tool results it carries), not from a
request counter, so side requests (titles, warm-ups, retries) do not shift the script. Every
request is recorded, so tests can read which tools the model was offered and what the tools
returned. Protocols: Anthropic Messages (Claude Code), OpenAI Responses (Codex CLI), Gemini
streamGenerateContent (Gemini CLI) and OpenAI chat completions (OpenCode's OpenAI-compatible
provider, OpenHands' LiteLLM), each as server-sent events.
"""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

Json = dict[str, Any]


@dataclass
class Step:
    """One scripted tool call, by the tool's bare MCP name (e.g. `run_command`)."""

    tool: str
    args: Json = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it was not JSON


def _sse(events: list[tuple[str | None, Json]]) -> bytes:
    out = []
    for name, data in events:
        if name:
            out.append(f"event: {name}\n")
        out.append(f"data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


class FakeModelApi:
    """Base class: a threaded HTTP server on 127.0.0.1 with a script and a request log."""

    protocol: ClassVar[str]

    def __init__(self, script: list[Step], final_text: str = "All done.",
                 model: str = "a2rl-fake-model") -> None:
        self.script, self.final_text, self.model = list(script), final_text, model
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModelApi:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- protocol hooks --------------------------------------------------------------------
    def is_model_call(self, method: str, path: str) -> bool:
        raise NotImplementedError

    def offered(self, body: Json) -> list[str]:
        """The tool names the request offers, as the model would call them."""
        raise NotImplementedError

    def results(self, body: Json) -> list[str]:
        """The tool results the request carries back, oldest first, as text."""
        raise NotImplementedError

    def reply(self, body: Json, step: Step | None, turn: int,
              path: str = "") -> tuple[str, bytes]:
        """Content type and body answering one model call: `step`'s call, or the final text."""
        raise NotImplementedError

    def other(self, method: str, path: str) -> tuple[int, str, bytes]:
        return 404, "application/json", b'{"error": {"message": "not found"}}'

    # -- what tests read -------------------------------------------------------------------
    def model_calls(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests
                    if self.is_model_call(r.method, r.path) and isinstance(r.body, dict)]

    def offered_tools(self) -> list[str]:
        """Tools offered in the first model call that offered any."""
        for r in self.model_calls():
            names = self.offered(r.body)
            if names:
                return names
        return []

    def tool_results(self) -> list[str]:
        """The tool results of the last model call (it carries the whole conversation)."""
        calls = self.model_calls()
        return self.results(calls[-1].body) if calls else []

    def resolve(self, offered: list[str], tool: str) -> str:
        """The offered name of a bare MCP tool name (`run_command` -> `mcp__a2rl__run_command`)."""
        for name in offered:
            if name == tool or name.endswith("_" + tool):
                return name
        return tool

    # -- the HTTP handler ------------------------------------------------------------------
    def _handle(self, method: str, path: str, headers: dict[str, str],
                raw: bytes) -> tuple[int, str, bytes]:
        encoding = headers.get("content-encoding", "")
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding == "zstd":
            import zstandard  # type: ignore[import-not-found]

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
        if not self.is_model_call(method, path) or not isinstance(body, dict):
            return self.other(method, path)
        turn = len(self.results(body))
        offered = self.offered(body)
        step = self.script[turn] if offered and turn < len(self.script) else None
        if step is not None:
            step = Step(self.resolve(offered, step.tool), step.args)
        ctype, data = self.reply(body, step, turn, path)
        return 200, ctype, data

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:  # quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    status, ctype, data = api._handle(self.command, self.path, headers, raw)
                except Exception as exc:  # a broken fake must show up, not hang the CLI
                    status, ctype = 500, "application/json"
                    data = json.dumps({"error": {"message": f"fake server: {exc!r}"}}).encode()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _serve

        return Handler


class FakeAnthropic(FakeModelApi):
    """Anthropic Messages: `POST /v1/messages` (streamed or not); `HEAD /` answers 404."""

    protocol = "anthropic"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?")[0] == "/v1/messages"

    def offered(self, body: Json) -> list[str]:
        return [t["name"] for t in body.get("tools") or [] if "name" in t]

    def results(self, body: Json) -> list[str]:
        out = []
        for msg in body.get("messages") or []:
            content = msg.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, list):
                        inner = " ".join(p.get("text", "") for p in inner)
                    out.append(str(inner))
        return out

    def reply(self, body: Json, step: Step | None, turn: int,
              path: str = "") -> tuple[str, bytes]:
        usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if step is not None:
            block: Json = {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": step.tool,
                           "input": {}}
            delta: Json = {"type": "input_json_delta", "partial_json": json.dumps(step.args)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": self.final_text}
            stop = "end_turn"
        message = {"id": f"msg_{turn:04d}", "type": "message", "role": "assistant",
                   "model": body.get("model", self.model), "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            full = dict(block, input=step.args) if step else dict(block, text=self.final_text)
            return "application/json", json.dumps(
                dict(message, content=[full], stop_reason=stop)).encode()
        return "text/event-stream", _sse([
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 5},
                               "delta": {"stop_reason": stop, "stop_sequence": None}}),
            ("message_stop", {"type": "message_stop"}),
        ])


class FakeResponses(FakeModelApi):
    """OpenAI Responses: `POST /v1/responses`; MCP tools arrive grouped in a namespace."""

    protocol = "openai-responses"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?")[0].endswith("/responses")

    def offered(self, body: Json) -> list[str]:
        names = []
        for tool in body.get("tools") or []:
            if tool.get("type") == "namespace":
                names += [f"{tool['name']}/{t['name']}" for t in tool.get("tools", [])]
            elif "name" in tool:
                names.append(tool["name"])
            else:
                names.append(tool.get("type", "?"))
        return names

    def resolve(self, offered: list[str], tool: str) -> str:
        for name in offered:
            if name.endswith("/" + tool):
                return name
        return tool

    def results(self, body: Json) -> list[str]:
        items = body.get("input")
        return [str(i.get("output")) for i in items if isinstance(i, dict)
                and i.get("type") == "function_call_output"] if isinstance(items, list) else []

    def other(self, method: str, path: str) -> tuple[int, str, bytes]:
        if path.split("?")[0].endswith("/models"):
            return 200, "application/json", json.dumps({"object": "list", "data": [],
                                                        "models": []}).encode()
        return super().other(method, path)

    def reply(self, body: Json, step: Step | None, turn: int,
              path: str = "") -> tuple[str, bytes]:
        rid = f"resp_{turn:04d}"
        if step is not None:
            namespace, _, name = step.tool.rpartition("/")
            item: Json = {"type": "function_call", "id": f"fc_{turn:04d}",
                          "call_id": f"call_{turn:04d}", "name": name,
                          "arguments": json.dumps(step.args), "status": "completed"}
            if namespace:
                item["namespace"] = namespace
        else:
            item = {"type": "message", "id": f"msg_{turn:04d}", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": self.final_text,
                                 "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        base = {"id": rid, "object": "response", "model": body.get("model", self.model)}
        return "text/event-stream", _sse([
            ("response.created", {"type": "response.created",
                                  "response": dict(base, status="in_progress", output=[])}),
            ("response.output_item.added", {"type": "response.output_item.added",
                                            "output_index": 0, "item": item}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": dict(
                base, status="completed", output=[item], usage=usage)}),
        ])


class FakeGemini(FakeModelApi):
    """Gemini: `POST /v1beta/models/MODEL:streamGenerateContent?alt=sse` (and the unary one)."""

    protocol = "gemini"

    def is_model_call(self, method: str, path: str) -> bool:
        p = path.split("?")[0]
        return method == "POST" and (p.endswith(":streamGenerateContent")
                                     or p.endswith(":generateContent"))

    def offered(self, body: Json) -> list[str]:
        return [d["name"] for t in body.get("tools") or []
                for d in t.get("functionDeclarations") or [] if "name" in d]

    def results(self, body: Json) -> list[str]:
        return [json.dumps(p["functionResponse"].get("response"))
                for c in body.get("contents") or [] for p in c.get("parts") or []
                if "functionResponse" in p]

    def other(self, method: str, path: str) -> tuple[int, str, bytes]:
        if path.split("?")[0].endswith(":countTokens"):
            return 200, "application/json", b'{"totalTokens": 10}'
        return super().other(method, path)

    def reply(self, body: Json, step: Step | None, turn: int,
              path: str = "") -> tuple[str, bytes]:
        part: Json = ({"functionCall": {"name": step.tool, "args": step.args}}
                      if step is not None else {"text": self.final_text})
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                   "totalTokenCount": 15},
                 "modelVersion": self.model}
        if path.split("?")[0].endswith(":generateContent"):
            return "application/json", json.dumps(chunk).encode()
        return "text/event-stream", _sse([(None, chunk)])


class FakeChatCompletions(FakeModelApi):
    """OpenAI chat completions: `POST /v1/chat/completions`, streamed (SSE ending in `[DONE]`)
    or not; `GET /v1/models` lists the model."""

    protocol = "openai-chat"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?")[0].endswith("/chat/completions")

    def offered(self, body: Json) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools") or []
                if isinstance(t, dict) and isinstance(t.get("function"), dict)
                and "name" in t["function"]]

    def results(self, body: Json) -> list[str]:
        out = []
        for msg in body.get("messages") or []:
            if isinstance(msg, dict) and msg.get("role") == "tool":
                content = msg.get("content")
                if isinstance(content, list):
                    content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
                out.append(str(content))
        return out

    @staticmethod
    def _properties(body: Json, tool: str) -> Json:
        """The parameters the offered tool `tool` declares."""
        for t in body.get("tools") or []:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name") == tool:
                return (fn.get("parameters") or {}).get("properties") or {}
        return {}

    def other(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method == "GET" and path.split("?")[0].endswith("/models"):
            return 200, "application/json", json.dumps({"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "a2rl"}]}).encode()
        return super().other(method, path)

    def reply(self, body: Json, step: Step | None, turn: int,
              path: str = "") -> tuple[str, bytes]:
        if step is not None and "security_risk" in self._properties(body, step.tool):
            # OpenHands' security analyzer asks the model to rate each action, as a model would
            step = Step(step.tool, {**step.args, "security_risk": "LOW"})
        base = {"id": f"chatcmpl-{turn:04d}", "created": 0,
                "model": body.get("model", self.model)}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if step is not None:
            call = {"id": f"call_{turn:04d}", "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(step.args)}}
            message: Json = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": self.final_text}
            finish = "stop"
        if not body.get("stream"):
            return "application/json", json.dumps(dict(
                base, object="chat.completion", usage=usage, choices=[
                    {"index": 0, "message": message, "finish_reason": finish}])).encode()
        delta = dict(message)
        if step is not None:
            delta["tool_calls"] = [dict(call, index=0)]
        chunks = [dict(base, object="chat.completion.chunk", choices=[
                      {"index": 0, "delta": delta, "finish_reason": None}]),
                  dict(base, object="chat.completion.chunk", choices=[
                      {"index": 0, "delta": {}, "finish_reason": finish}])]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(dict(base, object="chat.completion.chunk", choices=[], usage=usage))
        return "text/event-stream", _sse([(None, c) for c in chunks]) + b"data: [DONE]\n\n"
