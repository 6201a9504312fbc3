"""The attack suite's fixtures: a real run, driven through the real MCP tools as an agent would.

Every attack test gets an `Agent` bound to a fresh `arith` run (no baseline: the baseline is
not what these tests attack) on each sandbox backend, talking to the real server over an
in-memory MCP client. An attack passes when what it tried did not happen: the test looks at
the host, the store or the other run, not only at the error the tool returned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client

from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Run, Store

from ..conftest import backend_settings
from ..helpers import text_of


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The settings of one sandbox backend (skipped where missing, a failure in CI)."""
    return backend_settings(settings, request.param)


@dataclass
class Agent:
    """A hostile agent's handle on one run: every call goes through the MCP tools."""

    client: Client
    run: Run
    settings: Settings
    store: Store

    async def call(self, tool: str, **args: Any) -> Any:
        return await self.client.call_tool(tool, args)

    async def ok(self, tool: str, **args: Any) -> dict[str, Any]:
        """Call a tool that must succeed; its structured result."""
        result = await self.call(tool, **args)
        assert not result.is_error, f"{tool} failed: {text_of(result)}"
        return dict(result.structured_content or {})

    async def refused(self, tool: str, **args: Any) -> str:
        """Call a tool that must fail; the error text the agent reads."""
        result = await self.call(tool, **args)
        assert result.is_error, f"{tool} was expected to fail: {text_of(result)[:500]}"
        return text_of(result)

    async def sh(self, command: str, wait_s: float = 30) -> dict[str, Any]:
        """run_command; the structured result (exit code, output, job id)."""
        return await self.ok("run_command", command=command, wait_s=wait_s)


async def open_agent(settings: Settings, store: Store, task_id: str = "arith",
                     **run_options: Any) -> AsyncIterator[Agent]:
    created = create_run(settings, store, task_id=task_id, budget="30m", baseline=False,
                         **run_options)
    server = build_server(settings, store, run_id=created.run.id, transport="memory")
    try:
        async with Client(server, mode="legacy") as client:
            yield Agent(client, created.run, settings, store)
    finally:
        finish_run(settings, store, created.run.id)


@pytest.fixture
async def agent(backend: Settings, store: Store) -> AsyncIterator[Agent]:
    """A fresh arith run on the parametrized backend."""
    async for a in open_agent(backend, store):
        yield a
