"""Gemini CLI (`gemini -p`) as a process connector, with our MCP server as its only tool source.

Its settings live in `$HOME/.gemini/settings.json`. `tools.core` is an allow-list that also
applies to MCP tools, so `mcp_a2rl_*` leaves only ours (no shell, file or web built-ins); the
server is trusted so calls need no confirmation. API-key auth must be selected explicitly, or
a custom base URL fails with "Invalid auth method selected". Telemetry, usage statistics,
auto-update and folder trust are off so that a headless run never waits or calls home.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path

BINARY = "gemini"
KEY_ENV = "GEMINI_API_KEY"
TOOL_TIMEOUT_MS = 600_000  # per MCP request; our tools long-poll up to 60 s


def settings_json(ctx: AgentContext) -> dict[str, Any]:
    return {
        "mcpServers": {SERVER_NAME: {
            "httpUrl": ctx.endpoint.url, "headers": ctx.endpoint.headers,
            "trust": True, "timeout": TOOL_TIMEOUT_MS,
        }},
        "tools": {"core": [f"mcp_{SERVER_NAME}_*"]},
        "security": {"auth": {"selectedType": "gemini-api-key"},
                     "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True},
    }


class GeminiConnector(CliConnector):
    binary_name = BINARY
    name = "gemini-cli"
    title = "Gemini CLI"
    experimental = False

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """API-key auth is selected in its settings, so the key must be set."""
        if options.get("gemini_api_key") or os.environ.get(KEY_ENV):
            return []
        return [f"{KEY_ENV} in the environment (or --agent-option gemini_api_key=...)"]

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        conf = ctx.home / ".gemini"
        conf.mkdir(parents=True, exist_ok=True)
        path = conf / "settings.json"
        path.write_text(json.dumps(settings_json(ctx), indent=2))
        path.chmod(0o600)  # it holds the run's token
        argv = [str(binary), "-p", ctx.prompt, "--output-format", "stream-json"]
        if ctx.model:  # without -m, a routing call to a small model comes first
            argv += ["-m", ctx.model]
        env = {"HOME": str(ctx.home), "PATH": launch_path()}
        if ctx.options.get("gemini_base_url"):
            env["GOOGLE_GEMINI_BASE_URL"] = ctx.options["gemini_base_url"]
        key = ctx.options.get("gemini_api_key") or os.environ.get(KEY_ENV)
        if key:
            env[KEY_ENV] = key
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home, transcript="jsonl")
