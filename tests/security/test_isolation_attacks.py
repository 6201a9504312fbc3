"""Isolation attacks that held before issue 15 and must keep holding, on both backends.

Each drives a real run through the MCP tools as a hostile agent would and then looks at what
the attack was after: the canary's text is nowhere in what the agent got, the other run's
jobs and submissions are as they were, the host's listener got no connection, no file
appeared outside the workspace. The exact wording of the tools' errors is part of the
contract too (agents read it): the tests pin today's messages.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlmodel import select as sql_select

from a2rl.server import create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Job, Store, Submission

from ..helpers import calls
from .conftest import Agent, open_agent
from .wire import HttpServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


@pytest.fixture
async def other(backend: Settings, store: Store) -> AsyncIterator[Agent]:
    """A second run on the same backend and store: the victim of cross-run attacks."""
    async for a in open_agent(backend, store):
        yield a


def _canary() -> str:
    return f"CANARY-{secrets.token_hex(12)}"


@pytest.fixture
def host_canaries(agent: Agent, other: Agent) -> Iterator[dict[str, str]]:
    """Secret files where the host keeps them: path -> the secret text in it."""
    files: dict[Path, str] = {}
    secrets_dir = agent.settings.home_dir / "secrets"
    secrets_dir.mkdir(parents=True, exist_ok=True)
    files[secrets_dir / f"canary-{secrets.token_hex(4)}.seed"] = _canary()
    files[Path(other.run.workspace) / "code" / "other-run-secret.txt"] = _canary()
    files[Path(agent.run.workspace).parent / "next-to-workspace.txt"] = _canary()
    if os.geteuid() == 0 and os.access("/root", os.W_OK):
        files[Path("/root") / f".a2rl-canary-{secrets.token_hex(4)}"] = _canary()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    try:
        yield {str(p): t for p, t in files.items()}
    finally:
        for path in files:
            path.unlink(missing_ok=True)


# -- other runs ----------------------------------------------------------------------------

async def test_other_runs_job_ids_are_unknown(agent: Agent, other: Agent) -> None:
    started = await other.sh("echo victim-started; sleep 60", wait_s=0.5)
    job_id = started["job_id"]
    expected = f"no job {job_id!r} in this run; call job_status() to list the jobs"
    assert await agent.refused("job_status", job_id=job_id) == \
        f"Error executing tool job_status: {expected}"
    assert await agent.refused("job_kill", job_id=job_id) == \
        f"Error executing tool job_kill: {expected}"
    listed = await agent.ok("job_status")
    assert job_id not in json.dumps(listed)
    status = await other.ok("job_status", job_id=job_id)
    assert status["job"]["state"] == "running" and "victim-started" in status["output"]
    with other.store.session() as s:
        row = s.exec(sql_select(Job).where(Job.id == job_id)).one()
        assert row.run_id == other.run.id and row.state == "running"
    await other.ok("job_kill", job_id=job_id)


async def test_other_runs_submission_ids_are_unknown(agent: Agent, other: Agent) -> None:
    await other.sh("mkdir -p output/ckpt && echo not-weights > output/ckpt/notes.txt")
    await other.refused("submit_checkpoint", path="output/ckpt")
    with other.store.session() as s:
        sub = s.exec(sql_select(Submission).where(Submission.run_id == other.run.id)).one()
    before = sub.model_dump()
    text = await agent.refused("get_score", submission_id=sub.id)
    assert text == f"Error executing tool get_score: no submission {sub.id!r} in this run"
    mine = await agent.ok("get_score")
    assert sub.id not in json.dumps(mine)
    with other.store.session() as s:
        assert s.get(Submission, sub.id).model_dump() == before  # type: ignore[union-attr]
    theirs = await other.ok("get_score", submission_id=sub.id)
    assert theirs["status"] == "refused"


# -- paths ---------------------------------------------------------------------------------

@pytest.mark.cheats("walks paths out of the workspace to the store and hidden data")
async def test_path_traversal_is_refused(agent: Agent, other: Agent,
                                         host_canaries: dict[str, str]) -> None:
    workspace = Path(agent.run.workspace)
    other_secret = str(Path(other.run.workspace) / "code" / "other-run-secret.txt")
    outside = "../next-to-workspace.txt"
    got: list[str] = []
    for path in (outside, "code/../../next-to-workspace.txt",
                 os.path.relpath(other_secret, workspace)):
        text = await agent.refused("read_file", path=path)
        assert text.startswith(f"Error executing tool read_file: path {path!r} resolves "
                               "outside the workspace (via '..'")
        assert text.endswith("; only files inside the workspace can be used")
        got.append(text)
    for path in (other_secret, "/etc/passwd", *host_canaries):
        text = await agent.refused("read_file", path=path)
        assert text == (f"Error executing tool read_file: path {path!r} is absolute: paths are "
                        "relative to the workspace root (for example 'code/train.py' or "
                        "'output/ckpt')")
        got.append(text)
    text = await agent.refused("read_file", path="~/.bashrc")
    assert text == ("Error executing tool read_file: '~/.bashrc' does not exist; use "
                    "list_files to see what is there")
    got.append(text)
    for path in ("..", "/", str(Path(other.run.workspace))):
        got.append(await agent.refused("list_files", path=path))
    got.append(json.dumps(await agent.ok("list_files", path=".", depth=6)))
    assert not any(secret in text for secret in host_canaries.values() for text in got)


@pytest.mark.cheats("writes outside the workspace, into a2rl's home")
async def test_edit_file_cannot_write_outside_the_workspace(agent: Agent, other: Agent) -> None:
    workspace = Path(agent.run.workspace)
    name = f"escape-{secrets.token_hex(4)}.txt"
    victim = Path(other.run.workspace) / "code" / name
    for path in (f"../{name}", f"code/../../{name}", str(victim),
                 os.path.relpath(victim, workspace)):
        await agent.refused("edit_file", path=path, new_text="pwned")
    assert not (workspace.parent / name).exists() and not victim.exists()
    # '~' is a folder name like any other: nothing is written in anyone's home
    await agent.ok("edit_file", path=f"~/{name}", new_text="inside")
    assert (workspace / "~" / name).read_text() == "inside"
    assert not (Path.home() / name).exists()


@pytest.mark.cheats("submits a folder outside the workspace")
async def test_submit_checkpoint_outside_the_workspace_is_refused(agent: Agent,
                                                                  other: Agent) -> None:
    await other.sh("mkdir -p output/ckpt && echo x > output/ckpt/config.json")
    theirs = str(Path(other.run.workspace) / "output" / "ckpt")
    for path in (theirs, os.path.relpath(theirs, agent.run.workspace), "/", "..",
                 str(agent.settings.home_dir / "secrets")):
        await agent.refused("submit_checkpoint", path=path)
    with agent.store.session() as s:
        rows = s.exec(sql_select(Submission).where(
            Submission.run_id.in_([agent.run.id, other.run.id]))).all()  # type: ignore[attr-defined]
    # The attacker's refusals are on its own record (refused, nothing copied); the other run
    # has none.
    assert all(r.run_id == agent.run.id and r.status == "refused" and not r.checkpoint_dir
               for r in rows), rows
    assert [c.is_error for c in calls(agent.store, agent.run.id)] == [True] * 5


# -- the host, from inside a job --------------------------------------------------------------

@pytest.mark.cheats("reads the host's secrets and the hidden data")
async def test_job_cannot_read_host_secrets(agent: Agent, other: Agent,
                                            host_canaries: dict[str, str]) -> None:
    targets = [*host_canaries, agent.settings.database_url.removeprefix("sqlite:///"),
               str(agent.settings.home_dir / "secrets"), str(Path(other.run.workspace)),
               "/root", "/proc/1/environ", "/proc/1/cmdline"]
    script = "; ".join(f"cat {t} 2>&1 | head -c 20000; ls -la {t} 2>&1 | head -50"
                       for t in targets)
    out = await agent.sh(script + "; true")
    assert not any(secret in out["output"] for secret in host_canaries.values())
    assert "SQLite format" not in out["output"]


@pytest.mark.cheats("looks for the server's processes")
async def test_job_does_not_see_the_servers_environment(backend: Settings, store: Store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """API keys in the server's environment (the judge's, a provider's) never cross into a job,
    whatever the job looks at: its environment, its ancestors', every process's it can see."""
    keys = {"OPENAI_API_KEY": _canary(), "ANTHROPIC_API_KEY": _canary(),
            "A2RL_SEARCH_API_KEY": _canary()}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    async for agent in open_agent(backend, store):
        out = await agent.sh("env; cat /proc/self/environ /proc/1/environ; "
                             "for p in /proc/[0-9]*; do cat $p/environ; done 2>/dev/null; true")
        assert out["exit_code"] == 0
        for name, value in keys.items():
            assert value not in out["output"], f"{name} leaked into the sandbox"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real TCP listener on every host address: no job may ever connect to it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", 0))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def _host_addresses() -> list[str]:
    found = {"127.0.0.1"}
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5)
        found.update(a for a in out.stdout.split() if "." in a)
    except (OSError, subprocess.SubprocessError):
        pass
    return sorted(found)


_CONNECT = """
import socket, sys
for host in sys.argv[2:]:
    try:
        socket.create_connection((host, int(sys.argv[1])), timeout=3).close()
        print("CONNECTED", host)
    except OSError as exc:
        print("no route", host, type(exc).__name__)
