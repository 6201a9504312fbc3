"""The `idle` agent: reads the task, looks at the budget, and stops without training.

An in-process connector (see a2rl's `clients/base.py`): a2rl hands it a connected MCP client
and the run's context; it is cancelled at the deadline. A process connector (an agent CLI)
would instead implement `prepare(ctx) -> AgentLaunch`.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp import Client


class IdleConnector:
    name = "idle"
    title = "Idle agent (example plugin: reads, then stops)"
    kind: Literal["inprocess"] = "inprocess"
    experimental = True

    def __init__(self, **_options: Any) -> None:
        pass

    def installed(self) -> bool:
        return True

    def version(self) -> str | None:
        return "0.1.0"

    async def run(self, client: Client, ctx: Any) -> None:
        await client.call_tool("read_file", {"path": "TASK.md"})
        await client.call_tool("budget_status", {})
