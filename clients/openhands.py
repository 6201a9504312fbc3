"""OpenHands CLI (`openhands --headless --json`) as a process connector, our tools its only ones.

The CLI (PyPI `openhands`, pinned in `clients/openhands-requirements.txt`, its dependencies in
`openhands-constraints.txt`) needs Python 3.12: `scripts/openhands.sh` installs it into its
own virtual environment in the cache folder (`venv_dir`), since its pins would clash with ours.
Everything it reads is in the agent's private home, `~/.openhands`:

- `mcp.json`: our server as a streamable-HTTP entry with the run's bearer header (0600);
- `agent_settings.json`: the agent, whose `filter_tools_regex` keeps only our server's tools.
  The CLI re-attaches its default tools (terminal, file editor, task tracker, sub-agent task)
  at every start, but the filter applies after them, so the model is offered ours and the two
  built-ins every OpenHands agent has and that act on nothing (`finish`, `think`). The
  filtered tools are still set up (its terminal may start a shell in the agent's sandbox),
  but nothing can call them.

The model comes from `--override-with-envs` (`LLM_MODEL`, a LiteLLM name such as
`openai/NAME` for an OpenAI-compatible endpoint; `LLM_BASE_URL`; `LLM_API_KEY`), never written
to a file. LiteLLM's price table is read from its package, not downloaded. OpenHands always
runs an LLM security analyzer: each action's tool schema asks the model for a `security_risk`,
which it strips before the call reaches us. Its transcript is `--json`'s event stream: each
event a pretty-printed JSON object after a `--JSON Event--` line, amid the terminal's spinner
(`parse_events`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import Field

from .base import SERVER_NAME, AgentContext, AgentLaunch
from .npm_clis import CliConnector, cache_root, program_version
from .options import AgentOptions
from .transcript import Message, arguments_of, bare_tool, text_of

BINARY = "openhands"
REQUIREMENTS = Path(__file__).with_name("openhands-requirements.txt")
CONSTRAINTS = Path(__file__).with_name("openhands-constraints.txt")
KEY_ENV = "LLM_API_KEY"
MARKER = "--JSON Event--"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
# Its always-present built-ins that act on nothing (ending the run, a note to itself).
HARMLESS = ("finish", "think")


def pinned_version() -> str:
    """The `openhands==X` pin of clients/openhands-requirements.txt."""
    match = re.search(r"^openhands==([\w.]+)\s*$", REQUIREMENTS.read_text(), re.M)
    if match is None:
        raise ValueError(f"{REQUIREMENTS.name} pins no openhands==VERSION")
    return match.group(1)


def venv_dir() -> Path:
    """The virtual environment scripts/openhands.sh installs the pinned CLI into: named after
    the pin and the first 16 hex digits of the sha256 of the two files, as the script does."""
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + CONSTRAINTS.read_bytes()).hexdigest()[:16]
    return cache_root() / f"openhands-{pinned_version()}-{key}"


def cli_binary() -> Path | None:
    """The pinned CLI in its environment when installed, else an `openhands` on PATH."""
    pinned = venv_dir() / "bin" / BINARY
    if pinned.exists() and os.access(pinned, os.X_OK):
        return pinned
    found = shutil.which(BINARY)
    return Path(found) if found else None


def installed_version(binary: Path) -> str | None:
    """Its version from its environment's package metadata (starting the CLI takes seconds),
    else from `openhands --version`."""
    for dist in sorted(binary.parent.parent.glob("lib/python3*/site-packages/openhands-*"
                                                  ".dist-info")):
        match = re.fullmatch(r"openhands-([\w.]+)\.dist-info", dist.name)
        if match:
            return match.group(1)
    return program_version(binary)


def tool_filter() -> str:
    """A regex matching exactly our server's tool names (OpenHands names a single server's
    tools bare)."""
    # the tools (the MCP SDK among their imports, ~0.35 s) only when a run is prepared:
    # `a2rl agents` and the viewer's transcripts load this module
    from a2rl.tools import TOOLS

    return "^(" + "|".join(re.escape(fn.__name__) for fn, _ in TOOLS) + ")$"


def mcp_json(ctx: AgentContext) -> dict[str, Any]:
    return {"mcpServers": {SERVER_NAME: {
        "url": ctx.endpoint.url, "transport": "http", "headers": ctx.endpoint.headers,
    }}}


def agent_settings(ctx: AgentContext) -> dict[str, Any]:
    """The agent as the CLI stores it; the LLM's fields come from the environment."""
    return {"kind": "Agent", "llm": {"model": ctx.model or "", "usage_id": "agent"},
            "tools": [], "filter_tools_regex": tool_filter()}


def write_config(ctx: AgentContext) -> Path:
    """Write `HOME/.openhands/{mcp,agent_settings}.json` (0600: the first holds the run's
    token); returns the folder."""
    conf = ctx.home / ".openhands"
    conf.mkdir(parents=True, exist_ok=True)
    for name, doc in (("mcp.json", mcp_json(ctx)), ("agent_settings.json",
                                                    agent_settings(ctx))):
        path = conf / name
        path.write_text(json.dumps(doc, indent=2))
        path.chmod(0o600)
    return conf


def unwrap(text: str) -> str:
    """JSON text with the terminal's line wrapping undone: a JSON string holds no raw line
    break, so one inside a string was put there by the wrapping (even right after a
    backslash, whose escape goes on to the next character)."""
    out, in_string, escaped = [], False, False
    for ch in text:
        if ch == "\n" and in_string:
            continue
        out.append(ch)
        if escaped:
            escaped = False
        elif ch == "\\" and in_string:
            escaped = True
        elif ch == '"':
            in_string = not in_string
    return "".join(out)


