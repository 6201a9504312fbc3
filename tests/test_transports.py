"""The real server processes: `a2rl serve` over stdio and over HTTP, and a crash in between."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from sqlmodel import select

from a2rl.server import create_run, finish_run
from a2rl.store import Job, Run

from .conftest import require_bwrap
from .helpers import calls

pytestmark = [pytest.mark.timeout(180), pytest.mark.anyio]
A2RL = str(Path(sys.executable).parent / "a2rl")


def _env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url)
    return env


@pytest.fixture
def run(settings, store) -> Run:  # type: ignore[no-untyped-def]
    require_bwrap()
    created = create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
    yield created.run
    finish_run(settings, store, created.run.id)


def _stdio(settings, run_id: str) -> StdioServerParameters:  # type: ignore[no-untyped-def]
    return StdioServerParameters(command=A2RL, args=["serve", "--run", run_id], env=_env(settings))


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_serves_and_records(settings, store, run, mode) -> None:  # type: ignore[no-untyped-def]
    async with Client(_stdio(settings, run.id), mode=mode) as c:
        assert "TASK.md" in (c.instructions or "")
        r = await c.call_tool("run_command", {"command": "echo via-stdio"})
        assert "via-stdio" in r.structured_content["output"]
        # over the wire too: the text block is the compact JSON of the structured content
        assert r.content[0].text.startswith('{"status":"exited","exit_code":0,')
        bad = await c.call_tool("run_command", {"command": "echo no", "wait_s": "abc"})
        unknown = await c.call_tool("job_status", {"job": "j-1"})
    assert bad.is_error and "`wait_s`: must be a valid number" in bad.content[0].text
    assert unknown.is_error and "unknown argument `job`; this tool takes `job_id`, " \
        "`wait_s`, `offset`" in unknown.content[0].text
    rows = calls(store, run.id)
    assert [c.tool for c in rows] == ["run_command", "run_command", "job_status"]
    assert rows[1].arguments == {"command": "echo no", "wait_s": "abc"} and rows[1].is_error
    assert rows[2].arguments == {"job": "j-1"} and rows[2].is_error


async def test_heavy_output_keeps_stdio_stream_valid(settings, store, run) -> None:  # type: ignore[no-untyped-def]
    async with Client(_stdio(settings, run.id), mode="legacy") as c:
        r = await c.call_tool("run_command", {
            "command": "for i in $(seq 1 200000); do echo line-$i; done", "wait_s": 0.2})
        job = r.structured_content["job_id"]
        for _ in range(20):
            r = await c.call_tool("job_status", {"job_id": job, "wait_s": 2})
            if r.structured_content["job"]["state"] != "running":
                break
        assert r.structured_content["job"]["state"] == "exited"
        r = await c.call_tool("budget_status", {})
        assert not r.is_error


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_http_needs_the_runs_token(settings, store) -> None:  # type: ignore[no-untyped-def]
    require_bwrap()
    a = create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
    b = create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
    port = _free_port()
    proc = subprocess.Popen([A2RL, "serve", "--http", "--port", str(port)], env=_env(settings),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient() as h:
            for _ in range(600):  # a loaded 2-core machine takes tens of seconds to import
                try:
                    await h.get(f"http://127.0.0.1:{port}/health")
                    break
                except httpx2.TransportError:
                    assert proc.poll() is None, "the HTTP server exited"
                    await anyio.sleep(0.1)
            said = proc.stderr.readline().decode()  # type: ignore[union-attr]
            assert f"at {url}; connect with the header 'Authorization: Bearer TOKEN'" in said
            resp = await h.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert resp.status_code == 401
            assert "Bearer" in resp.headers.get("www-authenticate", "")
            bad = await h.post(url, headers={"Authorization": "Bearer nope"},
                               json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert bad.status_code == 401
        for created in (a, b):
            headers = {"Authorization": f"Bearer {created.token}"}
            async with httpx2.AsyncClient(headers=headers) as h, Client(
                    streamable_http_client(url, http_client=h), mode="legacy") as c:
                r = await c.call_tool("run_command", {"command": "pwd"})
                assert r.structured_content["output"].strip() == created.run.workspace
        for created in (a, b):  # each session opened is counted in the run's record
            rows = calls(store, created.run.id)
            assert [c.tool for c in rows] == ["mcp.initialize", "run_command"]
            assert rows[0].arguments["initialize"] == 1 and not rows[0].is_error
        # An ended run's token: refused in one line naming the run, its record left closed.
        finish_run(settings, store, a.run.id)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {a.token}"}) as h:
            with anyio.fail_after(10):  # the server learns of an end made elsewhere within 1 s
                while (await h.get(url)).status_code != 403:
                    await anyio.sleep(0.2)
            for tool in ("run_command", "budget_status"):  # budget_status: even the always-on
                resp = await h.post(url, headers={"Accept": "application/json, text/event-stream"},
                                    json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                          "params": {"name": tool,
                                                     "arguments": {"command": "pwd"}}})
                assert resp.status_code == 403, resp.text
                error = resp.json()
                assert error["id"] == 7 and "\n" not in error["error"]["message"]
                assert error["error"]["message"].startswith(
                    f"run {a.run.id} has ended (finished"), error
            resp = await h.delete(url)  # and a session's end
            assert resp.status_code == 403, resp.text
        assert [c.tool for c in calls(store, a.run.id)] == ["mcp.initialize", "run_command"]
        with store.session() as s:
            assert s.get(Run, a.run.id).ended_at is not None  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.wait(10)
        for created in (a, b):
            finish_run(settings, store, created.run.id)


def test_http_refuses_remote_without_flag(settings) -> None:  # type: ignore[no-untyped-def]
    p = subprocess.run([A2RL, "serve", "--http", "--host", "0.0.0.0"], env=_env(settings),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--allow-remote" in p.stderr


async def test_server_killed_job_survives(settings, store, run) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the stdio server while a job runs; a new server finds the job and its output."""
    params = _stdio(settings, run.id)
    proc = None
    async with Client(params, mode="legacy") as c:
        r = await c.call_tool("run_command", {
            "command": "echo first; sleep 2; echo second", "wait_s": 0.2})
        job_id = r.structured_content["job_id"]
        proc = _find_server(run.id)
        os.kill(proc, signal.SIGKILL)
    time.sleep(2.5)
    async with Client(params, mode="legacy") as c:
        r = await c.call_tool("job_status", {"job_id": job_id, "wait_s": 5})
        st = r.structured_content
        assert st["job"]["state"] == "exited" and st["job"]["exit_code"] == 0
        assert "first" in st["output"] and "second" in st["output"]
    with store.session() as s:
        assert s.exec(select(Job).where(Job.id == job_id)).one().log_blob_sha


def _find_server(run_id: str) -> int:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and run_id.encode() in argv:
            return int(pid)
    raise AssertionError("the stdio server process was not found")
