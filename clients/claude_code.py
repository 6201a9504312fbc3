"""Claude Code (`claude -p`) as a process connector, with our MCP server as its only tool source.

`--tools ""` removes every built-in tool (Bash, Read, Edit, ...) and `--strict-mcp-config`
ignores any other MCP configuration, so the model sees only the `mcp__a2rl__*` tools;
`--allowedTools mcp__a2rl` lets them run without a permission prompt (the bypass modes are
refused when running as root). The agent only reaches our server over streamable HTTP with
the run's bearer token; its HOME is a private folder holding the MCP config.
"""

from __future__ import annotations

import json
import os

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path

BINARY = "claude"
TOOL_TIMEOUT_MS = 120_000  # our tools long-poll up to 60 s; Claude Code's default is lower


KEY_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class ClaudeCodeConnector(CliConnector):
    binary_name = BINARY
    name = "claude-code"
    title = "Claude Code"
    experimental = False

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """Its private home holds no login, so a key must come from us."""
        if any(options.get(k.lower()) or os.environ.get(k) for k in KEY_VARS):
            return []
        return [" or ".join(KEY_VARS) + " in the environment (or --agent-option "
                "anthropic_api_key=...)"]

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        ctx.home.mkdir(parents=True, exist_ok=True)
        config = ctx.home / "a2rl-mcp.json"
        config.write_text(json.dumps({"mcpServers": {SERVER_NAME: {
            "type": "http", "url": ctx.endpoint.url, "headers": ctx.endpoint.headers,
            "alwaysLoad": True,  # wait for our server before the first model request
        }}}, indent=2))
        config.chmod(0o600)  # it holds the run's token
        argv = [str(binary), "-p", ctx.prompt, "--output-format", "stream-json", "--verbose",
                "--mcp-config", str(config), "--strict-mcp-config",
                "--tools", "", "--allowedTools", f"mcp__{SERVER_NAME}"]
        if ctx.model:
            argv += ["--model", ctx.model]
        env = {
            "HOME": str(ctx.home),
            "PATH": launch_path(),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # else it calls its vendor's hosts
            "MCP_CONNECTION_NONBLOCKING": "0",
            "MCP_TOOL_TIMEOUT": str(TOOL_TIMEOUT_MS),
            "DISABLE_AUTOUPDATER": "1",
            "ENABLE_TOOL_SEARCH": "false",  # else a DeferredToolPlaceholder tool is offered
        }
        if ctx.options.get("anthropic_base_url"):
            env["ANTHROPIC_BASE_URL"] = ctx.options["anthropic_base_url"]
        for key in KEY_VARS:
            value = ctx.options.get(key.lower()) or os.environ.get(key)
            if value:
                env[key] = value
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home, transcript="jsonl")
