"""The `llm` connector: our own minimal tool-calling agent over any OpenAI-compatible endpoint.

Agent CLIs bring their own loop, prompts and context management, which makes them hard to
compare with a plain model. This loop is deliberately small and fixed, so that a run measures
the driver model (`--model`, served by vLLM, llama.cpp, a hosted API, ...) rather than the
scaffold: the MCP server's instructions as the system message, the task prompt as the first user
message, our MCP tools offered as OpenAI function tools, and nothing else.

The loop (one *turn* is one chat completion request and the tool calls it asks for):

- POST {llm_base_url}/chat/completions, non-streaming, with `tool_choice: "auto"`.
- Every tool call of the answer goes through the MCP client, in order; its result comes back as a
  `tool` message (the JSON of the structured result, else the text). Arguments that are not a
  JSON object and unknown tool names get an error `tool` message instead, so that the model can
  correct itself: a bad call never ends the run.
- The loop stops when the model answers without tool calls (it says it is done), after
  `llm_max_turns` turns, or when the budget ends (a tool says "budget exhausted", the run has
  ended, or budget_status reports `exhausted`). The orchestrator also cancels it at the deadline.

Context policy (the transcript sent to the model stays bounded, whatever the run's length):

1. Each tool result is cut to `llm_tool_output_chars` characters (default 8000), keeping its head
   and its tail (the end of a training log matters most) around a "[... N chars truncated ...]"
   marker.
2. Before each request, when the messages' total size (characters of their JSON) exceeds
   `llm_context_chars` (default 100000), the oldest tool results are replaced, one at a time,
   by "[older tool output elided: N chars]" until the total fits. If that is not enough, the
   arguments and text of the oldest assistant messages are elided the same way. The system
   message, the first user message and the last `KEEP_RECENT_TURNS` turns are never touched, so
   the model always sees the rules, the task and what it just did.

Requests go through `a2rl.llm.AsyncChatClient`, under its one retry policy (transient failures:
transport errors, 408/409/429/5xx, a body that is no chat completion) with `llm_retries` retries
and `llm_backoff_s` as the first wait (honouring Retry-After); other statuses, or retries running
out, raise `LlmAgentError` with the status and the start of the body.

Options: `LlmAgentOptions` (typed, checked before the run; docs/agent-options.md): llm_base_url
(required), llm_api_key_env (default OPENAI_API_KEY; without that variable no Authorization
header is sent, for local servers; a variable named explicitly must be set), llm_max_turns,
llm_tool_output_chars, llm_context_chars, llm_retries, llm_backoff_s, llm_timeout_s,
llm_temperature and llm_max_tokens (both omitted unless given). Before the run the endpoint
gets one authenticated `GET /models`: 401, 403 or 404 refuse the run.

`LlmConnector.transcript` records what happened, for the orchestrator to store
(`recorded_transcript`, JSON lines that `parse_events` reads back for the viewer): one event per
message (`{"kind": "message", "message": ...}`, as sent, before any eliding) and per model
response (`{"kind": "response", "turn", "elapsed_s", "usage", "finish_reason", "model"}`), one per
retried request (`{"kind": "retry", ...}`), and a final `{"kind": "stop", "reason", "turns"}` with
reason done, max_turns, budget, spending_limit, cancelled or error. `stop_reason` and `turns` say
the same.

Spending limits (`AgentContext.limits`, `a2rl run --max-cost/--max-tokens`): before each request
the responses' usage so far is summed (tokens in and out; the cost the endpoint reported in
`usage.cost`, else the price table's for the model); once it has passed a limit the loop stops
with `spending_limit` (`limit_note` says which), so one response may go beyond it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import anyio
from mcp import Client
from pydantic import BaseModel, Field

import a2rl
from a2rl.llm import AsyncChatClient, Endpoint, RequestFailure, RetryPolicy
from a2rl.store.ledger import SpendLimit

from .base import AgentContext, BaseConnector
from .options import AgentOptions, AgentOptionsError
from .transcript import (
    RECOGNIZE_LINES,
    Message,
    Usage,
    arguments_of,
    bare_tool,
    count,
    driver_usage,
    json_lines,
    text_of,
)

KEEP_RECENT_TURNS = 2  # assistant messages (with their tool results) never elided
BUDGET_OVER_MARKERS = ("budget exhausted", "this run has ended")


class LlmAgentError(RuntimeError):
    """A clear, user-facing failure of the llm loop (configuration or model endpoint)."""


class LlmAgentOptions(AgentOptions):
    """Our own loop over an OpenAI-compatible chat completions endpoint (`--model` names the
    model it serves). `--llm-base-url` and `--llm-api-key-env` set the first two."""

    llm_base_url: str = Field("", description="the endpoint, e.g. http://127.0.0.1:8000/v1 "
                              "(required); checked before the run with an authenticated "
                              "GET /models: 401, 403 and 404 refuse the run")
    llm_api_key_env: str = Field("OPENAI_API_KEY", description="the variable holding the "
                                 "endpoint's key; unset, no key is sent (local servers); "
                                 "named explicitly, it must be set")
    llm_max_turns: int = Field(200, ge=1, description="chat requests at most; a run stopped "
                               "there ends as its budget's end (turn limit)")
    llm_tool_output_chars: int = Field(8000, ge=200, description="each tool result is cut "
                                       "to this many characters (head and tail kept)")
    llm_context_chars: int = Field(100_000, ge=1000, description="the messages' size above "
                                   "which the oldest tool outputs, then arguments, are elided")
    llm_retries: int = Field(4, ge=0, description="retries of a transient failure (transport, "
                             "408, 409, 429, 5xx)")
    llm_backoff_s: float = Field(1.0, ge=0, description="the first wait before a retry "
                                 "(doubling, or the server's Retry-After)")
    llm_timeout_s: float = Field(600.0, gt=0, description="timeout of one request, and of "
                                 "one tool call")
    llm_temperature: float | None = Field(None, ge=0, description="sampling temperature; "
                                          "empty: not sent (the server's default)")
    llm_max_tokens: int | None = Field(None, ge=1, description="max_tokens of each request; "
                                       "empty: not sent")


class LlmOptions(BaseModel):
    """The loop's knobs, parsed from the string options of `AgentContext.options`."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_turns: int = Field(200, ge=1)
    tool_output_chars: int = Field(8000, ge=200)
    context_chars: int = Field(100_000, ge=1000)
    retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    timeout_s: float = Field(600.0, gt=0)
    temperature: float | None = None
    max_tokens: int | None = None

    @classmethod
    def from_context(cls, ctx: AgentContext) -> LlmOptions:
        opts = ctx.options
        if not ctx.model:
            raise LlmAgentError("the llm agent needs a model: pass --model NAME (the model name "
                                "the OpenAI-compatible endpoint serves)")
        try:
            given = LlmAgentOptions.parse("llm", opts)
        except AgentOptionsError as exc:
            raise LlmAgentError(f"invalid llm option: {exc}") from None
        base = given.llm_base_url.strip()
        if not base:
            raise LlmAgentError("the llm agent needs an endpoint: set the llm_base_url option "
                                "(e.g. http://127.0.0.1:8000/v1)")
        values = {name.removeprefix("llm_"): value for name, value in given
                  if name not in ("llm_base_url",)}
        return cls(base_url=base.rstrip("/"), model=ctx.model, **values)

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.base_url, model=self.model, api_key_env=self.api_key_env)

    def policy(self) -> RetryPolicy:
        return RetryPolicy(max_retries=self.retries, backoff_s=self.backoff_s,
                           timeout_s=self.timeout_s)


