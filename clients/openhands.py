"""OpenHands CLI (`openhands --headless`) as a process connector: experimental, not verified.

The current OpenHands CLI (PyPI `openhands` 1.x, on top of `openhands-sdk`) cannot be
installed here: the package index this project is built from only carries the 2024
`openhands-ai` 0.9 line and a placeholder `openhands` 0.0.0, and `openhands-sdk` is missing, so
the connector was never driven end to end. It writes what the CLI's documentation describes:
`~/.openhands/mcp.json` with our server as a streamable-HTTP entry with the run's bearer header,
LLM settings from environment variables (`--override-with-envs`), and `--always-approve` so
that headless tool calls do not wait for a human. Caveat that keeps it experimental: the CLI
re-attaches its default tools (terminal, file editor, task tracker) when it loads an agent, so
they cannot be switched off from configuration; they act only on the agent's private home, not
on the run's workspace, which stays reachable through our MCP tools alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path

BINARY = "openhands"
PASSED_THROUGH = ("LLM_API_KEY", "LLM_MODEL", "LLM_BASE_URL")


def mcp_json(ctx: AgentContext) -> dict[str, Any]:
    return {"mcpServers": {SERVER_NAME: {
        "url": ctx.endpoint.url, "transport": "http", "headers": ctx.endpoint.headers,
    }}}


def write_config(ctx: AgentContext) -> Path:
    """Write `HOME/.openhands/mcp.json` (0600: it holds the run's token); returns its path."""
    conf = ctx.home / ".openhands"
    conf.mkdir(parents=True, exist_ok=True)
    path = conf / "mcp.json"
    path.write_text(json.dumps(mcp_json(ctx), indent=2))
    path.chmod(0o600)
    return path


class OpenHandsConnector(CliConnector):
    binary_name = BINARY
    name = "openhands"
    title = "OpenHands CLI"
    experimental = True

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        write_config(ctx)
        argv = [str(binary), "--headless", "--json", "--override-with-envs", "--always-approve",
                "-t", ctx.prompt]
        env = {"HOME": str(ctx.home), "PATH": launch_path()}
        for key in PASSED_THROUGH:
            if os.environ.get(key):
                env[key] = os.environ[key]
        if ctx.model:
            env["LLM_MODEL"] = ctx.model
        base_url = ctx.options.get("llm_base_url") or ctx.options.get("openai_base_url")
        if base_url:
            env["LLM_BASE_URL"] = base_url
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home)
