"""OpenCode (`opencode run`) as a process connector, with our MCP server as its only tool source.

Its whole configuration is one file, `OPENCODE_CONFIG`, written into the agent's private home
(XDG folders there too, so no user config, plugin, session store or cache of the machine is
read or written). The model is an OpenAI-compatible chat-completions endpoint (the bundled
`@ai-sdk/openai-compatible` provider: vLLM, OpenRouter, OpenAI, ...), its key read from the
environment. Our server is a `remote` MCP entry whose bearer header is read from an
environment variable (`{env:...}`), never written to the file. `permission` denies every
tool (`"*"`) but ours (`a2rl_*`): a denied tool is removed from what the model is offered, so
its built-ins (bash, read, edit, write, grep, webfetch, task, ...) never reach it.
`--pure` skips external plugins and `npm_config_offline` its background install of its
plugin SDK (both would be fetched from npm at every start). A server's `timeout` bounds each
MCP request (default 5 s, shorter than our long polls). Its transcript is `run --format
json`'s event stream (`parse_events`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, launch_path
from .options import OpenAIProviderOptions
from .transcript import RECOGNIZE_LINES, Message, arguments_of, bare_tool, json_lines, text_of

BINARY = "opencode"
PROVIDER = "a2rl"  # the provider's id in its config; the model is `a2rl/<model>`
TOKEN_ENV = "A2RL_MCP_TOKEN"
KEY_ENV = "OPENAI_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
TOOL_TIMEOUT_MS = 120_000  # our tools long-poll up to 60 s
# Start-up work that would reach the network or the user's machine, switched off.
QUIET_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # the model catalogue is a download
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # else it reads ~/.claude prompts and skills
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    # At every start it installs its plugin SDK into the config folder from npm, in the
    # background; nothing we run needs it (`--pure`, no custom tools), so it fails at once.
    "npm_config_offline": "true",
}


def config_json(ctx: AgentContext) -> dict[str, Any]:
    model = ctx.model or ""
    base_url = ctx.options.get("openai_base_url") or DEFAULT_BASE_URL
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{model}",  # titles and summaries: the same endpoint
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "a2rl",
            "options": {"baseURL": base_url, "apiKey": "{env:" + KEY_ENV + "}"},
            "models": {model: {"name": model, "tool_call": True}},
        }},
        "enabled_providers": [PROVIDER],
        "mcp": {SERVER_NAME: {
            "type": "remote", "url": ctx.endpoint.url, "enabled": True,
            "headers": {"Authorization": "Bearer {env:" + TOKEN_ENV + "}"},
            "timeout": TOOL_TIMEOUT_MS,
        }},
        "permission": {"*": "deny", f"{SERVER_NAME}_*": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def recognizes(docs: list[dict[str, Any]]) -> bool:
    """`run --format json`: events with a `type`, a `sessionID` and a `part`."""
    return any(isinstance(d.get("type"), str) and "sessionID" in d
               and isinstance(d.get("part"), dict) for d in docs[:RECOGNIZE_LINES])


def parse_events(docs: list[dict[str, Any]]) -> list[Message]:
    """OpenCode's `run --format json` events as messages (one per text, reasoning or tool
    part; a tool part carries its input, output and status)."""
    out: list[Message] = []
    for d in docs:
        t, part = d.get("type"), d.get("part")
        if not isinstance(part, dict):
            if t == "error":
                err = d.get("error")
                out.append(Message(role="error", text=text_of(
                    (err.get("data") or {}).get("message") or err.get("name")
                    if isinstance(err, dict) else err)))
            continue
        if t == "text":
            out.append(Message(role="assistant", text=text_of(part.get("text"))))
        elif t == "reasoning":
            out.append(Message(role="thinking", text=text_of(part.get("text"))))
        elif t == "tool_use":
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            failed = state.get("status") == "error"
            out.append(Message(role="tool", tool=bare_tool(str(part.get("tool"))),
                               call_key=str(part.get("callID")),
                               arguments=arguments_of(state.get("input")),
                               result=text_of(state.get("error") if failed
                                              else state.get("output")),
                               is_error=failed))
        elif t == "step_finish":
            tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            out.append(Message(role="result", text=f"step finished ({part.get('reason')})" + (
                f": {tokens.get('input')} tokens in, {tokens.get('output')} out"
                if tokens else "")))
    return out


class OpenCodeConnector(CliConnector):
    binary_name = BINARY
    name = "opencode"
    title = "OpenCode"
    experimental = False
    options_model = OpenAIProviderOptions

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """Its provider is configured by us: it needs a model name and a key."""
        missing = [] if model else ["a model (--model NAME, served by the endpoint)"]
        if not (options.get("openai_api_key") or os.environ.get(KEY_ENV)):
            missing.append(f"{KEY_ENV} in the environment (or --agent-option "
                           "openai_api_key=...)")
        return missing

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        docs = json_lines(data)
        return parse_events(docs) if recognizes(docs) else None

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        home = ctx.home
        config = home / ".config" / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(config_json(ctx), indent=2))
        argv = [str(binary), "run", "--format", "json", "--pure", ctx.prompt]
        env = {"HOME": str(home), "PATH": launch_path(), "OPENCODE_CONFIG": str(config),
               "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_DATA_HOME": str(home / ".local" / "share"),
               "XDG_CACHE_HOME": str(home / ".cache"),
               "XDG_STATE_HOME": str(home / ".local" / "state"),
               TOKEN_ENV: ctx.endpoint.token, **QUIET_ENV}
        key = ctx.options.get("openai_api_key") or os.environ.get(KEY_ENV)
        if key:
            env[KEY_ENV] = key
        return AgentLaunch(argv=argv, env=env, cwd=home)
