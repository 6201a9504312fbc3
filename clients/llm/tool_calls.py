"""Our MCP tools as the model sees them: offered as OpenAI function tools, each call it asks
for run through the MCP client, and the result given back as the text of a `tool` message.

Every tool call goes through the MCP client, in order; its result comes back as the JSON of
the structured result, else the text. Arguments that are not a JSON object and unknown tool
names get an error text instead, so that the model can correct itself: a bad call never ends
the run. A result saying "budget exhausted" or "this run has ended", or a budget_status that
reports `exhausted`, tells the loop that the budget is over.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
from mcp import Client

from .context import truncate_middle

BUDGET_OVER_MARKERS = ("budget exhausted", "this run has ended")


async def list_tools(client: Client) -> list[Any]:
    """Every tool the server offers, page after page."""
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def openai_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """MCP tools as OpenAI function tools (parameters = the MCP input schema)."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description or t.title or t.name,
        "parameters": t.input_schema or {"type": "object", "properties": {}}}} for t in tools]


def normal_call(tc: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call of the model's answer with only the standard fields, an id even when the
    server gives none."""
    fn = tc.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):  # a few servers send an object instead of a JSON string
        args = json.dumps(args) if args is not None else ""
    return {"id": tc.get("id") or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": str(fn.get("name") or ""), "arguments": args}}


def result_text(result: Any) -> str:
    """A tool result as the model reads it: the structured JSON if any, else the text parts."""
    if getattr(result, "structured_content", None) is not None and not result.is_error:
        return json.dumps(result.structured_content, ensure_ascii=False)
    text = "\n".join(getattr(p, "text", "") or "" for p in (result.content or []))
    return f"Error: {text}" if result.is_error else text


def budget_over(name: str, text: str, structured: Any) -> bool:
    if name == "budget_status" and isinstance(structured, dict) and structured.get("exhausted"):
        return True
    low = text.lower()
    return any(marker in low for marker in BUDGET_OVER_MARKERS)


async def call_tool(client: Client, tc: dict[str, Any], known: set[str], *, timeout_s: float,
                    output_chars: int) -> tuple[str, bool]:
    """Run one tool call; returns the tool message's text (cut to `output_chars`) and whether
    the budget is over."""
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
        result = await client.call_tool(name, args, read_timeout_seconds=timeout_s)
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:  # a protocol error for this call: tell the model, keep going
        text = f"Error: {name} failed: {exc}"
        return truncate_middle(text, output_chars), budget_over(name, text, None)
    text = result_text(result)
    over = budget_over(name, text, result.structured_content)
    return truncate_middle(text, output_chars), over
