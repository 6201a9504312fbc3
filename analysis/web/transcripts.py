"""An agent's transcript, whatever the agent, as one list of messages.

Formats (detected from the first JSON lines, not from the run's agent name, so that a renamed
or wrapped agent still parses): Claude Code `--output-format stream-json`, Codex `exec --json`,
Gemini CLI `--output-format stream-json`, and the `llm` loop's events (`clients/llm.py`). Any
other stdout is shown as plain text. Pure: bytes in, messages out.

Tool calls are matched to the server's `ToolCall` rows afterwards (`attach_calls`), so that a
call shows the arguments and result the server recorded, not the agent's copy of them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from a2rl.clients.base import SERVER_NAME

Role = Literal["system", "user", "assistant", "thinking", "tool", "result", "error", "info"]
Format = Literal["claude-code", "codex", "gemini-cli", "llm", "text", "none"]
MAX_TEXT = 20_000
PREFIXES = (f"mcp__{SERVER_NAME}__", f"mcp_{SERVER_NAME}_", f"mcp__{SERVER_NAME}/",
            f"{SERVER_NAME}.", f"{SERVER_NAME}__")


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
    for p in PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return name


def _text(x: Any) -> str:
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


def _args(x: Any) -> Any:
    if isinstance(x, str):
        try:
            return json.loads(x)
        except ValueError:
            return x
    return x


def _lines(data: bytes) -> list[dict[str, Any]]:
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


def detect(docs: list[dict[str, Any]]) -> Format:
    for d in docs[:50]:
        kind = d.get("kind")
        if kind in ("message", "response", "stop", "retry"):
            return "llm"
        t = d.get("type")
        if isinstance(t, str) and (t.startswith(("thread.", "turn.", "item.")) or
                                   t in ("thread.started",)):
            return "codex"
        if t in ("assistant", "user") and isinstance(d.get("message"), dict):
            return "claude-code"
        if t == "system" and d.get("subtype") == "init":
            return "claude-code"
        if t in ("init", "tool_use", "tool_result") or (t == "message" and "role" in d):
            return "gemini-cli"
    return "text"


def _claude(docs: list[dict[str, Any]]) -> list[Message]:
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        if t == "system" and d.get("subtype") == "init":
            tools = d.get("tools") or []
            out.append(Message(role="info", text=f"session started: model {d.get('model')}, "
                               f"{len(tools)} tools"))
        elif t in ("assistant", "user"):
            content = (d.get("message") or {}).get("content")
            if isinstance(content, str):
                out.append(Message(role=t, text=content[:MAX_TEXT]))
                continue
            for b in content or []:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text" and b.get("text", "").strip():
                    out.append(Message(role=t, text=b["text"][:MAX_TEXT]))
                elif b.get("type") == "thinking":
                    out.append(Message(role="thinking", text=_text(b.get("thinking"))))
                elif b.get("type") == "tool_use":
                    m = Message(role="tool", tool=bare_tool(str(b.get("name"))),
                                call_key=b.get("id"), arguments=b.get("input"))
                    by_key[str(b.get("id"))] = m
                    out.append(m)
                elif b.get("type") == "tool_result":
                    m2 = by_key.get(str(b.get("tool_use_id")))
                    if m2 is not None:
                        m2.result, m2.is_error = _text(b.get("content")), bool(b.get("is_error"))
        elif t == "result":
            err = bool(d.get("is_error")) or d.get("subtype") not in (None, "success")
            out.append(Message(role="error" if err else "result",
                               text=_text(d.get("result")) or str(d.get("subtype") or "")))
    return out


def _codex(docs: list[dict[str, Any]]) -> list[Message]:
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        item = d.get("item") if isinstance(d.get("item"), dict) else None
        if t in ("item.started", "item.updated", "item.completed") and item:
            it = item.get("type")
            if it == "mcp_tool_call":
                key = str(item.get("id"))
                m = by_key.get(key)
                if m is None:
                    m = Message(role="tool", tool=bare_tool(str(item.get("tool"))),
                                call_key=key, arguments=_args(item.get("arguments")))
                    by_key[key] = m
                    out.append(m)
                if item.get("result") is not None:
                    m.result = _text((item["result"] or {}).get("content")
                                     if isinstance(item["result"], dict) else item["result"])
                if item.get("error"):
                    m.is_error = True
                    m.result = _text(item["error"].get("message")
                                     if isinstance(item["error"], dict) else item["error"])
                if item.get("status") == "failed":
                    m.is_error = True
            elif t == "item.completed" and it in ("agent_message", "assistant_message"):
                out.append(Message(role="assistant", text=_text(item.get("text"))))
            elif t == "item.completed" and it == "reasoning":
                out.append(Message(role="thinking", text=_text(item.get("text"))))
            elif t == "item.completed" and it == "error":
                out.append(Message(role="error", text=_text(item.get("message"))))
        elif t == "thread.started":
            out.append(Message(role="info", text=f"thread {d.get('thread_id')} started"))
        elif t == "turn.failed":
            out.append(Message(role="error", text=_text((d.get("error") or {}).get("message"))))
        elif t == "error":
            out.append(Message(role="error", text=_text(d.get("message"))))
        elif t == "turn.completed":
            usage = d.get("usage") or {}
            out.append(Message(role="result", text="turn completed" + (
                f": {usage.get('input_tokens')} tokens in, {usage.get('output_tokens')} out"
                if usage else "")))
    return out


def _gemini(docs: list[dict[str, Any]]) -> list[Message]:
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        if t == "init":
            out.append(Message(role="info", text=f"session started: model {d.get('model')}"))
        elif t == "message":
            role = "user" if d.get("role") == "user" else "assistant"
            text = _text(d.get("content"))
            # Streamed text arrives in deltas: join consecutive ones into one message.
            if d.get("delta") and out and out[-1].role == role and out[-1].tool is None \
                    and out[-1].call_key == "delta":
                out[-1].text += text
            else:
                out.append(Message(role=role, text=text,
                                   call_key="delta" if d.get("delta") else None))
        elif t == "tool_use":
            m = Message(role="tool", tool=bare_tool(str(d.get("tool_name"))),
                        call_key=str(d.get("tool_id")), arguments=d.get("parameters"))
            by_key[str(d.get("tool_id"))] = m
            out.append(m)
        elif t == "tool_result":
            m2 = by_key.get(str(d.get("tool_id")))
            if m2 is not None:
                m2.is_error = d.get("status") == "error"
                err = d.get("error")
                m2.result = _text(d.get("output")) or _text(
                    err.get("message") if isinstance(err, dict) else err)
        elif t == "error":
            out.append(Message(role="error", text=_text(d.get("message"))))
        elif t == "result":
            ok = d.get("status") == "success"
            err = d.get("error")
            out.append(Message(role="result" if ok else "error", text=(
                "finished" if ok else _text(err.get("message") if isinstance(err, dict)
                                            else err) or "failed")))
    for m in out:
        if m.call_key == "delta":
            m.call_key = None
    return out


def _llm(docs: list[dict[str, Any]]) -> list[Message]:
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        kind = d.get("kind")
        if kind == "message":
            msg = d.get("message") or {}
            role = msg.get("role")
            if role in ("system", "user", "assistant"):
                if _text(msg.get("content")).strip():
                    out.append(Message(role=role, text=_text(msg.get("content"))))
                for tc in msg.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    m = Message(role="tool", tool=bare_tool(str(fn.get("name"))),
                                call_key=str(tc.get("id")), arguments=_args(fn.get("arguments")))
                    by_key[str(tc.get("id"))] = m
                    out.append(m)
            elif role == "tool":
                m2 = by_key.get(str(msg.get("tool_call_id")))
                if m2 is not None:
                    m2.result = _text(msg.get("content"))
        elif kind == "retry":
            out.append(Message(role="error", text=f"retry {d.get('attempt')}: "
                                                  f"{_text(d.get('error'))}"))
        elif kind == "stop":
            reason = str(d.get("reason"))
            out.append(Message(role="error" if reason == "error" else "result",
                               text=f"stopped: {reason} after {d.get('turns')} turns"))
    return out


PARSERS = {"claude-code": _claude, "codex": _codex, "gemini-cli": _gemini, "llm": _llm}


def parse(data: bytes | None) -> tuple[Format, list[Message]]:
    """The transcript's format and messages; ("none", []) without a transcript."""
    if not data:
        return "none", []
    docs = _lines(data)
    fmt = detect(docs)
    if fmt == "text":
        text = data.decode("utf-8", errors="replace")
        return "text", [Message(role="info", text=text[-MAX_TEXT:])]
    return fmt, PARSERS[fmt](docs)


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