# --- pure helpers (unit-tested directly) ---------------------------------------------------

def truncate_middle(text: str, limit: int) -> str:
    """Cut `text` to about `limit` chars, keeping head and tail (a log's end matters most)."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    head = limit // 2
    return f"{text[:head]}\n[... {cut} chars truncated ...]\n{text[len(text) - (limit - head):]}"


def message_size(message: Mapping[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False))


def total_size(messages: list[dict[str, Any]]) -> int:
    return sum(message_size(m) for m in messages)


def trim_context(messages: list[dict[str, Any]], budget_chars: int,
                 keep_recent_turns: int = KEEP_RECENT_TURNS) -> int:
    """Elide old content in place until the messages fit `budget_chars`; returns chars saved.

    Replaced messages are new dicts, so that a transcript holding the originals is unchanged.
    Protected: the leading system/user messages and everything from the
    `keep_recent_turns`-th last assistant message on.
    """
    size = total_size(messages)
    if size <= budget_chars:
        return 0
    start = 0
    while start < len(messages) and messages[start]["role"] in ("system", "user"):
        start += 1
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    end = (assistants[-keep_recent_turns] if len(assistants) >= keep_recent_turns
           else start if keep_recent_turns > 0 else len(messages))
    saved = 0
    # pass 1: tool outputs, oldest first; pass 2: assistant arguments and text, oldest first
    for role in ("tool", "assistant"):
        for i in range(start, end):
            if size <= budget_chars:
                return saved
            m = messages[i]
            if m["role"] != role or m.get("_elided"):
                continue
            new = _elide(m)
            delta = message_size(m) - message_size(new)
            if delta > 0:
                messages[i] = new
                size -= delta
                saved += delta
    return saved


def _elide(m: dict[str, Any]) -> dict[str, Any]:
    if m["role"] == "tool":
        n = len(m.get("content") or "")
        return {**m, "content": f"[older tool output elided: {n} chars]", "_elided": True}
    new = {**m, "_elided": True}
    if m.get("content"):
        new["content"] = f"[older assistant text elided: {len(m['content'])} chars]"
    if m.get("tool_calls"):
        new["tool_calls"] = [
            {**tc, "function": {**tc["function"], "arguments": json.dumps(
                {"_elided": f"older arguments elided: "
                            f"{len(tc['function'].get('arguments') or '')} chars"})}}
            for tc in m["tool_calls"]]
    return new


def wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent: our private bookkeeping keys (leading underscore) removed."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def result_text(result: Any) -> str:
    """A tool result as the model reads it: the structured JSON if any, else the text parts."""
    if getattr(result, "structured_content", None) is not None and not result.is_error:
        return json.dumps(result.structured_content, ensure_ascii=False)
    text = "\n".join(getattr(p, "text", "") or "" for p in (result.content or []))
    return f"Error: {text}" if result.is_error else text


def openai_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI function tools (parameters = the MCP input schema)."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description or t.title or t.name,
        "parameters": t.input_schema or {"type": "object", "properties": {}}}} for t in tools]


def budget_over(name: str, text: str, structured: Any) -> bool:
    if name == "budget_status" and isinstance(structured, dict) and structured.get("exhausted"):
        return True
    low = text.lower()
    return any(marker in low for marker in BUDGET_OVER_MARKERS)


# --- its transcript -------------------------------------------------------------------------

def recognizes(docs: list[dict[str, Any]]) -> bool:
    """The loop's events: a `kind` of message, response, stop or retry."""
    return any(d.get("kind") in ("message", "response", "stop", "retry")
               for d in docs[:RECOGNIZE_LINES])


