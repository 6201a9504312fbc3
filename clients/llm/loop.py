"""The loop: one *turn* is one chat completion request and the tool calls it asks for.

- POST {llm_base_url}/chat/completions, non-streaming, with `tool_choice: "auto"`; the MCP
  server's instructions are the system message, the task prompt the first user message, our
  MCP tools the function tools (`tool_calls`), and nothing else.
- Before each request the messages are trimmed to their budget (`context`).
- The loop stops when the model answers without tool calls (it says it is done), after
  `llm_max_turns` turns, or when the budget ends (a tool says so). The orchestrator also
  cancels it at the deadline.

Requests go through `a2rl.llm.AsyncChatClient`, under its one retry policy (transient failures:
transport errors, 408/409/429/5xx, a body that is no chat completion) with `llm_retries` retries
and `llm_backoff_s` as the first wait (honouring Retry-After); other statuses, or retries running
out, raise `LlmAgentError` with the status and the start of the body.

Spending limits (`AgentContext.limits`, `a2rl run --max-cost/--max-tokens`): before each request
the responses' usage so far is summed (tokens in and out; the cost the endpoint reported in
`usage.cost`, else the price table's for the model); once it has passed a limit the loop stops
with `spending_limit` (`limit_note` says which), so one response may go beyond it.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from mcp import Client

from a2rl.llm import AsyncChatClient, RequestFailure
from a2rl.store.ledger import SpendLimit

from ..transcript import driver_usage
from .context import trim_context, wire
from .options import LlmAgentError, LlmOptions
from .tool_calls import call_tool, list_tools, normal_call, openai_tools
from .transcript import (
    Event,
    events_usage,
    message_event,
    response_event,
    retry_event,
    stop_event,
)


class ChatLoop:
    """One run of the loop through one MCP client: the events it recorded (kept when it is
    cancelled or raises), the turns it took and why it stopped."""

    def __init__(self, client: Client, opts: LlmOptions, limits: SpendLimit) -> None:
        self.client, self.opts, self.limits = client, opts, limits
        self.events: list[Event] = []
        self.stop_reason: str | None = None
        self.turns = 0
        #: which limit stopped the loop: a spending limit, or its turn limit
        self.limit_note: str | None = None

    async def run(self, prompt: str) -> None:
        """Drive the run until the model is done, turns or budget run out."""
        tools = await list_tools(self.client)
        messages: list[dict[str, Any]] = []
        if self.client.instructions:
            self._add(messages, {"role": "system", "content": self.client.instructions})
        self._add(messages, {"role": "user", "content": prompt})
        llm = AsyncChatClient(self.opts.endpoint(), self.opts.policy())
        try:
            self.stop_reason = await self._turns(llm, messages, {t.name for t in tools},
                                                 openai_tools(tools))
            if self.stop_reason == "max_turns":  # its own limit, not the model's choice
                self.limit_note = f"turn limit: stopped after {self.turns} turns (llm_max_turns)"
        except anyio.get_cancelled_exc_class():
            self.stop_reason = "cancelled"  # the orchestrator's deadline
            raise
        finally:
            await llm.aclose()
            self.events.append(stop_event(self.stop_reason or "error", self.turns,
                                          self.limit_note))

    async def _turns(self, llm: AsyncChatClient, messages: list[dict[str, Any]],
                     known: set[str], tools: list[dict[str, Any]]) -> str:
        opts = self.opts
        for turn in range(1, opts.max_turns + 1):
            # the spending limits, before each request: what was asked for is paid, so the
            # tool calls of the response that passed one still ran
            if self.limits.any and (
                    why := self.limits.passed(driver_usage(events_usage(self.events)))):
                self.limit_note = why
                return "spending_limit"
            self.turns = turn
            trim_context(messages, opts.context_chars)
            started = time.monotonic()
            answer = await self._complete(llm, self._request(messages, tools))
            self.events.append(response_event(turn, time.monotonic() - started, answer))
            msg = answer["choices"][0]["message"]
            calls = [normal_call(tc) for tc in msg.get("tool_calls") or []]
            assistant: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
            if calls:
                assistant["tool_calls"] = calls
            self._add(messages, assistant)
            if not calls:
                return "done"
            over = False
            for tc in calls:
                text, is_over = await call_tool(self.client, tc, known, timeout_s=opts.timeout_s,
                                                output_chars=opts.tool_output_chars)
                self._add(messages, {"role": "tool", "tool_call_id": tc["id"], "content": text})
                over = over or is_over
            if over:
                return "budget"
        return "max_turns"

    def _request(self, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.opts.model, "messages": wire(messages),
                                "tools": tools, "tool_choice": "auto", "stream": False}
        if self.opts.temperature is not None:
            body["temperature"] = self.opts.temperature
        if self.opts.max_tokens is not None:
            body["max_tokens"] = self.opts.max_tokens
        return body

    def _add(self, messages: list[dict[str, Any]], message: dict[str, Any]) -> None:
        messages.append(message)
        self.events.append(message_event(message))

    async def _complete(self, llm: AsyncChatClient, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion under the shared retry policy; each retry goes in the
        transcript, a refusal or retries running out raise `LlmAgentError`."""
        def on_retry(attempt: int, failure: RequestFailure, delay: float) -> None:
            self.events.append(retry_event(attempt, describe(failure), delay))

        outcome = await llm.complete(body, on_retry=on_retry)
        if outcome.value is not None:
            return outcome.value.data
        url = f"{llm.endpoint.base_url}/chat/completions"
        failure = outcome.failure
        assert failure is not None
        if not failure.retryable:
            raise LlmAgentError(f"the model endpoint {url} refused the request "
                                f"({describe(failure)})")
        raise LlmAgentError(f"the model endpoint {url} failed after {len(outcome.attempts)} "
                            f"attempts ({describe(failure)})")


def describe(failure: RequestFailure) -> str:
    """The agent's wording of a failed request (its error messages say "HTTP 429: ...")."""
    if failure.kind == "http":
        return f"HTTP {failure.status}: {failure.detail}"
    return failure.detail if failure.kind == "transport" else failure.describe()
