"""The real agent CLIs, driven headless against our HTTP MCP server and a fake model API.

Each CLI is the pinned npm package (scripts/agent-clis.sh), launched exactly as its connector
says, with a private HOME, no API key and no network: a local fake of its model protocol
scripts the tool calls. The tests check what matters for a fair benchmark: the model is offered
our tools and none of the CLI's built-ins, the calls reach our server and are recorded for the
run, a refused submission is recorded as refused, and stdout is a JSONL transcript.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from a2rl.clients.base import SERVER_NAME, AgentContext, McpEndpoint, ProcessConnector
from a2rl.clients.claude_code import ClaudeCodeConnector
from a2rl.clients.codex import CodexConnector
from a2rl.clients.gemini import GeminiConnector
from a2rl.clients.npm_clis import cli_path
from a2rl.clients.opencode import OpenCodeConnector
from a2rl.clients.openhands import OpenHandsConnector, pinned_version, tool_filter
from a2rl.server import create_run, finish_run
from a2rl.tools import TOOLS

from .baseline_seed import baseline_rows, seed_baseline  # noqa: F401  (a fixture)
from .conftest import require_bwrap
from .fake_model_apis import (
    FakeAnthropic,
    FakeChatCompletions,
    FakeGemini,
    FakeModelApi,
    FakeResponses,
    Step,
)
from .helpers import calls

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]
A2RL = str(Path(sys.executable).parent / "a2rl")
OURS = {"list_files", "run_command", "budget_status", "submit_checkpoint"}
SCRIPT = [Step("list_files", {"path": "."}), Step("run_command", {"command": "echo hello"}),
          Step("budget_status"), Step("submit_checkpoint", {"path": "output/none"})]
# Built-in tools of the CLIs that must never reach the model (lower-cased).
BUILTINS = {"bash", "read", "edit", "write", "multiedit", "glob", "grep", "webfetch",
            "websearch", "task", "agent", "notebookedit", "todowrite", "shell", "exec_command",
            "apply_patch", "update_plan", "view_image", "web_search", "run_shell_command",
            "read_file", "write_file", "replace", "search_file_content",
            "list_directory", "google_web_search", "web_fetch", "save_memory",
            "read_many_files", "write_todos", "terminal", "file_editor", "task_tracker",
            "execute_bash", "str_replace_editor", "browser_navigate"}
ALL_OURS = {fn.__name__ for fn, _ in TOOLS}
# Codex keeps three MCP-resource helpers that no switch removes (see the brief).
CODEX_EXTRAS = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"}


@dataclass
class Cli:
    connector: Callable[[], ProcessConnector]
    fake: Callable[[list[Step]], FakeModelApi]
    options: Callable[[FakeModelApi], dict[str, str]]
    ours: Callable[[str], str | None]  # offered name -> our bare tool name, None if not ours
    extras: frozenset[str] = frozenset()
    model: Callable[[str], str] = lambda m: m  # the fake's model as the CLI names it
    install: str = "agent_clis"  # the fixture that installs it
    jsonl: bool = True  # its stdout is JSON lines (OpenHands': pretty-printed events)


def _strip(prefix: str) -> Callable[[str], str | None]:
    return lambda name: name[len(prefix):] if name.startswith(prefix) else None


CLIS = {
    "claude-code": Cli(ClaudeCodeConnector, FakeAnthropic,
                       lambda f: {"anthropic_base_url": f.url},
                       _strip(f"mcp__{SERVER_NAME}__")),
    "codex": Cli(CodexConnector, FakeResponses,
                 lambda f: {"openai_base_url": f.url + "/v1"},
                 _strip(f"mcp__{SERVER_NAME}/"), frozenset(CODEX_EXTRAS)),
    "gemini-cli": Cli(GeminiConnector, FakeGemini,
                      lambda f: {"gemini_base_url": f.url},
                      _strip(f"mcp_{SERVER_NAME}_")),
    "opencode": Cli(OpenCodeConnector, FakeChatCompletions,
                    lambda f: {"openai_base_url": f.url + "/v1"},
                    _strip(f"{SERVER_NAME}_")),
    # OpenHands names a single server's tools bare; `finish` and `think` act on nothing.
    "openhands": Cli(OpenHandsConnector, FakeChatCompletions,
                     lambda f: {"llm_base_url": f.url + "/v1"},
                     lambda n: n if n in ALL_OURS else None, frozenset({"finish", "think"}),
                     model=lambda m: f"openai/{m}", install="openhands_cli", jsonl=False),
}
DUMMY_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-dummy", "OPENAI_API_KEY": "sk-dummy",
              "GEMINI_API_KEY": "dummy", "LLM_API_KEY": "dummy"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mcp_url(settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """`a2rl serve --http` as a subprocess on a free port, serving this test's store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url)
    port = _free_port()
    proc = subprocess.Popen([A2RL, "serve", "--http", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def _drive(cli: Cli, script: list[Step], settings, store, mcp_url: str,  # type: ignore[no-untyped-def]
           tmp_path: Path) -> tuple[FakeModelApi, str, subprocess.CompletedProcess[str]]:
    require_bwrap()
    created = create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
    try:
        with cli.fake(script) as fake:
            ctx = AgentContext(run_id=created.run.id, prompt="Solve the task in TASK.md.",
                               home=tmp_path / "agent-home",
                               endpoint=McpEndpoint(url=mcp_url, token=created.token),
                               model=cli.model(fake.model), budget_s=1800,
                               options=cli.options(fake))
            launch = cli.connector().prepare(ctx)
            env = {"PATH": "/usr/bin:/bin", **DUMMY_KEYS, **launch.env}
            started = time.monotonic()
            p = subprocess.run(launch.argv, env=env, cwd=launch.cwd, capture_output=True,
                               text=True, timeout=120, stdin=subprocess.DEVNULL)
            print(f"{ctx.home.name}: {time.monotonic() - started:.1f}s, exit {p.returncode}")
    finally:
        finish_run(settings, store, created.run.id)
    return fake, created.run.id, p


def _jsonl(stdout: str) -> list[dict]:  # type: ignore[type-arg]
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, "no transcript on stdout"
    return [json.loads(ln) for ln in lines]


@pytest.mark.parametrize("name", list(CLIS))
def test_cli_uses_only_our_tools(name, request, settings, store, mcp_url,  # type: ignore[no-untyped-def]
                                 tmp_path) -> None:
    cli = CLIS[name]
    request.getfixturevalue(cli.install)
    assert cli.connector().installed(), f"{name} is not found after scripts/agent-clis.sh"
    fake, run_id, p = _drive(cli, SCRIPT, settings, store, mcp_url, tmp_path)
    detail = f"exit {p.returncode}\nstdout: {p.stdout[-3000:]}\nstderr: {p.stderr[-3000:]}"
    assert p.returncode == 0, detail

    offered = fake.offered_tools()
    ours = {cli.ours(n) for n in offered} - {None}
    assert ours >= OURS, f"our tools missing from {offered}"
    foreign = [n for n in offered if cli.ours(n) is None and n not in cli.extras]
    assert not foreign, f"{name} offered tools that are not ours: {foreign}"
    assert not {n.lower().rpartition("/")[2] for n in foreign} & BUILTINS

    rows = calls(store, run_id)
    opened = [r for r in rows if r.tool == "mcp.initialize"]  # the sessions it opened, counted
    assert len(opened) == 1, opened  # initialize (2025-11-25) or server/discover (2026-07-28)
    assert opened[0].arguments["initialize"] + opened[0].arguments["discover"] >= 1, opened
    rows = [r for r in rows if r.tool != "mcp.initialize"]
    assert [r.tool for r in rows] == [s.tool for s in SCRIPT], detail
    assert rows[1].arguments["command"] == "echo hello" and not rows[1].is_error
    assert not rows[0].is_error and not rows[2].is_error
    assert rows[3].is_error and rows[3].error, "a submission of output/none must be refused"
    assert all(r.transport == "http" for r in rows)

    results = fake.tool_results()
    assert len(results) == len(SCRIPT), results
    assert "hello" in results[1]
    if cli.jsonl:
        _jsonl(p.stdout)
    assert fake.final_text in p.stdout, p.stdout[-3000:]

    # Its own parser reads the stored transcript: our calls in order, the refusal an error.
    messages = cli.connector().parse_transcript(p.stdout.encode())
    assert messages is not None, f"{name}'s parser does not recognize its own stdout"
    tools = [m for m in messages if m.role == "tool"]
    assert [m.tool for m in tools] == [s.tool for s in SCRIPT], tools
    assert [m.is_error for m in tools] == [False, False, False, True]
    assert "hello" in (tools[1].result or "")
    assert any(fake.final_text in m.text for m in messages if m.role == "assistant")


def test_connector_versions(agent_clis) -> None:  # type: ignore[no-untyped-def]
    for name, cli in CLIS.items():
        if cli.install != "agent_clis":
            continue
        conn = cli.connector()
        assert conn.name == name and conn.kind == "process" and not conn.experimental
        version = conn.version()
        assert version and version[0].isdigit(), f"{name}: {version!r}"
    for binary in ("claude", "codex", "gemini", "opencode"):  # the script and npm_clis agree
        assert cli_path(binary) == agent_clis / binary


@pytest.mark.parametrize("name", list(CLIS))
def test_prepare_writes_only_under_home(name, request, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Configs go into the agent's private home; the token stays out of argv."""
    request.getfixturevalue(CLIS[name].install)
    home = tmp_path / "home"
    ctx = AgentContext(run_id="r-x", prompt="the prompt", home=home, budget_s=60,
                       endpoint=McpEndpoint(url="http://127.0.0.1:9/mcp", token="tok-123"),
                       model="m")
    before = {p for p in tmp_path.rglob("*")}
    launch = CLIS[name].connector().prepare(ctx)
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(p == home or home in p.parents for p in written)
    assert launch.env["HOME"] == str(home) and "the prompt" in launch.argv
    assert not any("tok-123" in a for a in launch.argv)


def test_opencode_config_keeps_the_token_out_and_denies_its_builtins(agent_clis,  # type: ignore[no-untyped-def]
                                                                     tmp_path) -> None:
    """The run's token reaches OpenCode through its environment, never a file; every tool
    but ours is denied (which removes it from what the model is offered)."""
    ctx = AgentContext(run_id="r-x", prompt="p", home=tmp_path / "h", budget_s=60, model="m",
                       endpoint=McpEndpoint(url="http://127.0.0.1:9/mcp", token="tok-123"),
                       options={"openai_base_url": "http://127.0.0.1:8/v1"})
    launch = OpenCodeConnector().prepare(ctx)
    assert not any("tok-123" in p.read_text() for p in ctx.home.rglob("*") if p.is_file())
    assert "tok-123" in launch.env.values()
    config = json.loads(Path(launch.env["OPENCODE_CONFIG"]).read_text())
    assert config["permission"] == {"*": "deny", f"{SERVER_NAME}_*": "allow"}
    assert config["model"] == "a2rl/m"
    assert config["provider"]["a2rl"]["options"]["baseURL"] == "http://127.0.0.1:8/v1"
    assert OpenCodeConnector().missing_config({}, None) == [
        "a model (--model NAME, served by the endpoint)",
        "OPENAI_API_KEY in the environment (or --agent-option openai_api_key=...)",
    ] or os.environ.get("OPENAI_API_KEY")


def test_openhands_config_offers_only_our_tools(openhands_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Its agent keeps exactly our server's tools (its own terminal, editor, task tracker and
    sub-agent tools are filtered out), our server is its only MCP entry, the model's key stays
    in the environment, and the files holding the token are private."""
    conn = OpenHandsConnector()
    assert conn.installed() and conn.version() == pinned_version() and not conn.experimental
    ctx = AgentContext(run_id="r-x", prompt="p", home=tmp_path / "h", budget_s=60,
                       model="openai/m", endpoint=McpEndpoint(url="http://127.0.0.1:1/mcp",
                                                              token="t"),
                       options={"llm_base_url": "http://127.0.0.1:8/v1", "llm_api_key": "k"})
    launch = conn.prepare(ctx)
    assert Path(launch.argv[0]).parent == openhands_cli and "--headless" in launch.argv
    conf = ctx.home / ".openhands"
    assert json.loads((conf / "mcp.json").read_text()) == {"mcpServers": {SERVER_NAME: {
        "url": "http://127.0.0.1:1/mcp", "transport": "http",
        "headers": {"Authorization": "Bearer t"}}}}
    regex = json.loads((conf / "agent_settings.json").read_text())["filter_tools_regex"]
    assert regex == tool_filter()
    names = ALL_OURS | {"terminal", "file_editor", "task_tracker", "task", "run_command_x"}
    assert {n for n in names if re.match(regex, n)} == ALL_OURS
    assert all((conf / f).stat().st_mode & 0o077 == 0 for f in ("mcp.json",
                                                                "agent_settings.json"))
    assert launch.env["LLM_API_KEY"] == "k" and launch.env["LLM_MODEL"] == "openai/m"
    assert not {"k", "t"} & set(launch.argv)
    assert conn.missing_config({"llm_api_key": "k"}, None) == [
        "a model (--model, a LiteLLM name such as openai/NAME or anthropic/NAME)"]
    assert conn.missing_config({"llm_api_key": "k"}, "openai/m") == []


@pytest.mark.parametrize("name", ["opencode", "openhands"])
def test_cli_through_a2rl_run(name, request, settings, tmp_path, baseline_rows) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """`a2rl run --agent NAME` as a user types it: the orchestrator launches the pinned CLI in
    its bubblewrap sandbox (what it needs shown read-only: its npm folder, or its virtual
    environment and the Python that made it) against the fake endpoint, and stores its
    transcript, its version and the driver model with the run."""
    require_bwrap()
    cli = CLIS[name]
    request.getfixturevalue(cli.install)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url, **DUMMY_KEYS)
    seed_baseline(settings.database_url, baseline_rows)  # scored once per session: not tested here
    if os.environ.get("A2RL_NPM_CACHE"):
        env["A2RL_NPM_CACHE"] = os.environ["A2RL_NPM_CACHE"]
    script = [Step("list_files", {"path": "."}), Step("run_command", {"command": "echo hi"})]
    with cli.fake(script) as fake:
        model = cli.model(fake.model)
        options = [f"--agent-option={k}={v}" for k, v in cli.options(fake).items()]
        p = subprocess.run([A2RL, "run", "--task", "arith", "--agent", name, "--model", model,
                            "--budget", "10m", "--json", *options],
                           env=env, capture_output=True, text=True, timeout=240,
                           stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["agent_status"] == "finished", summary
    from a2rl.store import Run, Store

    store = Store(settings.database_url)
    try:
        assert [c.tool for c in calls(store, summary["run_id"])
                if c.tool != "mcp.initialize"] == ["list_files", "run_command"]
        with store.session() as s:
            run = s.get(Run, summary["run_id"])
            assert run is not None
            agent, version, driver = run.agent, run.agent_version, run.driver_model
            sha = run.agent_transcript_sha
        transcript = store.get_blob(sha)
    finally:
        store.close()
    assert (agent, driver) == (name, model) and version == cli.connector().version()
    messages = cli.connector().parse_transcript(transcript)
    assert messages and [m.tool for m in messages if m.role == "tool"] == [
        "list_files", "run_command"]


def test_a2rl_agents_lists_every_agent(agent_clis, openhands_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`a2rl agents` lists every built-in agent with its version once installed, and how to
    install the missing ones when nothing is (an empty cache folder, a bare PATH)."""
    from a2rl.clients.registry import BUILTIN_AGENTS, get_connector

    def agents(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
        base.update(A2RL_HOME=str(tmp_path / "home"), **env)
        if os.environ.get("A2RL_NPM_CACHE") and "A2RL_NPM_CACHE" not in env:
            base["A2RL_NPM_CACHE"] = os.environ["A2RL_NPM_CACHE"]
        p = subprocess.run([A2RL, "agents", *args], env=base, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        return p

    rows = json.loads(agents("--json").stdout)
    assert [r["name"] for r in rows] == list(BUILTIN_AGENTS)
    for r in rows:
        assert r["installed"] and r["version"] == get_connector(r["name"]).version(), r
        assert not r["experimental"], r
    plain = agents().stdout
    text = plain.splitlines()
    assert len(text) == len(BUILTIN_AGENTS) and "to install" not in plain
    assert all(f"installed {r['version']}" in line for r, line in zip(rows, text, strict=True))

    bare = agents(A2RL_NPM_CACHE=str(tmp_path / "empty"), PATH="/usr/bin:/bin").stdout
    missing = {line.split()[0] for line in bare.splitlines() if "not installed" in line}
    assert missing == {"claude-code", "codex", "gemini-cli", "opencode", "openhands"}, bare
    assert "to install claude-code, codex, gemini-cli, opencode: scripts/agent-clis.sh" in bare
    assert "to install openhands: scripts/openhands.sh" in bare
