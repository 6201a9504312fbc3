"""Claude Code (`claude -p`) as a process connector, with our MCP server as its only tool source.

`--tools ""` removes every built-in tool (Bash, Read, Edit, ...) and `--strict-mcp-config`
ignores any other MCP configuration, so the model sees only the `mcp__a2rl__*` tools;
`--allowedTools mcp__a2rl` lets them run without a permission prompt (the bypass modes are
refused when running as root). The agent only reaches our server over streamable HTTP with
the run's bearer token; its HOME is a private folder holding the MCP config. Its transcript
is `--output-format stream-json` (`parse_stream`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import Field

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path
from .options import AgentOptions
from .transcript import (
    MAX_TEXT,
    RECOGNIZE_LINES,
    Message,
    Usage,
    bare_tool,
    count,
    json_lines,
    text_of,
)

BINARY = "claude"
TOOL_TIMEOUT_MS = 120_000  # our tools long-poll up to 60 s; Claude Code's default is lower


KEY_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class ClaudeCodeOptions(AgentOptions):
    """Its key comes from the environment (`ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN`) or
    from these options; its private home holds no login."""

    secret = frozenset({"anthropic_api_key", "anthropic_auth_token"})

    anthropic_base_url: str = Field("", description="an Anthropic-compatible endpoint "
                                    "(`ANTHROPIC_BASE_URL`); empty: Anthropic's")
    anthropic_api_key: str = Field("", description="the key, over `ANTHROPIC_API_KEY` in "
                                   "the environment")
    anthropic_auth_token: str = Field("", description="a bearer token, over "
                                      "`ANTHROPIC_AUTH_TOKEN` in the environment")


def recognizes(docs: list[dict[str, Any]]) -> bool:
    """stream-json: `system`/`init` first, then `assistant` and `user` lines with a message."""
    return any((d.get("type") in ("assistant", "user") and isinstance(d.get("message"), dict))
               or (d.get("type") == "system" and d.get("subtype") == "init")
               for d in docs[:RECOGNIZE_LINES])


def parse_stream(docs: list[dict[str, Any]]) -> list[Message]:
    """Claude Code's `--output-format stream-json --verbose` lines as messages."""
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        if t == "system" and d.get("subtype") == "init":
            tools = d.get("tools") or []
            out.append(Message(role="info", text=f"session started: model {d.get('model')}, "
                               f"{len(tools)} tools"))
        elif t in ("assistant", "user"):
            content = (d.get("message") or {}).get("content")
            if isinstance(content, str):
                out.append(Message(role=t, text=content[:MAX_TEXT]))
                continue
            for b in content or []:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text" and b.get("text", "").strip():
                    out.append(Message(role=t, text=b["text"][:MAX_TEXT]))
                elif b.get("type") == "thinking":
                    out.append(Message(role="thinking", text=text_of(b.get("thinking"))))
                elif b.get("type") == "tool_use":
                    m = Message(role="tool", tool=bare_tool(str(b.get("name"))),
                                call_key=b.get("id"), arguments=b.get("input"))
                    by_key[str(b.get("id"))] = m
                    out.append(m)
                elif b.get("type") == "tool_result":
                    m2 = by_key.get(str(b.get("tool_use_id")))
                    if m2 is not None:
                        m2.result, m2.is_error = text_of(b.get("content")), bool(b.get("is_error"))
        elif t == "result":
            err = bool(d.get("is_error")) or d.get("subtype") not in (None, "success")
            out.append(Message(role="error" if err else "result",
                               text=text_of(d.get("result")) or str(d.get("subtype") or "")))
    return out


def _usage_of(u: dict[str, Any]) -> tuple[int, int, int, int]:
    """(prompt with cache, completion, cache read, cache written) of one usage object."""
    cached, written = count(u.get("cache_read_input_tokens")), count(
        u.get("cache_creation_input_tokens"))
    return (count(u.get("input_tokens")) + cached + written, count(u.get("output_tokens")),
            cached, written)


def stream_usage(docs: list[dict[str, Any]]) -> Usage | None:
    """The final `result` event's usage and `total_cost_usd`; without one, the assistant
    messages', each counted once by message id (its content blocks repeat it)."""
    for d in reversed(docs):
        if d.get("type") == "result" and isinstance(d.get("usage"), dict):
            p, c, k, w = _usage_of(d["usage"])
            cost = d.get("total_cost_usd")
            return Usage(prompt_tokens=p, completion_tokens=c, cached_tokens=k,
                         cache_write_tokens=w,
                         cost_usd=float(cost) if isinstance(cost, int | float) else None,
                         source="claude-code result event")
    seen: dict[str, tuple[int, int, int, int]] = {}
    for d in docs:
        msg = d.get("message") if d.get("type") == "assistant" else None
        if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
            seen[str(msg.get("id"))] = _usage_of(msg["usage"])
    if not seen:
        return None
    p, c, k, w = (sum(v[i] for v in seen.values()) for i in range(4))
    return Usage(prompt_tokens=p, completion_tokens=c, cached_tokens=k, cache_write_tokens=w,
                 source="claude-code assistant messages (no result event)")


class ClaudeCodeConnector(CliConnector):
    binary_name = BINARY
    name = "claude-code"
    title = "Claude Code"
    experimental = False
    options_model = ClaudeCodeOptions

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """Its private home holds no login, so a key must come from us."""
        if any(options.get(k.lower()) or os.environ.get(k) for k in KEY_VARS):
            return []
        return [" or ".join(KEY_VARS) + " in the environment (or --agent-option "
                "anthropic_api_key=...)"]

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_stream(docs) if recognizes(docs) else None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return stream_usage(json_lines(data))

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
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home)