"""


async def test_job_cannot_reach_a_listener_on_the_host(agent: Agent,
                                                       listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    await agent.ok("edit_file", path="code/connect.py", new_text=_CONNECT)
    hosts = " ".join(_host_addresses())
    out = await agent.sh(f"python3 code/connect.py {port} {hosts} localhost")
    assert "CONNECTED" not in out["output"], out["output"]
    assert out["output"].count("no route") == len(_host_addresses()) + 1
    ready, _, _ = select.select([listener], [], [], 0.5)
    assert not ready, "the host's listener received a connection from the sandbox"


async def test_job_cannot_reach_an_outside_address(agent: Agent) -> None:
    await agent.ok("edit_file", path="code/connect.py", new_text=_CONNECT)
    out = await agent.sh("python3 code/connect.py 53 1.1.1.1 8.8.8.8; "
                         "python3 code/connect.py 443 93.184.215.14; "
                         "getent hosts example.com || echo no-dns")
    assert "CONNECTED" not in out["output"], out["output"]
    assert "no-dns" in out["output"]


# -- HTTP: the token is the run ------------------------------------------------------------------

@pytest.fixture
def http_runs(settings: Settings, store: Store, tmp_path: Path) -> Iterator[tuple[HttpServer,
                                                                                 list]]:
    from ..conftest import require_bwrap

    require_bwrap()
    runs = [create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
            for _ in range(2)]
    server = HttpServer(settings, tmp_path / "http.log")
    try:
        yield server, runs
    finally:
        server.close()
        for created in runs:
            finish_run(settings, store, created.run.id)


_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command",' \
        b'"arguments":{"command":"touch pwned"}}}'


async def test_http_without_a_token_is_refused(http_runs, store: Store) -> None:  # type: ignore[no-untyped-def]
    server, runs = http_runs
    async with httpx2.AsyncClient(headers=_HEADERS) as h:
        resp = await h.post(server.url, content=_LIST)
        assert resp.status_code == 401 and "Bearer" in resp.headers["www-authenticate"]
        resp = await h.post(server.url, content=_LIST, headers={"Authorization": "Basic eDp4"})
        assert resp.status_code == 401
    for created in runs:
        assert calls(store, created.run.id) == []
        assert not (Path(created.run.workspace) / "pwned").exists()


async def test_http_with_a_wrong_token_is_refused(http_runs, store: Store) -> None:  # type: ignore[no-untyped-def]
    server, runs = http_runs
    a = runs[0]
    almost = a.token[:-1] + ("A" if a.token[-1] != "A" else "B")
    with store.session() as s:
        from a2rl.store import Run

        token_hash = s.get(Run, a.run.id).token_hash  # type: ignore[union-attr]
    async with httpx2.AsyncClient(headers=_HEADERS) as h:
        for wrong in ("nope", almost, token_hash, a.run.id, f"{a.token}x", a.token[:-4]):
            resp = await h.post(server.url, content=_LIST,
                                headers={"Authorization": f"Bearer {wrong}"})
            assert resp.status_code == 401, wrong
    for created in runs:
        assert calls(store, created.run.id) == []
        assert not (Path(created.run.workspace) / "pwned").exists()


async def test_a_token_reaches_only_its_own_run(http_runs, store: Store) -> None:  # type: ignore[no-untyped-def]
    """B's token acts on B whatever else the request says, even with A's MCP session id."""
    server, (a, b) = http_runs
    headers_a = {"Authorization": f"Bearer {a.token}"}
    async with httpx2.AsyncClient(headers=headers_a) as h, Client(
            streamable_http_client(server.url, http_client=h), mode="legacy") as c:
        r = await c.call_tool("run_command", {"command": "pwd"})
        assert r.structured_content["output"].strip() == a.run.workspace
    async with httpx2.AsyncClient(headers=_HEADERS) as h:
        init = await h.post(server.url, headers=headers_a, content=json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "a", "version": "1"}}}).encode())
        session_a = init.headers["mcp-session-id"]
        resp = await h.post(server.url, content=_LIST, headers={
            "Authorization": f"Bearer {b.token}", "mcp-session-id": session_a,
            "mcp-protocol-version": "2025-11-25"})
        assert resp.status_code in (200, 400, 403, 404)
    assert [c.tool for c in calls(store, a.run.id)] == ["mcp.initialize", "run_command"]
    assert not (Path(a.run.workspace) / "pwned").exists()
    assert all(c.run_id == b.run.id for c in calls(store, b.run.id))


async def test_one_runs_long_polls_do_not_starve_another_run(http_runs) -> None:  # type: ignore[no-untyped-def]
    """Run A's agent holds 40 `job_status(wait_s=30)` long-polls open on one HTTP server (as
    many as anyio's shared thread pool has): run B's commands still answer at once, and so does
    A's own `job_kill`, which ends A's polls."""
    import anyio

    server, (a, b) = http_runs
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.token}"},
                                  timeout=120) as ha, \
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {b.token}"},
                               timeout=120) as hb, \
            Client(streamable_http_client(server.url, http_client=ha), mode="legacy") as ca, \
            Client(streamable_http_client(server.url, http_client=hb), mode="legacy") as cb:
        await cb.call_tool("run_command", {"command": "true"})  # B's sandbox is up
        job = (await ca.call_tool("run_command", {"command": "sleep 120", "wait_s": 0}))
        job_id = (job.structured_content or {})["job_id"]
        polls: list[object] = []

        async def poll() -> None:
            polls.append(await ca.call_tool("job_status", {"job_id": job_id, "wait_s": 30}))

        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(poll)
            await anyio.sleep(3)  # every poll is in, waiting on the job
            assert not polls
            started = time.monotonic()
            r = await cb.call_tool("run_command", {"command": "echo from-b"})
            took = time.monotonic() - started
            assert (r.structured_content or {})["output"].strip() == "from-b"
            assert took < 8, f"run B waited {took:.1f}s behind run A's polls"
            started = time.monotonic()
            killed = await ca.call_tool("job_kill", {"job_id": job_id})
            assert not killed.is_error and time.monotonic() - started < 15
        assert len(polls) == 40
        assert all((p.structured_content or {})["job"]["state"] == "killed"  # type: ignore[attr-defined]
                   for p in polls)


# -- wording ---------------------------------------------------------------------------------

async def test_the_tool_errors_keep_their_wording(agent: Agent) -> None:
    """Agents learn from these sentences; a change must be deliberate (and change this test)."""
    expected = {
        ("job_status", (("job_id", "j-nope"),)):
            "no job 'j-nope' in this run; call job_status() to list the jobs",
        ("job_kill", (("job_id", "j-nope"),)):
            "no job 'j-nope' in this run; call job_status() to list the jobs",
        ("get_score", (("submission_id", "s-nope"),)): "no submission 's-nope' in this run",
        ("read_file", (("path", "missing.txt"),)):
            "'missing.txt' does not exist; use list_files to see what is there",
        ("read_file", (("path", "code"),)): "'code' is a directory; use list_files(path='code')",
        ("list_files", (("path", "nowhere"),)): "'nowhere' does not exist",
        ("list_files", (("path", "TASK.md"),)): "'TASK.md' is a file; use read_file to read it",
        ("edit_file", (("path", "code"), ("new_text", "x"))): "'code' is a directory",
        ("edit_file", (("path", "new.txt"), ("new_text", "x"), ("old_text", "y"))):
            "'new.txt' does not exist; omit old_text to create it",
        ("edit_file", (("path", "notes.txt"), ("new_text", "x"), ("old_text", ""))):
            "old_text is empty; omit it to overwrite the whole file",
        ("read_file", (("path", " "),)):
            "path is empty: give a path relative to the workspace, e.g. 'code/train.py'",
        ("read_file", (("path", "/etc/passwd"),)):
            "path '/etc/passwd' is absolute: paths are relative to the workspace root (for "
            "example 'code/train.py' or 'output/ckpt')",
    }
    await agent.sh("mkdir -p code && echo hello > notes.txt")
    for (tool, args), message in expected.items():
        text = await agent.refused(tool, **dict(args))
        assert text == f"Error executing tool {tool}: {message}", (tool, args)
    # (whether a symlink is named in it depends on how the path is opened)
    text = await agent.refused("read_file", path="../x")
    assert text.startswith("Error executing tool read_file: path '../x' resolves outside the "
                           "workspace (via '..'")
    assert text.endswith("; only files inside the workspace can be used")
    started = await agent.sh("true")
    job_id = started["job_id"]
    text = await agent.refused("job_kill", job_id=job_id)
    assert text == f"Error executing tool job_kill: job {job_id} is not running (state: exited)"