def parse_events(docs: list[dict[str, Any]]) -> list[Message]:
    """The loop's recorded events as messages: the chat messages as sent, each tool call
    with the result the model was given, retries and the stop."""
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        kind = d.get("kind")
        if kind == "message":
            msg = d.get("message") or {}
            role = msg.get("role")
            if role in ("system", "user", "assistant"):
                if text_of(msg.get("content")).strip():
                    out.append(Message(role=role, text=text_of(msg.get("content"))))
                for tc in msg.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    m = Message(role="tool", tool=bare_tool(str(fn.get("name"))),
                                call_key=str(tc.get("id")),
                                arguments=arguments_of(fn.get("arguments")))
                    by_key[str(tc.get("id"))] = m
                    out.append(m)
            elif role == "tool":
                m2 = by_key.get(str(msg.get("tool_call_id")))
                if m2 is not None:
                    m2.result = text_of(msg.get("content"))
        elif kind == "retry":
            out.append(Message(role="error", text=f"retry {d.get('attempt')}: "
                                                  f"{text_of(d.get('error'))}"))
        elif kind == "stop":
            reason = str(d.get("reason"))
            out.append(Message(role="error" if reason == "error" else "result",
                               text=f"stopped: {reason} after {d.get('turns')} turns"))
    return out


# --- the connector --------------------------------------------------------------------------

def _cost(x: Any) -> float | None:
    """A response's `usage.cost` (USD; OpenRouter and other gateways report it), else None."""
    ok = isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x < float("inf")
    return float(x) if ok else None


