"""The driver model's token counts (and cost, where the agent reports it) in a transcript.

Each agent reports them its own way: Claude Code's final `result` event (usage and
`total_cost_usd`; without one, its assistant messages, each counted once by message id),
Codex's `turn.completed` events (summed over turns), Gemini CLI's `result` stats, and the `llm`
loop's `response` events (the API's usage, summed). Other transcripts carry none. Pure: bytes
and the format `transcripts.parse` detected in, totals out.

These are the totals the transcript states, not per step: Claude Code repeats one response's
usage on each of its content blocks and Codex counts per turn, so only the totals can be said
for every agent alike. Like the parsers, this belongs with each agent's connector.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


class Usage(BaseModel):
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


def _int(x: Any) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else 0


def _events(data: bytes) -> list[dict[str, Any]]:
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


def _claude(docs: list[dict[str, Any]]) -> Usage | None:
    def of(u: dict[str, Any]) -> tuple[int, int, int, int]:
        cached, written = (_int(u.get("cache_read_input_tokens")),
                           _int(u.get("cache_creation_input_tokens")))
        return (_int(u.get("input_tokens")) + cached + written, _int(u.get("output_tokens")),
                cached, written)

    for d in reversed(docs):
        if d.get("type") == "result" and isinstance(d.get("usage"), dict):
            p, c, k, w = of(d["usage"])
            cost = d.get("total_cost_usd")
            return Usage(prompt_tokens=p, completion_tokens=c, cached_tokens=k,
                         cache_write_tokens=w,
                         cost_usd=float(cost) if isinstance(cost, int | float) else None,
                         source="claude-code result event")
    seen: dict[str, tuple[int, int, int, int]] = {}
    for d in docs:
        msg = d.get("message") if d.get("type") == "assistant" else None
        if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
            seen[str(msg.get("id"))] = of(msg["usage"])
    if not seen:
        return None
    return Usage(prompt_tokens=sum(v[0] for v in seen.values()),
                 completion_tokens=sum(v[1] for v in seen.values()),
                 cached_tokens=sum(v[2] for v in seen.values()),
                 cache_write_tokens=sum(v[3] for v in seen.values()),
                 source="claude-code assistant messages (no result event)")


def _codex(docs: list[dict[str, Any]]) -> Usage | None:
    turns = [d["usage"] for d in docs
             if d.get("type") == "turn.completed" and isinstance(d.get("usage"), dict)]
    if not turns:
        return None
    return Usage(prompt_tokens=sum(_int(u.get("input_tokens")) for u in turns),
                 completion_tokens=sum(_int(u.get("output_tokens")) for u in turns),
                 cached_tokens=sum(_int(u.get("cached_input_tokens")) for u in turns),
                 source=f"codex turn.completed events ({len(turns)})")


def _gemini(docs: list[dict[str, Any]]) -> Usage | None:
    for d in reversed(docs):
        stats = d.get("stats") if d.get("type") == "result" else None
        if isinstance(stats, dict):
            return Usage(prompt_tokens=_int(stats.get("input_tokens")),
                         completion_tokens=_int(stats.get("output_tokens")),
                         cached_tokens=_int(stats.get("cached")),
                         source="gemini-cli result stats")
    return None


def _llm(docs: list[dict[str, Any]]) -> Usage | None:
    used = [d["usage"] for d in docs
            if d.get("kind") == "response" and isinstance(d.get("usage"), dict)]
    if not used:
        return None
    return Usage(
        prompt_tokens=sum(_int(u.get("prompt_tokens")) for u in used),
        completion_tokens=sum(_int(u.get("completion_tokens")) for u in used),
        cached_tokens=sum(_int(d.get("cached_tokens")) for u in used
                          if isinstance(d := u.get("prompt_tokens_details"), dict)),
        source=f"llm response events ({len(used)})")


READERS = {"claude-code": _claude, "codex": _codex, "gemini-cli": _gemini, "llm": _llm}


def transcript_usage(data: bytes, fmt: str) -> Usage | None:
    """The totals in a transcript of format `fmt`; None where it states none."""
    reader = READERS.get(fmt)
    return reader(_events(data)) if reader else None
