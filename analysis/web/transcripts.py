"""An agent's transcript, whatever the agent, as one list of messages, with the server's calls.

Each agent's connector owns its stream format (`Connector.parse_transcript`, next to the
connector in clients/); `parse` asks the run's agent first, then the others, so a renamed or
wrapped agent still parses, and shows any other stdout as plain text. Pure: bytes in,
messages out.

Tool calls are matched to the server's `ToolCall` rows afterwards (`attach_calls`), so that a
call shows the arguments and result the server recorded, not the agent's copy of them.
"""

from __future__ import annotations

from typing import Any

from a2rl.clients.registry import parse_transcript
from a2rl.clients.transcript import Message

__all__ = ["Message", "attach_calls", "call_number", "from_call", "parse"]


def parse(data: bytes | None, agent: str | None = None) -> tuple[str, list[Message]]:
    """The transcript's format (the agent whose parser read it, "text" or "none") and its
    messages; `agent` is the run's agent, whose parser is tried first."""
    return parse_transcript(data, agent)


def attach_calls(messages: list[Message], calls: list[Any], lookahead: int = 50) -> list[Message]:
    """Pair transcript tool calls with the server's rows, in order and by tool name.

    A row the transcript does not mention (the agent's stdout was cut, or a call came from
    elsewhere) is inserted where it falls, so that every recorded call is shown once.
    """
    out: list[Message] = []
    i = 0
    for m in messages:
        if m.role == "tool" and m.tool is not None:
            j = next((k for k in range(i, min(i + lookahead, len(calls)))
                      if calls[k].tool == m.tool), None)
            if j is not None:
                out += [from_call(c) for c in calls[i:j]]
                c = calls[j]
                m = m.model_copy(update={"call_id": c.id, "seq": call_number(c),
                                         "arguments": c.arguments,
                                         "result": c.error if c.is_error and c.error
                                         else c.result_summary or m.result,
                                         "is_error": c.is_error or m.is_error,
                                         "duration_ms": c.duration_ms})
                i = j + 1
        out.append(m)
    out += [from_call(c) for c in calls[i:]]
    return out


def call_number(c: Any) -> int | None:
    """The number a call is shown with: its number within its run (a row from a store
    the migration has not numbered, none should be, falls back to its store id)."""
    return getattr(c, "seq", None) or getattr(c, "id", None)


def from_call(c: Any) -> Message:
    """A stored ToolCall row as a conversation entry (agents without a transcript)."""
    return Message(role="tool", tool=c.tool, call_id=c.id, seq=call_number(c),
                   arguments=c.arguments,
                   result=(c.error if c.is_error and c.error else c.result_summary),
                   is_error=c.is_error, duration_ms=c.duration_ms)
