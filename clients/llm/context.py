"""The loop's context policy: the messages sent to the model stay bounded, whatever the run's
length. Pure functions over the chat messages, unit-tested directly.

1. Each tool result is cut to `llm_tool_output_chars` characters (default 8000), keeping its head
   and its tail (the end of a training log matters most) around a "[... N chars truncated ...]"
   marker (`truncate_middle`).
2. Before each request, when the messages' total size (characters of their JSON) exceeds
   `llm_context_chars` (default 100000), the oldest tool results are replaced, one at a time,
   by "[older tool output elided: N chars]" until the total fits. If that is not enough, the
   arguments and text of the oldest assistant messages are elided the same way. The system
   message, the first user message and the last `KEEP_RECENT_TURNS` turns are never touched, so
   the model always sees the rules, the task and what it just did (`trim_context`).

An elided message is marked with the private key `_elided`; `wire` drops such keys before a
request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

KEEP_RECENT_TURNS = 2  # assistant messages (with their tool results) never elided


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
