"""Every way a command ends by a signal: SIGTERM and SIGHUP finalize `a2rl run` and `a2rl demo`
as Ctrl-C does, on both backends, with no traceback; the run's end reason names the signal,
its jobs are stopped and nothing of it is left (process, container, mount); the command exits
128 + the signal's number with one line saying so. `a2rl serve` ends on each of them with one
line too, and leaves the run it served live (its jobs are the supervisor's, not the server's).

Real parts: real `a2rl` processes, the reference agent on the offline toy task, the real
sandbox of each backend (bubblewrap; Docker with the offline test image), a real SQLite store.
"""

from __future__ import annotations

import contextlib
import json
import os
import select as io_select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.store import Job, Run, Store

from .baseline_seed import baseline_rows, seed_baseline  # noqa: F401  (a fixture)
from .conftest import require_bwrap, require_docker

A2RL = str(Path(sys.executable).parent / "a2rl")
pytestmark = [pytest.mark.timeout(420)]


def _env(home: Path, backend: str, db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(home), A2RL_DB_URL=f"sqlite:///{db}")
    if backend == "docker":
        env["A2RL_SANDBOX__DOCKER__IMAGE"] = require_docker()
    else:
        require_bwrap()
    return env


def _wait_for_training(store: Store, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Until the agent's training runs as a background job (mid-run, the case that matters)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, "the command ended before it was signalled"
        with contextlib.suppress(Exception), store.session() as s:
            if s.exec(select(Job).where(Job.is_background)).first() is not None:
                return
        time.sleep(0.5)
    raise AssertionError("no training job started")


def _processes_of(run_id: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if run_id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def _mounts_under(folder: Path) -> list[str]:
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4] for line in f) if (p + "/").startswith(prefix)]


def _containers_of(run_id: str) -> list[str]:
    import docker
    from a2rl.sandbox.docker import LABEL_RUN

    return [c.name for c in docker.from_env().containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={run_id}"})]


@pytest.mark.parametrize(("command", "signum", "backend", "group"), [
    ("run", signal.SIGTERM, "local", True),  # as `timeout` sends it: to the whole group
    ("run", signal.SIGHUP, "local", False),
    ("demo", signal.SIGTERM, "docker", True),
    ("demo", signal.SIGHUP, "docker", False),
], ids=["run-SIGTERM-local", "run-SIGHUP-local", "demo-SIGTERM-docker", "demo-SIGHUP-docker"])
def test_signal_finalizes_the_run(command: str, signum: signal.Signals, backend: str,
                                  group: bool, tmp_path: Path, a2rl_home: Path,
                                  baseline_rows: list) -> None:  # noqa: F811
    # the session's home (its base model built once) and a store of this test's own, holding
    # the baseline already (not under test here)
    env = _env(a2rl_home, backend, tmp_path / "a2rl.db")
    seed_baseline(env["A2RL_DB_URL"], baseline_rows)
    argv = [A2RL, command, "--backend", backend, "--json"]
    if command == "run":
        argv[2:2] = ["--task", "arith", "--agent", "reference", "--budget", "10m"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    store: Store | None = None
    try:
        store = Store(env["A2RL_DB_URL"])
        _wait_for_training(store, proc)
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = err.decode(errors="replace")
    assert proc.returncode == 128 + signum, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    summary = json.loads(out)  # --json still prints its one document
    run_id = summary["run_id"]
    said = [line for line in stderr.splitlines() if "was interrupted" in line]
    assert said == [f"a2rl: run {run_id} was interrupted ({signum.name}) and finalized; see it "
                    f"with: a2rl show {run_id}"], stderr[-2000:]
    assert store is not None
    with store.session() as s:
        run = s.get(Run, run_id)
        jobs = s.exec(select(Job).where(Job.run_id == run_id)).all()
    assert run is not None and run.status == "finished" and run.ended_at is not None
    assert run.end_reason == f"interrupted ({signum.name})"
    assert run.agent_status == "interrupted"
    assert jobs and all(j.state != "running" for j in jobs)
    assert _processes_of(run_id) == []  # no supervisor, job, server or grader of the run
    assert _mounts_under(Path(run.workspace).parent) == []
    if backend == "docker":
        assert _containers_of(run_id) == []
    shown = subprocess.run([A2RL, "show", run_id, "--json"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and json.loads(shown.stdout)["end_reason"] == run.end_reason


def _answers_initialize(proc: subprocess.Popen[bytes], timeout: float = 60) -> bool:
    """Whether the stdio server answers an MCP `initialize` request within `timeout`."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}}).encode() + b"\n")
    proc.stdin.flush()
    ready, _, _ = io_select.select([proc.stdout], [], [], timeout)
    return bool(ready) and json.loads(proc.stdout.readline()).get("id") == 1


def _listens(proc: subprocess.Popen[bytes], port: int, timeout: float = 60) -> bool:
    """Whether the HTTP server accepts a connection on `port` within `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def created_run(tmp_path_factory: pytest.TempPathFactory, a2rl_home: Path,
                baseline_rows: list) -> tuple[dict[str, str], str]:  # noqa: F811
    """One run made with `a2rl create`, served in turn by each server below."""
    env = _env(a2rl_home, "local", tmp_path_factory.mktemp("serve") / "a2rl.db")
    seed_baseline(env["A2RL_DB_URL"], baseline_rows)
    p = subprocess.run([A2RL, "create", "--budget", "10m", "--json"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return env, json.loads(p.stdout)["run_id"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_serve_ends_on_a_signal_with_one_line(signum: signal.Signals, transport: str,
                                              created_run: tuple[dict[str, str], str]) -> None:
    env, run_id = created_run
    port = 0
    if transport == "stdio":
        argv = [A2RL, "serve", "--run", run_id]
    else:
        from a2rl.clients.orchestrator import _free_port

        port = _free_port()
        argv = [A2RL, "serve", "--http", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # serving (stdio: it answers on stdout what it read on stdin; http: listening)
        served = _answers_initialize(proc) if transport == "stdio" else _listens(proc, port)
        assert served and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err.decode(errors="replace")
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    assert f"a2rl: interrupted ({signum.name})" in stderr.splitlines(), stderr
    with Store(env["A2RL_DB_URL"]).session() as s:
        run = s.get(Run, run_id)
    assert run is not None and run.ended_at is None  # a server's end is not the run's

