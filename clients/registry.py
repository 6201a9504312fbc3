"""The agent systems `a2rl run --agent` knows, each a small connector module loaded on use."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> (module, class)
CONNECTORS: dict[str, tuple[str, str]] = {
    "reference": ("a2rl.clients.reference", "ReferenceConnector"),
    "llm": ("a2rl.clients.llm", "LlmConnector"),
    "claude-code": ("a2rl.clients.claude_code", "ClaudeCodeConnector"),
    "codex": ("a2rl.clients.codex", "CodexConnector"),
    "gemini-cli": ("a2rl.clients.gemini", "GeminiConnector"),
    "openhands": ("a2rl.clients.openhands", "OpenHandsConnector"),
}


def get_connector(name: str, **kwargs: Any) -> Any:
    if name not in CONNECTORS:
        raise KeyError(f"unknown agent {name!r}; known agents: {', '.join(CONNECTORS)}")
    module, cls = CONNECTORS[name]
    try:
        factory = getattr(import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise KeyError(f"agent {name!r} is not available in this installation ({exc})") from None
    return factory(**kwargs)


def list_connectors() -> list[dict[str, Any]]:
    rows = []
    for name in CONNECTORS:
        try:
            c = get_connector(name)
        except KeyError:
            continue
        installed = c.installed()
        rows.append({"name": name, "title": c.title, "kind": c.kind,
                     "experimental": c.experimental, "installed": installed,
                     "version": c.version() if installed else None})
    return rows
