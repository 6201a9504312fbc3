"""An agent's transcript as one list of messages: the shape every connector's parser returns.

Each connector owns its own stream format: `Connector.parse_transcript(data)` turns what its
agent wrote (an agent CLI's stdout, or what an in-process connector recorded) into `Message`s,
and says None when the bytes are not in its format. This module holds only what every parser
shares (the message, the tool-name prefixes of our server, the JSON-lines reader, the text
fallback), so that a new agent's parser is a function in the agent's own file. Pure: bytes in,
messages out. `registry.parse_transcript` picks the parser; the viewer
(`a2rl.analysis.web.transcripts`) pairs the tool calls with the server's records.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from a2rl.store.ledger import DriverUsage

from .base import SERVER_NAME

Role = Literal["system", "user", "assistant", "thinking", "tool", "result", "error", "info"]
#: the longest text one message keeps (a transcript is shown, not archived)
MAX_TEXT = 20_000
#: how agent systems spell our server's tools (`mcp__a2rl__run_command`, `a2rl.run_command`,
#: OpenCode's `a2rl_run_command`...); the longest first, so `a2rl__` wins over `a2rl_`
PREFIXES = (f"mcp__{SERVER_NAME}__", f"mcp_{SERVER_NAME}_", f"mcp__{SERVER_NAME}/",
            f"{SERVER_NAME}.", f"{SERVER_NAME}__", f"{SERVER_NAME}_")
#: how many of the first JSON lines a parser looks at to recognize its format
RECOGNIZE_LINES = 50


class Message(BaseModel):
    """One entry of the conversation; `role == "tool"` entries carry a call."""

    role: Role
    text: str = ""
    tool: str | None = None  # our bare tool name when it is one of ours
    call_key: str | None = None  # the agent's id for the call, to pair its result
    arguments: Any = None
    result: str | None = None
    is_error: bool = False
    call_id: int | None = None  # the store's ToolCall.id, once attached (links use it)
    seq: int | None = None  # the call's number within its run (ToolCall.seq), shown as #n
    duration_ms: float | None = None


def bare_tool(name: str) -> str:
    """Our tool's own name, without the prefix the agent system gave it."""
    for p in PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return name


def text_of(x: Any) -> str:
    """Text of a content value: a string, a list of blocks, or anything JSON."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x[:MAX_TEXT]
    if isinstance(x, list):
        parts = [b.get("text", "") if isinstance(b, dict) and "text" in b
                 else json.dumps(b) if not isinstance(b, str) else b for b in x]
        return "\n".join(parts)[:MAX_TEXT]
    if isinstance(x, dict) and "text" in x:
        return str(x["text"])[:MAX_TEXT]
    return json.dumps(x)[:MAX_TEXT]


def arguments_of(x: Any) -> Any:
    """A call's arguments: agents send them as an object or as a JSON string of one."""
    if isinstance(x, str):
        try:
            return json.loads(x)
        except ValueError:
            return x
    return x


class Usage(BaseModel):
    """The driver model's token totals (and cost, where the agent reports it) that a
    transcript states: `Connector.transcript_usage`. Totals, not per step: Claude Code repeats
    one response's usage on each of its content blocks and Codex counts per turn, so only
    totals can be said for every agent alike."""

    #: input tokens, cached ones included (the ATIF and Inspect convention)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: the part of `prompt_tokens` read from the provider's cache
    cached_tokens: int = 0
    #: the part of `prompt_tokens` written to it (Claude Code reports it apart)
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    #: what the counts were read from, for a reader to judge them
    source: str


def driver_usage(usage: Usage | None) -> DriverUsage | None:
    """A connector's `Usage` as the ledger counts it."""
    if usage is None:
        return None
    return DriverUsage(
        input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.cost_usd, source=usage.source)


def count(x: Any) -> int:
    """A token count the agent wrote: a non-negative int, anything else 0 (the bytes are the
    agent's)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else 0


def json_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines stream; other lines (logs, banners) are skipped."""
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def as_text(data: bytes) -> list[Message]:
    """A transcript no parser recognizes, shown as its text (its end, where the outcome is)."""
    return [Message(role="info", text=data.decode("utf-8", errors="replace")[-MAX_TEXT:])]
