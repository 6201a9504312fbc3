"""Runs past their deadline end, whoever was serving them.

- A run whose owner process is gone (killed, crashed) is finalized by the next `a2rl`
  command that opens the store: jobs stopped, final score, end reason; a run an `a2rl run`
  owned ends as "owner lost" (its agent was cut off), one made with `a2rl create` as "budget
  exhausted". A run whose owner still runs is left to it.
- A run that `a2rl serve` holds is finalized at its deadline with no tool call needed, and
  then holds no mount, loop device, cgroup, process or container, while `show`, `report`
  and `export` still read it and its files stay in its image.

Real parts: real `a2rl` processes over a real SQLite store, the real sandboxes (bubblewrap;
Docker with the offline test image), a real loop-mounted workspace volume where this machine
can make one, a real MCP session over stdio.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from sqlmodel import select

from a2rl.sandbox import volume
from a2rl.sandbox.cgroup import RunCgroup
from a2rl.sandbox.docker import DockerSettings
from a2rl.server import build_server, create_run
from a2rl.server.run.clock import RunClock
from a2rl.settings import Settings
from a2rl.store import Job, Run, Store, aware, utcnow
from a2rl.store.owners import owner_gone, process_owner

from .baseline_seed import baseline_rows, seed_baseline  # noqa: F401  (a fixture)
from .conftest import backend_settings
from .helpers import wait_for, workspace_text
from .test_run_signals import _containers_of, _mounts_under, _processes_of

A2RL = str(Path(sys.executable).parent / "a2rl")
pytestmark = [pytest.mark.timeout(300)]


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home_dir), A2RL_DB_URL=settings.database_url)
    if settings.sandbox.section(DockerSettings).image:
        env["A2RL_SANDBOX__DOCKER__IMAGE"] = settings.sandbox.section(DockerSettings).image
    return env


def _dead_owner() -> str:
    """The owner string of a process of this host that has ended."""
    p = subprocess.Popen(["true"])
    p.wait()
    return f"{socket.gethostname()}:{p.pid}:1"


def _set(store: Store, run_id: str, **fields: object) -> None:
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run is not None
        for k, v in fields.items():
            setattr(run, k, v)
        s.add(run)


def _run(store: Store, run_id: str) -> Run:
    with store.session() as s:
        run = s.get(Run, run_id)
    assert run is not None
    return run


def test_owner_identity() -> None:
    me = process_owner()
    assert not owner_gone(me)
    assert owner_gone(_dead_owner()) and owner_gone(None)
    host, pid, start = me.split(":")
    assert owner_gone(f"{host}:{pid}:{int(start) + 1}")  # the pid reused by another process
    assert not owner_gone(f"another-host-{host}:1:1")  # never judged from here


def test_only_runs_without_a_live_owner_are_finalized(settings: Settings, store: Store) -> None:
    """Three runs past their deadline: one this (live) process owns, one made with `a2rl
    create` whose owner died, one an `a2rl run` owned that died before it recorded its agent's
    end. `a2rl runs` finalizes the last two, each with its reason, and leaves the first."""
    kept = create_run(settings, store, budget="1s", start_clock=True, baseline=False).run
    made = create_run(settings, store, budget="1s", start_clock=True, baseline=False).run
    orchestrated = create_run(settings, store, budget="1s", start_clock=True, baseline=False,
                              agent="reference").run
    assert kept.owner == process_owner()
    for run in (made, orchestrated):
        _set(store, run.id, owner=_dead_owner())
    time.sleep(1.5)
    p = subprocess.run([A2RL, "runs", "--json"], env=_env(settings), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    listed = {r["id"]: r for r in json.loads(p.stdout)}  # still one JSON document
    assert listed[made.id]["status"] == "finished"
    assert _run(store, made.id).end_reason == "budget exhausted"
    assert _run(store, orchestrated.id).end_reason == "owner lost"
    assert _run(store, made.id).final_score is None  # no baseline in this test: none to give
    assert _run(store, kept.id).ended_at is None and listed[kept.id]["status"] == "running"
    assert f"run {made.id} is past its deadline and no process holds it" in p.stderr
    assert kept.id not in p.stderr
    for run in (made, orchestrated):
        assert _mounts_under(Path(run.workspace).parent) == []


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_dead_owner_with_a_job_finalized_at_the_next_start(
        backend: str, settings: Settings, store: Store) -> None:
    """A run's owner killed while a job runs; the deadline passes with no a2rl process; the
    next command (`a2rl show`) finalizes it and nothing of it is left."""
    settings = backend_settings(settings, backend)
    run = create_run(settings, store, budget="10m", start_clock=True, baseline=False).run
    run_dir = Path(run.workspace).parent
    server = build_server(settings, store, run_id=run.id, transport="memory")
    async with Client(server, mode="legacy") as client:
        r = await client.call_tool("run_command", {"command": "sleep 300", "wait_s": 1})
        assert not r.is_error
    _set(store, run.id, owner=_dead_owner())
    # the deadline passes: moved to a moment ago as the clock moves it (no budget's wait)
    deadline = aware(_run(store, run.id).deadline)
    assert deadline is not None
    assert RunClock(store, run.id).move_deadline(-(deadline - utcnow()).total_seconds() - 1)
    assert aware(_run(store, run.id).deadline) < utcnow()  # type: ignore[operator]
    p = subprocess.run([A2RL, "show", run.id, "--json"], env=_env(settings),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    shown = json.loads(p.stdout)
    assert shown["status"] == "finished" and shown["end_reason"] == "budget exhausted"
    with store.session() as s:
        jobs = s.exec(select(Job).where(Job.run_id == run.id)).all()
    assert jobs and all(j.state != "running" for j in jobs)
    assert wait_for(lambda: _processes_of(run.id) == [], 15), _processes_of(run.id)
    assert _mounts_under(run_dir) == []
    assert volume.loops_of(run_dir / volume.IMAGE_NAME) == []
    assert not RunCgroup(run.id).exists
    if backend == "docker":
        assert _containers_of(run.id) == []


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_served_run_releases_everything_at_its_deadline(
        backend: str, settings: Settings, store: Store, tmp_path: Path,
        baseline_rows: list) -> None:  # noqa: F811
    """`a2rl create` then `a2rl serve --run` (stdio, a real process): a job still runs when
    the deadline passes, the agent makes no call, and the server finalizes the run by itself;
    then nothing of the run is left while it stays readable."""
    settings = backend_settings(settings, backend)
    seed_baseline(settings.database_url, baseline_rows)  # the baseline is not under test
    env = _env(settings)
    # a budget that covers the server's start and the first call, on a busy machine
    p = subprocess.run([A2RL, "create", "--budget", "10s", "--backend", backend, "--json"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    run_id = json.loads(p.stdout)["run_id"]
    params = StdioServerParameters(command=A2RL, args=["serve", "--run", run_id], env=env)
    async with Client(params, mode="legacy") as client:
        r = await client.call_tool("run_command", {
            "command": "echo kept > code/note.txt; sleep 300", "wait_s": 1})
        assert not r.is_error
        run = _run(store, run_id)
        assert run.status == "running"
        ended = wait_for(lambda: _run(store, run_id).ended_at is not None, 60)
        assert ended, "the served run was not finalized at its deadline"
        run = _run(store, run_id)
        assert run.end_reason == "budget exhausted"
        run_dir = Path(run.workspace).parent
        # while the server still runs: everything of the run but the server itself is gone
        assert wait_for(lambda: len(_processes_of(run_id)) <= 1, 15), _processes_of(run_id)
        # the end is recorded first, then the run is audited on its mounted files, then the
        # volume goes: give the audit its seconds
        assert wait_for(lambda: _mounts_under(run_dir) == [], 60), _mounts_under(run_dir)
        # and the loop device goes once the kernel drops the unmounted filesystem (a lazy
        # unmount lets it go when the last job's process has let go of it)
        image = run_dir / volume.IMAGE_NAME
        assert wait_for(lambda: volume.loops_of(image) == [], 30), volume.loops_of(image)
        assert not RunCgroup(run_id).exists
        if backend == "docker":
            assert _containers_of(run_id) == []
        r = await client.call_tool("run_command", {"command": "true"})
        assert r.is_error  # ended: no more work
    assert wait_for(lambda: _processes_of(run_id) == [], 15)
    assert workspace_text(run.workspace, "code/note.txt") == "kept\n"
    for argv in (["show", run_id], ["report", run_id],
                 ["export", run_id, "--out", str(tmp_path / "run.tar.gz")]):
        q = subprocess.run([A2RL, *argv], env=env, capture_output=True, text=True, timeout=120)
        assert q.returncode == 0, (argv, q.stderr[-2000:])
    assert (tmp_path / "run.tar.gz").is_file()
    assert _mounts_under(run_dir) == []  # reading it mounted nothing again
