"""The agent systems `a2rl run --agent` knows, each a small connector module loaded on use.

Built on `a2rl.registry.Registry`: the built-in connectors are `"module:Class"` strings, and an
installed package adds an agent through the `a2rl.agents` entry-point group, whose target is a
class (or factory) building a `Connector` (see docs/adding-a-task.md, "Adding an agent").
Adding a built-in agent is its module in clients/ and one line in `BUILTIN_AGENTS`.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from a2rl.registry import PluginLoadError, Registry

from .base import Connector, missing_members
from .transcript import Message, Usage, as_text

log = logging.getLogger(__name__)

#: The entry-point group an installed package declares its agents under.
ENTRY_POINT_GROUP = "a2rl.agents"

#: The agents that ship with a2rl (code registrations win over a plugin of the same name).
BUILTIN_AGENTS: dict[str, str] = {
    "reference": "a2rl.clients.reference:ReferenceConnector",
    "llm": "a2rl.clients.llm:LlmConnector",
    "claude-code": "a2rl.clients.claude_code:ClaudeCodeConnector",
    "codex": "a2rl.clients.codex:CodexConnector",
    "gemini-cli": "a2rl.clients.gemini:GeminiConnector",
    "opencode": "a2rl.clients.opencode:OpenCodeConnector",
    "openhands": "a2rl.clients.openhands:OpenHandsConnector",
}

#: The agent a run gets when none is named: scripted, it needs no model, key or network (the
#: demo's). Shared code names it through this constant, never by its name.
DEFAULT_AGENT = "reference"

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
    if missing := missing_members(connector):
        entry = AGENTS.entry(name)
        raise PluginLoadError(f"agent {name!r} ({entry.source}, {entry.target}) built a "
                              f"{type(connector).__name__}, not a connector: it lacks "
                              f"{', '.join(missing)} (subclass "
                              "a2rl.clients.base.BaseConnector for the defaults)")
    return cast(Connector, connector)


def _parsers(agent: str | None) -> list[tuple[str, Connector]]:
    """The run's agent first, then every other one that loads, in registry order."""
    names = agent_names()
    order = ([agent] if agent in names else []) + [n for n in names if n != agent]
    out = []
    for name in order:
        try:
            out.append((name, get_connector(name)))
        except Exception as exc:  # a broken plugin must not hide a transcript: skip it
            log.warning("agent %r cannot parse transcripts: %s", name, exc)
    return out


def parse_transcript(data: bytes | None, agent: str | None = None) -> tuple[str, list[Message]]:
    """(format, messages) of a stored transcript: the format is the name of the agent whose
    parser read it, "text" when none did (the bytes are shown as text), "none" without data.

    The run's agent (`agent`) is asked first; then every other agent, since a renamed or
    wrapped agent writes another's format and a store may come from a machine with agents
    this one lacks. A parser that fails on the agent's bytes counts as not recognizing them.
    """
    if not data:
        return "none", []
    for name, connector in _parsers(agent):
        try:
            messages = connector.parse_transcript(data)
        except Exception as exc:  # the bytes are the agent's: a parser's bug is logged
            log.warning("agent %r's transcript parser failed: %s", name, exc)
            continue
        if messages is not None:
            return name, messages
    return "text", as_text(data)


def transcript_usage(data: bytes | None, fmt: str) -> Usage | None:
    """The token totals a transcript states, read by the agent whose parser recognized it
    (`fmt`, as `parse_transcript` returns it); None for "text", "none" or an agent that
    does not load here."""
    if not data or fmt not in agent_names():
        return None
    try:
        return get_connector(fmt).transcript_usage(data)
    except Exception as exc:  # the bytes are the agent's: a reader's bug is logged
        log.warning("agent %r's usage reader failed: %s", fmt, exc)
        return None


def list_connectors() -> list[dict[str, Any]]:
    """One row per agent (`a2rl agents --json`): its name, title, kind, whether it is
    experimental, installed, its version, and how to install it (`install`, a connector's
    optional `install_hint`). One that does not load is shown as not installed, with why.

    The connectors are loaded in turn (a plugin's import is not made concurrent), then asked
    at once whether they are installed and their versions: each may start its CLI (a Node or
    Python program, a second or more each), and `a2rl agents` waited on them one by one."""
    loaded: list[tuple[str, Connector | PluginLoadError]] = []
    for name in agent_names():
        try:
            loaded.append((name, get_connector(name)))
        except PluginLoadError as exc:
            loaded.append((name, exc))

    def row(name: str, c: Connector | PluginLoadError) -> dict[str, Any]:
        if isinstance(c, PluginLoadError):
            return {"name": name, "title": str(c), "kind": "?", "experimental": False,
                    "installed": False, "version": None, "install": None}
        installed = c.installed()
        return {"name": name, "title": c.title, "kind": c.kind,
                "experimental": c.experimental, "installed": installed,
                "version": c.version() if installed else None,
                "install": getattr(c, "install_hint", "") or None}

    with ThreadPoolExecutor(max_workers=max(len(loaded), 1)) as pool:
        return list(pool.map(lambda pair: row(*pair), loaded))  # in the registry's order


def agent_lines(rows: list[dict[str, Any]]) -> list[str]:
    """`a2rl agents`' table: one line per row of `list_connectors`, then how to install the
    ones missing."""
    lines = []
    for r in rows:
        state = f"installed {r['version'] or ''}" if r["installed"] else "not installed"
        flag = " (experimental)" if r["experimental"] else ""
        lines.append(f"{r['name']:12} {r['kind']:9} {state:24} {r['title']}{flag}")
    by_hint: dict[str, list[str]] = {}
    for r in rows:
        if not r["installed"] and r.get("install"):
            by_hint.setdefault(r["install"], []).append(r["name"])
    lines += [f"to install {', '.join(names)}: {hint}" for hint, names in by_hint.items()]
    return lines
