"""The loop's transcript: the events it records, and how they are read back. Pure.

`LlmConnector.transcript` is a list of these events; the orchestrator stores them as JSON lines
(`recorded`), and `parse_events` reads them back for the viewer. One event per message
(`{"kind": "message", "message": ...}`, as sent, before any eliding) and per model response
(`{"kind": "response", "turn", "elapsed_s", "usage", "finish_reason", "model"}`), one per
retried request (`{"kind": "retry", ...}`), and a final `{"kind": "stop", "reason", "turns"}`
(with `note` when a limit stopped it) with reason done, max_turns, budget, spending_limit,
cancelled or error.
"""

from __future__ import annotations

import json
from typing import Any

from ..transcript import (
    RECOGNIZE_LINES,
    Message,
    Usage,
    arguments_of,
    bare_tool,
    count,
    text_of,
)

Event = dict[str, Any]
#: the kinds of event the loop writes; a stream with one of them among its first lines is its
KINDS = ("message", "response", "stop", "retry")


# --- written by the loop --------------------------------------------------------------------

def message_event(message: dict[str, Any]) -> Event:
    return {"kind": "message", "message": message}


def response_event(turn: int, elapsed_s: float, answer: dict[str, Any]) -> Event:
    """What the endpoint said about one response (the message itself is its own event)."""
    choice = answer["choices"][0]
    return {"kind": "response", "turn": turn, "elapsed_s": round(elapsed_s, 3),
            "usage": answer.get("usage"), "finish_reason": choice.get("finish_reason"),
            "model": answer.get("model")}


def retry_event(attempt: int, error: str, delay_s: float) -> Event:
    return {"kind": "retry", "attempt": attempt, "error": error, "delay_s": delay_s}


def stop_event(reason: str, turns: int, note: str | None) -> Event:
    return {"kind": "stop", "reason": reason, "turns": turns, **({"note": note} if note else {})}


def recorded(events: list[Event]) -> bytes | None:
    """The events as the orchestrator stores them, one JSON line each; None when none."""
    if not events:
        return None
    return "\n".join(json.dumps(e) for e in events).encode()


# --- read back ------------------------------------------------------------------------------

def recognizes(docs: list[dict[str, Any]]) -> bool:
    """The loop's events: a `kind` of message, response, stop or retry."""
    return any(d.get("kind") in KINDS for d in docs[:RECOGNIZE_LINES])


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
