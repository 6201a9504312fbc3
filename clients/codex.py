"""Codex CLI (`codex exec`) as a process connector, with our MCP server as its only tool source.

Everything lives in `CODEX_HOME/config.toml`, checked by `--strict-config` (an unknown key is
an error, not silently ignored). The shell, patch, image, web and agent built-ins are switched
off; three MCP-resource helpers remain (no switch exists). Our server is `required` so that
the first model request waits for its tools, and its tools run without approval prompts. The
run's token reaches Codex through an environment variable (`bearer_token_env_var`), never the
config file. Its transcript is `exec --json`'s event stream (`parse_events`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path
from .options import OpenAIProviderOptions
from .transcript import (
    RECOGNIZE_LINES,
    Message,
    Usage,
    arguments_of,
    bare_tool,
    count,
    json_lines,
    text_of,
)

BINARY = "codex"
TOKEN_ENV = "A2RL_MCP_TOKEN"
KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


TOOL_TIMEOUT_S = 120  # our tools long-poll up to 60 s; Codex's default is 60 s
# Built-in tools and helpers switched off under [features] (Codex 0.171).
FEATURES_OFF = ("shell_tool", "unified_exec", "view_image", "apps", "plugins",
                "image_generation", "sleep_tool", "tool_suggest", "skill_search", "browser_use",
                "computer_use", "goals")


def _s(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML for the ASCII values we write)."""
    return json.dumps(value)


def config_toml(ctx: AgentContext) -> str:
    base_url = ctx.options.get("openai_base_url") or DEFAULT_BASE_URL
    lines = []
    if ctx.model:  # an unknown name shows MCP tools directly; a known one may defer them
        lines.append(f"model = {_s(ctx.model)}")
    lines += [
        'model_provider = "a2rl"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        'web_search = "disabled"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.a2rl]",
        'name = "a2rl"',
        f"base_url = {_s(base_url)}",
        'wire_api = "responses"',
        f"env_key = {_s(KEY_ENV)}",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        *(f"{name} = false" for name in FEATURES_OFF),
        "",
        "[agents]",
        "enabled = false",
        "",
        "[tools]",
        "experimental_request_user_input = { enabled = false }",
        "",
        f"[mcp_servers.{SERVER_NAME}]",
        f"url = {_s(ctx.endpoint.url)}",
        f"bearer_token_env_var = {_s(TOKEN_ENV)}",
        "required = true",
        'default_tools_approval_mode = "approve"',
        "startup_timeout_sec = 30",
        f"tool_timeout_sec = {TOOL_TIMEOUT_S}",
    ]
    return "\n".join(lines) + "\n"


def recognizes(docs: list[dict[str, Any]]) -> bool:
    """`exec --json` events: `thread.*`, `turn.*` and `item.*` types."""
    return any(isinstance(d.get("type"), str)
               and d["type"].startswith(("thread.", "turn.", "item."))
               for d in docs[:RECOGNIZE_LINES])


def _call(m: Message, item: dict[str, Any]) -> None:
    """An `mcp_tool_call` item's result or error, onto its message."""
    if item.get("result") is not None:
        m.result = text_of((item["result"] or {}).get("content")
                           if isinstance(item["result"], dict) else item["result"])
    if item.get("error"):
        m.is_error = True
        m.result = text_of(item["error"].get("message")
                           if isinstance(item["error"], dict) else item["error"])
    if item.get("status") == "failed":
        m.is_error = True


def parse_events(docs: list[dict[str, Any]]) -> list[Message]:
    """Codex's `exec --json` events as messages; a tool call's started, updated and completed
    events are one message."""
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        t = d.get("type")
        item = d.get("item") if isinstance(d.get("item"), dict) else None
        if t in ("item.started", "item.updated", "item.completed") and item:
            it = item.get("type")
            if it == "mcp_tool_call":
                key = str(item.get("id"))
                m = by_key.get(key)
                if m is None:
                    m = Message(role="tool", tool=bare_tool(str(item.get("tool"))),
                                call_key=key, arguments=arguments_of(item.get("arguments")))
                    by_key[key] = m
                    out.append(m)
                _call(m, item)
            elif t == "item.completed" and it in ("agent_message", "assistant_message"):
                out.append(Message(role="assistant", text=text_of(item.get("text"))))
            elif t == "item.completed" and it == "reasoning":
                out.append(Message(role="thinking", text=text_of(item.get("text"))))
            elif t == "item.completed" and it == "error":
                out.append(Message(role="error", text=text_of(item.get("message"))))
        elif t == "thread.started":
            out.append(Message(role="info", text=f"thread {d.get('thread_id')} started"))
        elif t == "turn.failed":
            out.append(Message(role="error", text=text_of((d.get("error") or {}).get("message"))))
        elif t == "error":
            out.append(Message(role="error", text=text_of(d.get("message"))))
        elif t == "turn.completed":
            usage = d.get("usage") or {}
            out.append(Message(role="result", text="turn completed" + (
                f": {usage.get('input_tokens')} tokens in, {usage.get('output_tokens')} out"
                if usage else "")))
    return out


def events_usage(docs: list[dict[str, Any]]) -> Usage | None:
    """The `turn.completed` events' usage, summed over the turns."""
    turns = [d["usage"] for d in docs
             if d.get("type") == "turn.completed" and isinstance(d.get("usage"), dict)]
    if not turns:
        return None
    return Usage(prompt_tokens=sum(count(u.get("input_tokens")) for u in turns),
                 completion_tokens=sum(count(u.get("output_tokens")) for u in turns),
                 cached_tokens=sum(count(u.get("cached_input_tokens")) for u in turns),
                 source=f"codex turn.completed events ({len(turns)})")


class CodexConnector(CliConnector):
    binary_name = BINARY
    name = "codex"
    title = "Codex CLI"
    experimental = False
    options_model = OpenAIProviderOptions

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """Codex's provider reads its key from `env_key`, which must be set."""
        if options.get("openai_api_key") or os.environ.get(KEY_ENV):
            return []
        return [f"{KEY_ENV} in the environment (or --agent-option openai_api_key=...)"]

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_events(docs) if recognizes(docs) else None

    def transcript_usage(self, data: bytes) -> Usage | None:
        return events_usage(json_lines(data))

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        codex_home = ctx.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(config_toml(ctx))
        argv = [str(binary), "exec", "--json", "--skip-git-repo-check", "--ephemeral",
                "--strict-config", ctx.prompt]
        env = {"HOME": str(ctx.home), "CODEX_HOME": str(codex_home), "PATH": launch_path(),
               TOKEN_ENV: ctx.endpoint.token}
        key = ctx.options.get("openai_api_key") or os.environ.get(KEY_ENV)
        if key:
            env[KEY_ENV] = key
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home)
