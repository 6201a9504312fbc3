"""The agent systems `a2rl run --agent` knows, each a small connector module loaded on use.

Built on `a2rl.registry.Registry`: the built-in connectors are `"module:Class"` strings, and an
installed package adds an agent through the `a2rl.agents` entry-point group, whose target is a
class (or factory) building a `Connector` (see docs/adding-a-task.md, "Adding an agent").
"""

from __future__ import annotations

from typing import Any

from a2rl.registry import PluginLoadError, Registry

from .base import Connector

#: The entry-point group an installed package declares its agents under.
ENTRY_POINT_GROUP = "a2rl.agents"

#: The agents that ship with a2rl (code registrations win over a plugin of the same name).
BUILTIN_AGENTS: dict[str, str] = {
    "reference": "a2rl.clients.reference:ReferenceConnector",
    "llm": "a2rl.clients.llm:LlmConnector",
    "claude-code": "a2rl.clients.claude_code:ClaudeCodeConnector",
    "codex": "a2rl.clients.codex:CodexConnector",
    "gemini-cli": "a2rl.clients.gemini:GeminiConnector",
    "openhands": "a2rl.clients.openhands:OpenHandsConnector",
}

AGENTS: Registry[Connector] = Registry("agent", group=ENTRY_POINT_GROUP, check=callable)
for _name, _target in BUILTIN_AGENTS.items():
    AGENTS.register(_name, _target, source="builtin")


def agent_names() -> list[str]:
    """Every agent name, built-in first then installed ones, without importing any."""
    return AGENTS.names()


def get_connector(name: str, **kwargs: Any) -> Connector:
    """A new connector for agent `name` (`UnknownName`, or `PluginLoadError` when its module
    cannot be imported or builds something that is not a connector; both `KeyError`s)."""
    connector = AGENTS.create(name, **kwargs)
    if not isinstance(connector, Connector):
        entry = AGENTS.entry(name)
        raise PluginLoadError(f"agent {name!r} ({entry.source}, {entry.target}) built a "
                              f"{type(connector).__name__}, not a connector (name, title, "
                              "kind, experimental, installed(), version())")
    return connector


def list_connectors() -> list[dict[str, Any]]:
    """One row per agent that loads; one that does not is shown as not installed, with why."""
    rows = []
    for name in agent_names():
        try:
            c = get_connector(name)
        except PluginLoadError as exc:
            rows.append({"name": name, "title": str(exc), "kind": "?", "experimental": False,
                         "installed": False, "version": None})
            continue
        installed = c.installed()
        rows.append({"name": name, "title": c.title, "kind": c.kind,
                     "experimental": c.experimental, "installed": installed,
                     "version": c.version() if installed else None})
    return rows
