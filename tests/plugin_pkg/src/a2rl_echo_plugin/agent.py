"""The `idle` agent: reads the task, looks at the budget, asks its sandbox who made it, and stops
without training.

An in-process connector (see a2rl's `clients/base.py`): a2rl hands it a connected MCP client
and the run's context; it is cancelled at the deadline. A process connector (an agent CLI)
would instead implement `prepare(ctx) -> AgentLaunch`. `BaseConnector` gives the members it
does not need their defaults (no keys to check, no endpoint).

It records its own transcript, in a format of its own (one JSON line per step), and reads it
back for the viewer (`parse_transcript`): a connector owns its transcript's format.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from mcp import Client

from a2rl.clients.base import AgentContext, BaseConnector
from a2rl.clients.transcript import Message, json_lines, text_of


class IdleConnector(BaseConnector):
    name = "idle"
    title = "Idle agent (example plugin: reads, then stops)"
    kind: Literal["inprocess"] = "inprocess"
    experimental = True

    def __init__(self, **_options: Any) -> None:
        self.steps: list[dict[str, Any]] = []

    def version(self) -> str | None:
        return "0.1.0"

    async def run(self, client: Client, ctx: AgentContext) -> None:
        self.steps = []
        for tool, args in (("read_file", {"path": "TASK.md"}), ("budget_status", {}),
                           ("run_command", {"command": "echo made by ${A2RL_STAMPED_BY:-none}"})):
            result = await client.call_tool(tool, args)
            text = " ".join(getattr(p, "text", "") for p in result.content)
            self.steps.append({"idle_step": len(self.steps) + 1, "tool": tool,
                               "arguments": args, "result": text[:200]})
        ctx.say("idle: read the task and the budget; stopping without training")

    def recorded_transcript(self) -> bytes | None:
        return "\n".join(json.dumps(s) for s in self.steps).encode() if self.steps else None

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = [d for d in json_lines(data) if "idle_step" in d]
        if not docs:
            return None  # not ours: the viewer tries the other agents, then shows the text
        out = [Message(role="tool", tool=str(d.get("tool")), arguments=d.get("arguments"),
                       result=text_of(d.get("result"))) for d in docs]
        return [*out, Message(role="result", text=f"idle: stopped after {len(docs)} steps")]
