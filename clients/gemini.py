"""Gemini CLI (`gemini -p`) as a process connector, with our MCP server as its only tool source.

Its settings live in `$HOME/.gemini/settings.json`. `tools.core` is an allow-list that also
applies to MCP tools, so `mcp_a2rl_*` leaves only ours (no shell, file or web built-ins); the
server is trusted so calls need no confirmation. API-key auth must be selected explicitly, or
a custom base URL fails with "Invalid auth method selected". Telemetry, usage statistics,
auto-update and folder trust are off so that a headless run never waits or calls home. Its
transcript is `--output-format stream-json` (`parse_stream`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import Field

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path
from .options import AgentOptions
from .transcript import RECOGNIZE_LINES, Message, Usage, bare_tool, count, json_lines, text_of

BINARY = "gemini"
KEY_ENV = "GEMINI_API_KEY"


class GeminiOptions(AgentOptions):
    """API-key auth is selected in its settings: the key comes from `GEMINI_API_KEY` in the
    environment or the option."""

    secret = frozenset({"gemini_api_key"})

    gemini_base_url: str = Field("", description="a Gemini-compatible endpoint "
                                 "(`GOOGLE_GEMINI_BASE_URL`); empty: Google's")
    gemini_api_key: str = Field("", description="the key, over `GEMINI_API_KEY` in the "
                                "environment")
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


def recognizes(docs: list[dict[str, Any]]) -> bool:
    """stream-json: `init`, `tool_use` and `tool_result` lines with a `tool_id`, and
    `message` lines with a role (OpenCode's events also have a `tool_use` type)."""
    return any(d.get("type") == "init"
               or (d.get("type") in ("tool_use", "tool_result") and "tool_id" in d)
               or (d.get("type") == "message" and "role" in d)
               for d in docs[:RECOGNIZE_LINES])


def _error_text(err: Any) -> str:
    return text_of(err.get("message") if isinstance(err, dict) else err)


def parse_stream(docs: list[dict[str, Any]]) -> list[Message]:
    """Gemini CLI's `--output-format stream-json` lines as messages; streamed text deltas
    are joined into one message."""
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        if t == "init":
            out.append(Message(role="info", text=f"session started: model {d.get('model')}"))
        elif t == "message":
            role = "user" if d.get("role") == "user" else "assistant"
            text = text_of(d.get("content"))
            if d.get("delta") and out and out[-1].role == role and out[-1].tool is None \
                    and out[-1].call_key == "delta":
                out[-1].text += text
            else:
                out.append(Message(role=role, text=text,
                                   call_key="delta" if d.get("delta") else None))
        elif t == "tool_use":
            m = Message(role="tool", tool=bare_tool(str(d.get("tool_name"))),
                        call_key=str(d.get("tool_id")), arguments=d.get("parameters"))
            by_key[str(d.get("tool_id"))] = m
            out.append(m)
        elif t == "tool_result":
            m2 = by_key.get(str(d.get("tool_id")))
            if m2 is not None:
                m2.is_error = d.get("status") == "error"
                m2.result = text_of(d.get("output")) or _error_text(d.get("error"))
        elif t == "error":
            out.append(Message(role="error", text=text_of(d.get("message"))))
        elif t == "result":
            ok = d.get("status") == "success"
            out.append(Message(role="result" if ok else "error", text=(
                "finished" if ok else _error_text(d.get("error")) or "failed")))
    for m in out:
        if m.call_key == "delta":
            m.call_key = None
    return out


def stream_usage(docs: list[dict[str, Any]]) -> Usage | None:
    """The last `result` event's stats."""
    for d in reversed(docs):
        stats = d.get("stats") if d.get("type") == "result" else None
        if isinstance(stats, dict):
            return Usage(prompt_tokens=count(stats.get("input_tokens")),
                         completion_tokens=count(stats.get("output_tokens")),
                         cached_tokens=count(stats.get("cached")),
                         source="gemini-cli result stats")
    return None


class GeminiConnector(CliConnector):
    binary_name = BINARY
    name = "gemini-cli"
    title = "Gemini CLI"
    experimental = False
    options_model = GeminiOptions

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """API-key auth is selected in its settings, so the key must be set."""
        if options.get("gemini_api_key") or os.environ.get(KEY_ENV):
            return []
        return [f"{KEY_ENV} in the environment (or --agent-option gemini_api_key=...)"]

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_stream(docs) if recognizes(docs) else None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return stream_usage(json_lines(data))

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
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home)