def events_usage(docs: list[dict[str, Any]]) -> Usage | None:
    """The API's usage of every `response` event, summed; the cost where the endpoint
    reported one for every response (else None: a partial sum would understate it)."""
    used = [d["usage"] for d in docs
            if d.get("kind") == "response" and isinstance(d.get("usage"), dict)]
    if not used:
        return None
    costs = [c for u in used if (c := _cost(u.get("cost"))) is not None]
    return Usage(
        cost_usd=round(sum(costs), 9) if len(costs) == len(used) else None,
        prompt_tokens=sum(count(u.get("prompt_tokens")) for u in used),
        completion_tokens=sum(count(u.get("completion_tokens")) for u in used),
        cached_tokens=sum(count(d.get("cached_tokens")) for u in used
                          if isinstance(d := u.get("prompt_tokens_details"), dict)),
        source=f"llm response events ({len(used)})")


class LlmConnector(BaseConnector):
    """Drives a run with any OpenAI-compatible chat model through our own small loop."""

    name = "llm"
    title = "Built-in tool-calling loop over an OpenAI-compatible endpoint"
    kind: Literal["inprocess"] = "inprocess"
    options_model = LlmAgentOptions

    def __init__(self) -> None:
        self.transcript: list[dict[str, Any]] = []
        self.stop_reason: str | None = None
        self.turns = 0
        #: which limit stopped the loop: a spending limit, or its turn limit
        self.limit_note: str | None = None

    def installed(self) -> bool:
        return True  # only needs the openai SDK, a dependency

    def recorded_transcript(self) -> bytes | None:
        """The events of the last run, one JSON line each."""
        if not self.transcript:
            return None
        return "\n".join(json.dumps(e) for e in self.transcript).encode()

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_events(docs) if recognizes(docs) else None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return events_usage(json_lines(data))

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """A model and an endpoint; the key is optional (local servers take none), unless
        its variable is named explicitly (`llm_api_key_env`): then it must be set."""
        out = [] if model else ["--model NAME (the model the endpoint serves)"]
        if not options.get("llm_base_url", "").strip():
            out.append("--llm-base-url URL (an OpenAI-compatible endpoint, e.g. "
                       "http://127.0.0.1:8000/v1)")
        named = options.get("llm_api_key_env", "").strip()
        if named and not os.environ.get(named):
            out.append(f"{named} in the environment (--llm-api-key-env {named} names it, and "
                       "it is not set)")
        return out

    def unreachable(self, options: dict[str, str]) -> str | None:
        """Checked before the run is made: the endpoint answers, and accepts the key and
        the path (`a2rl.llm.endpoint_refusal`: 401, 403, 404 refuse)."""
        from a2rl.llm import endpoint_refusal

        base = options.get("llm_base_url", "").strip()
        if not base:
            return None
        env = options.get("llm_api_key_env", "").strip()
        return endpoint_refusal(base, env or LlmAgentOptions().llm_api_key_env,
                                key_named=bool(env))

    def version(self) -> str | None:
        return a2rl.__version__

    # -- the loop --

    async def run(self, client: Client, ctx: AgentContext) -> None:
        """Drive the run through `client` until the model is done, turns or budget run out."""
        opts = LlmOptions.from_context(ctx)
        self.transcript, self.stop_reason, self.turns, self.limit_note = [], None, 0, None
        tools = await self._list_tools(client)
        known = {t.name for t in tools}
        payload_tools = openai_tools(tools)
        messages: list[dict[str, Any]] = []
        if client.instructions:
            self._add(messages, {"role": "system", "content": client.instructions})
        self._add(messages, {"role": "user", "content": ctx.prompt})
        llm = AsyncChatClient(opts.endpoint(), opts.policy())
        try:
            self.stop_reason = await self._loop(client, opts, llm, messages, known,
                                                payload_tools, ctx.limits)
            if self.stop_reason == "max_turns":  # its own limit, not the model's choice
                self.limit_note = f"turn limit: stopped after {self.turns} turns (llm_max_turns)"
        except anyio.get_cancelled_exc_class():
            self.stop_reason = "cancelled"  # the orchestrator's deadline
            raise
        finally:
            await llm.aclose()
            self.transcript.append({"kind": "stop", "reason": self.stop_reason or "error",
                                    "turns": self.turns,
                                    **({"note": self.limit_note} if self.limit_note else {})})

    async def _loop(self, client: Client, opts: LlmOptions, llm: AsyncChatClient,
                    messages: list[dict[str, Any]], known: set[str],
                    tools: list[dict[str, Any]], limits: SpendLimit) -> str:
        for turn in range(1, opts.max_turns + 1):
            # the spending limits, before each request: what was asked for is paid, so the
            # tool calls of the response that passed one still ran
            if limits.any and (why := limits.passed(driver_usage(events_usage(self.transcript)))):
                self.limit_note = why
                return "spending_limit"
            self.turns = turn
            trim_context(messages, opts.context_chars)
            body: dict[str, Any] = {"model": opts.model, "messages": wire(messages),
                                    "tools": tools, "tool_choice": "auto", "stream": False}
            if opts.temperature is not None:
                body["temperature"] = opts.temperature
            if opts.max_tokens is not None:
                body["max_tokens"] = opts.max_tokens
            started = time.monotonic()
            answer = await self._complete(llm, body)
            choice = answer["choices"][0]
            self.transcript.append({
                "kind": "response", "turn": turn, "elapsed_s": round(time.monotonic() - started, 3),
                "usage": answer.get("usage"), "finish_reason": choice.get("finish_reason"),
                "model": answer.get("model")})
            msg = choice["message"]
            calls = [self._normal_call(tc) for tc in msg.get("tool_calls") or []]
            assistant: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
            if calls:
                assistant["tool_calls"] = calls
            self._add(messages, assistant)
            if not calls:
                return "done"
            over = False
            for tc in calls:
                text, is_over = await self._call(client, tc, known, opts)
                self._add(messages, {"role": "tool", "tool_call_id": tc["id"], "content": text})
                over = over or is_over
            if over:
                return "budget"
        return "max_turns"

    @staticmethod
    def _normal_call(tc: Mapping[str, Any]) -> dict[str, Any]:
        """Only the standard fields, an id even when the server gives none."""
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):  # a few servers send an object instead of a JSON string
            args = json.dumps(args) if args is not None else ""
        return {"id": tc.get("id") or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": str(fn.get("name") or ""), "arguments": args}}

    async def _call(self, client: Client, tc: dict[str, Any], known: set[str],
                    opts: LlmOptions) -> tuple[str, bool]:
        """Run one tool call; returns the tool message's text and whether the budget is over."""
        name, raw = tc["function"]["name"], tc["function"]["arguments"]
        if name not in known:
            return (f"Error: unknown tool {name!r}; the tools are: {', '.join(sorted(known))}",
                    False)
        try:
            args = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            return (f"Error: the arguments of {name} are not valid JSON ({exc}); send a JSON "
                    "object matching the tool's parameters", False)
        if not isinstance(args, dict):
            return f"Error: the arguments of {name} must be a JSON object", False
        try:
            result = await client.call_tool(name, args, read_timeout_seconds=opts.timeout_s)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # a protocol error for this call: tell the model, keep going
            text = f"Error: {name} failed: {exc}"
            return truncate_middle(text, opts.tool_output_chars), budget_over(name, text, None)
        text = result_text(result)
        over = budget_over(name, text, result.structured_content)
        return truncate_middle(text, opts.tool_output_chars), over

    async def _list_tools(self, client: Client) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _add(self, messages: list[dict[str, Any]], message: dict[str, Any]) -> None:
        messages.append(message)
        self.transcript.append({"kind": "message", "message": message})

    async def _complete(self, llm: AsyncChatClient, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion under the shared retry policy; each retry goes in the
        transcript, a refusal or retries running out raise `LlmAgentError`."""
        def on_retry(attempt: int, failure: RequestFailure, delay: float) -> None:
            self.transcript.append({"kind": "retry", "attempt": attempt,
                                    "error": _describe(failure), "delay_s": delay})

        outcome = await llm.complete(body, on_retry=on_retry)
        if outcome.value is not None:
            return outcome.value.data
        url = f"{llm.endpoint.base_url}/chat/completions"
        failure = outcome.failure
        assert failure is not None
        if not failure.retryable:
            raise LlmAgentError(f"the model endpoint {url} refused the request "
                                f"({_describe(failure)})")
        raise LlmAgentError(f"the model endpoint {url} failed after {len(outcome.attempts)} "
                            f"attempts ({_describe(failure)})")


def _describe(failure: RequestFailure) -> str:
    """The agent's wording of a failed request (its error messages say "HTTP 429: ...")."""
    if failure.kind == "http":
        return f"HTTP {failure.status}: {failure.detail}"
    return failure.detail if failure.kind == "transport" else failure.describe()
