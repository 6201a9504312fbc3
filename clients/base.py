"""The connector seam: how an agent system is launched against a run.

A connector is one small module per agent system. Process connectors (agent CLIs) turn an
`AgentContext` into an `AgentLaunch`: the command line, its environment and the config files
written into the agent's private home, with our MCP server as the only tool source. In-process
connectors (the scripted reference agent, the `llm` loop) are coroutines handed a connected MCP
client. The orchestrator (`a2rl run`) owns everything else: the run, the MCP endpoint, the
agent's sandbox, the budget, the transcript and finalization.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from mcp import Client
from pydantic import BaseModel, Field

SERVER_NAME = "a2rl"  # the MCP server's name in every agent's configuration


class McpEndpoint(BaseModel):
    """Where the agent reaches our MCP server: streamable HTTP on loopback with the run's token."""

    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class AgentContext(BaseModel):
    run_id: str
    prompt: str = Field(description="the task prompt, the same for every connector")
    home: Path = Field(description="the agent's private, initially empty home directory")
    endpoint: McpEndpoint
    model: str | None = Field(None, description="the driver model, when the user chose one")
    budget_s: float
    options: dict[str, str] = Field(default_factory=dict)  # e.g. llm_base_url


class AgentLaunch(BaseModel):
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)  # added to a minimal environment
    cwd: Path
    transcript: Literal["jsonl", "text"] = "jsonl"  # what the agent prints on stdout


@runtime_checkable
class Connector(Protocol):
    name: str  # the value of `--agent`
    title: str
    kind: Literal["process", "inprocess"]
    experimental: bool

    def installed(self) -> bool: ...

    def version(self) -> str | None: ...


class ProcessConnector(Connector, Protocol):
    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        """Write the agent's config into ctx.home and return how to start it headless."""
        ...


class InProcessConnector(Connector, Protocol):
    async def run(self, client: Client, ctx: AgentContext) -> None:
        """Drive the run through `client` until done; cancelled at the deadline."""
        ...