def events(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects that follow each `--JSON Event--` line. Its terminal UI prints them
    through a live spinner, which wraps their lines at its width and interleaves its own lines
    and escapes; those are dropped, the wrapping undone, a block that still does not parse
    skipped."""
    text = ANSI.sub("", data.decode("utf-8", errors="replace"))
    out = []
    for block in text.split(MARKER)[1:]:
        lines = [ln for ln in block.splitlines()
                 if ln.strip() and not re.match(r"\s*[\u2800-\u28ff]", ln)]
        body = unwrap("\n".join(lines))
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end < start:
            continue
        try:
            doc = json.loads(body[start:end + 1])
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(text_of(c.get("text")) for c in content
                         if isinstance(c, dict) and c.get("type") == "text")
    return text_of(content)


def parse_events(docs: list[dict[str, Any]]) -> list[Message]:
    """OpenHands' events as messages: messages, actions (a call, with the thought before it),
    their observations or errors paired by `tool_call_id`."""
    out: list[Message] = []
    by_key: dict[str, Message] = {}
    for d in docs:
        kind = d.get("kind")
        if kind == "MessageEvent":
            msg = d.get("llm_message") if isinstance(d.get("llm_message"), dict) else {}
            role = "user" if msg.get("role") == "user" else "assistant"
            out.append(Message(role=role, text=_content_text(msg.get("content"))))
        elif kind == "ActionEvent":
            thought = _content_text(d.get("thought"))
            if thought.strip():
                out.append(Message(role="thinking", text=thought))
            action = d.get("action") if isinstance(d.get("action"), dict) else {}
            tool = str(d.get("tool_name"))
            if tool == "finish":
                out.append(Message(role="result", text=text_of(action.get("message"))))
                continue
            args = action.get("data") if action.get("kind") == "MCPToolAction" else {
                k: v for k, v in action.items() if k != "kind"}
            call = d.get("tool_call") if isinstance(d.get("tool_call"), dict) else {}
            m = Message(role="tool", tool=bare_tool(tool), call_key=str(d.get("tool_call_id")),
                        arguments=args if args is not None else arguments_of(
                            call.get("arguments")))
            by_key[m.call_key or ""] = m
            out.append(m)
        elif kind == "ObservationEvent":
            obs = d.get("observation") if isinstance(d.get("observation"), dict) else {}
            m2 = by_key.get(str(d.get("tool_call_id")))
            if m2 is not None:
                m2.result = _content_text(obs.get("content"))
                m2.is_error = bool(obs.get("is_error"))
        elif kind == "AgentErrorEvent":
            m3 = by_key.get(str(d.get("tool_call_id")))
            if m3 is not None:
                m3.result, m3.is_error = text_of(d.get("error")), True
            else:
                out.append(Message(role="error", text=text_of(d.get("error"))))
    return out


class OpenHandsOptions(AgentOptions):
    """`--model` is a LiteLLM name (`openai/NAME`, `anthropic/NAME`); the key comes from
    `LLM_API_KEY` in the environment or the option."""

    secret = frozenset({"llm_api_key"})

    llm_base_url: str = Field("", description="the model's endpoint (`LLM_BASE_URL`), e.g. an "
                              "OpenAI-compatible one for `openai/NAME`; empty: the "
                              "provider's")
    llm_api_key: str = Field("", description="the key, over `LLM_API_KEY` in the environment")


class OpenHandsConnector(CliConnector):
    binary_name = BINARY
    name = "openhands"
    title = "OpenHands CLI"
    experimental = False
    options_model = OpenHandsOptions
    install_hint = "scripts/openhands.sh (needs Python 3.12)"

    def installed(self) -> bool:
        return cli_binary() is not None

    def version(self) -> str | None:
        binary = cli_binary()
        return installed_version(binary) if binary else None

    def binary(self) -> Path:
        binary = cli_binary()
        if binary is None:
            raise FileNotFoundError("openhands is not installed: run scripts/openhands.sh "
                                    "(it needs Python 3.12), or install it on PATH")
        return binary

    def missing_config(self, options: dict[str, str], model: str | None) -> list[str]:
        """The model is a LiteLLM name, and its key comes from us."""
        missing = [] if model else ["a model (--model, a LiteLLM name such as "
                                    "openai/NAME or anthropic/NAME)"]
        if not (options.get("llm_api_key") or os.environ.get(KEY_ENV)):
            missing.append(f"{KEY_ENV} in the environment (or --agent-option llm_api_key=...)")
        return missing

    def parse_transcript(self, data: bytes) -> list[Message] | None:
        if MARKER.encode() not in data:
            return None
        docs = events(data)
        if not any(d.get("kind") in ("MessageEvent", "ActionEvent") for d in docs):
            return None
        return parse_events(docs)

    def prepare(self, ctx: AgentContext) -> AgentLaunch:
        binary = self.binary()
        write_config(ctx)
        argv = [str(binary), "--headless", "--json", "--override-with-envs", "--always-approve",
                "--exit-without-confirmation", "-t", ctx.prompt]
        env = {"HOME": str(ctx.home), "PATH": os.pathsep.join(
                   [str(binary.parent), "/usr/local/bin", "/usr/bin", "/bin"]),
               "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else a download at every start
               "NO_COLOR": "1"}
        if ctx.model:
            env["LLM_MODEL"] = ctx.model
        base_url = ctx.options.get("llm_base_url")
        if base_url:
            env["LLM_BASE_URL"] = base_url
        key = ctx.options.get("llm_api_key") or os.environ.get(KEY_ENV)
        if key:
            env[KEY_ENV] = key
        return AgentLaunch(argv=argv, env=env, cwd=ctx.home)
