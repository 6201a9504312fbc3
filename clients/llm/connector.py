"""The `llm` agent as a connector: what it needs before the run, the loop it runs, and how
its transcript is read back.

Before the run the endpoint gets one authenticated `GET /models`: 401, 403 or 404 refuse the
run (`unreachable`). `transcript`, `stop_reason`, `turns` and `limit_note` are the last run's
(`loop.ChatLoop`), for the orchestrator to store and report.
"""

from __future__ import annotations

import os
from typing import Literal

from mcp import Client

import a2rl
from a2rl.llm import endpoint_refusal

from ..base import AgentContext, BaseConnector
from ..transcript import Message, Usage, json_lines
from .loop import ChatLoop
from .options import LlmAgentOptions, LlmOptions
from .transcript import Event, events_usage, parse_events, recognizes, recorded


class LlmConnector(BaseConnector):
    """Drives a run with any OpenAI-compatible chat model through our own small loop."""

    name = "llm"
    title = "Built-in tool-calling loop over an OpenAI-compatible endpoint"
    kind: Literal["inprocess"] = "inprocess"
    options_model = LlmAgentOptions

    def __init__(self) -> None:
        self._last: ChatLoop | None = None

    @property
    def transcript(self) -> list[Event]:
        """The last run's events (`transcript.py`), kept when it was cancelled or raised."""
        return self._last.events if self._last else []

    @property
    def stop_reason(self) -> str | None:
        return self._last.stop_reason if self._last else None

    @property
    def turns(self) -> int:
        return self._last.turns if self._last else 0

    @property
    def limit_note(self) -> str | None:
        """Which limit stopped the last run: a spending limit, or its turn limit."""
        return self._last.limit_note if self._last else None

    def installed(self) -> bool:
        return True  # only needs the openai SDK, a dependency

    def version(self) -> str | None:
        return a2rl.__version__

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
        base = options.get("llm_base_url", "").strip()
        if not base:
            return None
        env = options.get("llm_api_key_env", "").strip()
        return endpoint_refusal(base, env or LlmAgentOptions().llm_api_key_env,
                                key_named=bool(env))

    async def run(self, client: Client, ctx: AgentContext) -> None:
        """Drive the run through `client` until the model is done, turns or budget run out."""
        opts = LlmOptions.from_context(ctx)
        self._last = ChatLoop(client, opts, ctx.limits)
        await self._last.run(ctx.prompt)

    def recorded_transcript(self) -> bytes | None:
        """The events of the last run, one JSON line each."""
        return recorded(self.transcript)

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_events(docs) if recognizes(docs) else None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return events_usage(json_lines(data))
