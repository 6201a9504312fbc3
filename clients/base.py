"""The connector seam: how an agent system is launched against a run, and what it declares.

A connector is one module per agent system, in clients/ (built-in, registered in
`registry.BUILTIN_AGENTS`) or in an installed package (the `a2rl.agents` entry point).
Process connectors (agent CLIs) turn an `AgentContext` into an `AgentLaunch`: the command
line, its environment and the config files written into the agent's private home, with our
MCP server as the only tool source. In-process connectors (the scripted reference agent, the
`llm` loop) are coroutines handed a connected MCP client. The orchestrator (`a2rl run`) owns
everything else: the run, the MCP endpoint, the agent's sandbox, the budget, the transcript
and finalization.

Everything the shared code needs to know about an agent is a member of `Connector`, never a
test of its name: what configuration it lacks (`missing_config`), whether its endpoint
answers (`unreachable`), how to read its transcript (`parse_transcript`), and for an
in-process one what it recorded (`recorded_transcript`). `BaseConnector` gives each optional
member its neutral default, so a new connector writes only what differs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from a2rl.store.ledger import SpendLimit

from .options import AgentOptions

if TYPE_CHECKING:
    from mcp import Client  # typing only: the CLI imports this module, and mcp costs 0.5 s

    from .transcript import Message, Usage

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
    #: the run's spending limits on the driver model, with its price where the table has it
    limits: SpendLimit = Field(default_factory=SpendLimit)
    #: where a connector's progress lines go (the user's terminal under `a2rl run`); an
    #: in-process agent reports its plan here, a process one has its own stdout
    say: Callable[[str], None] = Field(default=lambda _m: None, exclude=True, repr=False)


class AgentLaunch(BaseModel):
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)  # added to a minimal environment
    cwd: Path  # its stdout is the run's transcript, read back by `parse_transcript`


@runtime_checkable
class Connector(Protocol):
    """What every agent system declares. A member missing is a one-line `PluginLoadError`
    when the agent is used (`registry.get_connector`); `BaseConnector` has the defaults."""

    name: str  # the value of `--agent`
    title: str
    kind: Literal["process", "inprocess"]
    experimental: bool
    #: its options (`--agent-option KEY=VALUE`), typed: checked before a run is made
    #: (`AgentOptions.parse`), documented in docs/agent-options.md
    options_model: type[AgentOptions]

    def installed(self) -> bool: ...

    def version(self) -> str | None: ...

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """What the agent needs to reach its model and lacks (a key, an endpoint, a model),
        one phrase each ("OPENAI_API_KEY in the environment"); checked before the run is
        made, so that nothing is scored for a run that cannot start."""
        ...

    def unreachable(self, options: dict[str, str]) -> str | None:
        """Why an endpoint the agent needs does not answer, or refuses the agent's
        credentials (401, 403) or path (404), or None; checked before the run is made
        (after `missing_config`)."""
        ...

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        """The conversation in a transcript this agent wrote (a process agent's stdout, or
        what `recorded_transcript` returned), or None when `data` is not in its format.
        Pure and defensive: the bytes come from the agent. The viewer asks the run's agent
        first, then every other agent (a renamed or wrapped agent still parses), then shows
        the text."""
        ...

    def transcript_usage(self, data: bytes) -> Usage | None:
        """The driver model's token totals (and cost) stated in a transcript this agent
        wrote, or None when it states none. Pure and defensive, like `parse_transcript`."""
        ...


class ProcessConnector(Connector, Protocol):
    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        """Write the agent's config into ctx.home and return how to start it headless."""
        ...


class InProcessConnector(Connector, Protocol):
    async def run(self, client: Client, ctx: AgentContext) -> None:
        """Drive the run through `client` until done; cancelled at the deadline."""
        ...

    def recorded_transcript(self) -> bytes | None:
        """What the last `run` recorded, as `parse_transcript` reads it (kept even when the
        run was cancelled or raised), for the orchestrator to store; None when nothing."""
        ...


class BaseConnector:
    """The optional members' defaults: no configuration needed, no endpoint to check, no
    transcript format of its own (shown as text, unless another agent's parser knows it),
    nothing recorded. Subclass it and set `name`, `title`, `kind`, then `prepare` (process)
    or `run` (in-process)."""

    experimental = False
    #: how to install it, shown by `a2rl agents` while it is not installed
    install_hint = ""
    #: no options: any `--agent-option` is refused, naming none
    options_model: type[AgentOptions] = AgentOptions

    def installed(self) -> bool:
        return True

    def version(self) -> str | None:
        return None

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        return []

    def unreachable(self, options: dict[str, str]) -> str | None:
        return None

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        return None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return None

    def recorded_transcript(self) -> bytes | None:
        return None


def _members(protocol: type) -> list[str]:
    names: list[str] = []
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or cls.__name__ == "Generic":
            continue
        names += [*getattr(cls, "__annotations__", {}),
                  *(k for k, v in vars(cls).items() if callable(v) and not k.startswith("_"))]
    return list(dict.fromkeys(names))


def missing_members(connector: object) -> list[str]:
    """The members `connector` lacks: of `Connector`, and of the protocol of its `kind`
    (`prepare` for a process connector; `run` and `recorded_transcript` for an in-process
    one). Empty for a connector; the message that refuses one names them."""
    protocol = {"process": ProcessConnector, "inprocess": InProcessConnector}.get(
        getattr(connector, "kind", None), Connector)
    return [m for m in _members(protocol) if not hasattr(connector, m)]
