"""Attacks on the sandbox's walls: the supervisor, the job logs, the limits, the other runs.

Each test is an agent's attack through the real MCP tools on a real run, on both backends, and
asserts on the host (its process table, its files, the store) that the attack did not happen.
The runs get small limits so that a fork bomb, a memory hog or a flood ends in a few seconds.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from a2rl.server import finish_run
from a2rl.server.run import build_runtime
from a2rl.settings import Settings
from a2rl.store import Job, Store
from a2rl.tools.sandbox import volume

from ..conftest import require
from ..helpers import wait_for
from .conftest import Agent, open_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

LIMITS = {
    "sandbox_memory": "256m", "docker_memory": "256m",
    "sandbox_pids_limit": 64, "docker_pids_limit": 64,
    "sandbox_disk": "96m", "sandbox_file_size": "32m",
    "job_log_max_bytes": "4m", "job_log_keep_bytes": 200_000,
}


@pytest.fixture
async def agent(backend: Settings, store: Store) -> AsyncIterator[Agent]:
    """A fresh arith run on the parametrized backend, with small limits."""
    async for a in open_agent(backend.model_copy(update=LIMITS), store):
        yield a


def run_dir(agent: Agent) -> Path:
    return Path(agent.run.workspace).parent


def tag() -> str:
    return str(random.randrange(10**8, 10**9))


def host_procs(marker: str) -> list[int]:
    """Host pids of live processes whose command line holds `marker` (any pid namespace)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found



def supervisor_answers(agent: Agent) -> int:
    """Ping the run's supervisor through its host socket; its pid (inside its namespace)."""
    control = run_dir(agent) / "control"
    token = (control / "token").read_text().strip()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(control / "sock" / "supervisor.sock"))
        sock.sendall(json.dumps({"token": token, "op": "ping"}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    assert reply["ok"], reply
    return int(reply["pid"])


def stored_log(agent: Agent, job_id: str) -> bytes:
    with agent.store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        sha = row.log_blob_sha
    return agent.store.get_blob(sha) if sha else b""


DAEMON = """
setsid sh -c 'trap "" TERM HUP INT; exec sleep 1000.{t}1' < /dev/null > /dev/null 2>&1 &
( ( setsid sleep 1000.{t}2 < /dev/null > /dev/null 2>&1 & ) & )
( unshare -Urpf --mount-proc sleep 1000.{t}3 < /dev/null > /dev/null 2>&1 & ) 2>/dev/null
nohup sleep 1000.{t}4 < /dev/null > /dev/null 2>&1 &
"""


# -- the supervisor is out of the jobs' reach -------------------------------------------------


async def test_supervisor_survives_kill_and_stop_then_daemons_die_at_finish(agent: Agent) -> None:
    await agent.sh("true")  # the sandbox starts at the first command
    before = supervisor_answers(agent)
    assert before == 1  # the pid namespace's init
    out = await agent.sh("kill -9 1; echo k=$?; kill -STOP 1; echo s=$?; kill -TERM 1; "
                         "kill -INT 1; kill -9 -1; echo done")
    assert "k=1" in out["output"] and "s=1" in out["output"], out
    assert supervisor_answers(agent) == 1  # alive, not stopped: it answers
    t = tag()
    await agent.sh(DAEMON.format(t=t))
    assert wait_for(lambda: len(host_procs(f"1000.{t}")) >= 3), host_procs(f"1000.{t}")
    # The next command works: the supervisor is intact.
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"
    finish_run(agent.settings, agent.store, agent.run.id)
    assert wait_for(lambda: not host_procs(f"1000.{t}"), 10), host_procs(f"1000.{t}")


async def test_supervisor_cannot_be_traced_or_read(agent: Agent) -> None:
    await agent.sh("true")
    token = (run_dir(agent) / "control" / "token").read_text().strip()
    out = await agent.sh(
        "python3 -c \"import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print('attach', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\"; "
        "cat /proc/1/environ; ls -l /proc/1/fd; ls -l /proc/1/cwd; head -c 100 /proc/1/mem; "
        "env")
    text = out["output"]
    assert "attach -1" in text, text
    assert token not in text and "A2RL_SUPERVISOR_TOKEN" not in text
    assert "supervisor.sock" not in text and "socket:[" not in text  # no fd listing
    supervisor_answers(agent)


async def test_control_socket_cannot_be_found_replaced_or_proxied(agent: Agent) -> None:
    await agent.sh("true")
    sock_path = run_dir(agent) / "control" / "sock" / "supervisor.sock"
    inode = sock_path.stat().st_ino
    out = await agent.sh(
        f"find / -xdev -type s 2>/dev/null; ls -la {sock_path.parent} /a2rl/control 2>&1; "
        f"mv {sock_path} /tmp/x 2>&1; rm -f {sock_path} 2>&1; "
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect('{sock_path}')\" 2>&1 | tail -1; "
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.bind('{sock_path}')\" 2>&1 | tail -1; echo end")
    assert "supervisor.sock" not in out["output"].replace(str(sock_path), ""), out["output"]
    assert sock_path.stat().st_ino == inode  # the very socket the supervisor listens on
    assert supervisor_answers(agent) == 1
    assert (await agent.sh("echo still"))["output"].strip() == "still"


async def test_jobs_run_as_the_sandbox_user_without_privileges(agent: Agent) -> None:
    require(os.geteuid() == 0, "uid separation needs the server to run as root")
    out = await agent.sh("id -u; id -G; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status;"
                         " touch /probe 2>&1 | tail -1")
    lines = out["output"].splitlines()
    assert lines[0] == str(agent.settings.sandbox_uid) != str(os.geteuid())
    assert lines[1] == str(agent.settings.sandbox_uid)  # no supplementary group
    assert "CapEff:\t0000000000000000" in out["output"]
    assert "CapPrm:\t0000000000000000" in out["output"]
    assert "NoNewPrivs:\t1" in out["output"]
    assert not Path("/probe").exists()
    # The files it writes are the sandbox user's, not root's.
    await agent.sh("echo x > code/mine.py")
    assert (Path(agent.run.workspace) / "code" / "mine.py").stat().st_uid == (
        agent.settings.sandbox_uid)


# -- job logs ----------------------------------------------------------------------------------


async def test_job_log_symlinked_to_host_secrets_is_not_read(agent: Agent) -> None:
    secret = secrets.token_hex(16)
    seed = agent.settings.home_dir / "secrets" / f"probe-{tag()}.seed"
    seed.parent.mkdir(parents=True, exist_ok=True)
    seed.write_text(secret)
    try:
        db = agent.settings.database_url.removeprefix("sqlite:///")
        for target in (seed, db, "/etc/shadow"):
            out = await agent.sh(
                f"rm -f logs/$A2RL_JOB.log; ln -sfn {target} logs/$A2RL_JOB.log; "
                f"echo x > /a2rl/joblogs/$A2RL_JOB.log 2>&1 | tail -1; "
                f"ln -sfn {target} /a2rl/joblogs/$A2RL_JOB.log 2>&1 | tail -1; echo end")
            status = await agent.ok("job_status", job_id=out["job_id"])
            for text in (out["output"], status["output"], stored_log(agent, out["job_id"])):
                text = text.decode() if isinstance(text, bytes) else text
                assert secret not in text and "SQLite format" not in text
                assert "root:" not in text
            assert out["output"].rstrip().endswith("end")  # the job's own output, intact
            log = agent.settings.runs_dir / agent.run.id / "control" / "joblogs"
            assert not (log / f"{out['job_id']}.log").is_symlink()
    finally:
        seed.unlink()


async def test_fifo_as_job_log_does_not_hang(agent: Agent) -> None:
    start = time.monotonic()
    out = await agent.sh("rm -f logs/$A2RL_JOB.log; mkfifo logs/$A2RL_JOB.log; "
                         "mkfifo /a2rl/joblogs/$A2RL_JOB.x 2>&1 | tail -1; echo end")
    await agent.ok("job_status", job_id=out["job_id"])
    await agent.ok("job_status")
    assert time.monotonic() - start < 20
    assert out["output"].rstrip().endswith("end")


async def test_log_flood_is_bounded_and_ends_the_job(agent: Agent) -> None:
    rss = psutil.Process().memory_info().rss
    out = await agent.sh("head -c 400000000 /dev/zero | tr '\\0' x; echo never", wait_s=60)
    assert out["status"] == "exited" and "log flood" in out["hint"], out
    log = run_dir(agent) / "control" / "joblogs" / f"{out['job_id']}.log"
    assert log.stat().st_size <= 4 * 2**20 + 1000  # the limit, and the closing note
    assert len(out["output"]) < 20_000
    assert len(stored_log(agent, out["job_id"])) <= 200_000 + 100
    # The server read head and tail only: it did not grow by anything near the flood.
    assert psutil.Process().memory_info().rss - rss < 100 * 2**20
    assert (await agent.sh("echo next"))["output"].strip() == "next"


# -- limits ------------------------------------------------------------------------------------


async def test_fork_bomb_ends_that_job_only(agent: Agent) -> None:
    bomb = await agent.sh("python3 -c 'import os\nwhile True:\n    try: os.fork()\n"
                          "    except OSError: pass'", wait_s=30)
    assert bomb["status"] == "exited" and "process limit 64" in bomb["hint"], bomb
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"


async def test_memory_hog_ends_that_job_only(agent: Agent) -> None:
    if agent.run.backend == "local":
        require(os.geteuid() == 0, "a memory cgroup needs root on this machine")
    hog = await agent.sh("python3 -c 'x = bytearray(1024**3); print(len(x))'", wait_s=60)
    assert hog["exit_code"] != 0 and "memory limit 256m reached" in hog["hint"], hog
    assert "1073741824" not in hog["output"]
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"


async def test_disk_filler_ends_that_job(agent: Agent) -> None:
    workspace = Path(agent.run.workspace)
    # A second between files: the watch looks every 2 s, so it must end the job after a few
    # files even on a loaded machine (the kernel's own wall is test_fallocate_...'s).
    out = await agent.sh("for i in $(seq 1 12); do head -c 30000000 /dev/zero > code/fill$i; "
                         "sleep 1; done; sleep 30; echo never", wait_s=50)
    assert out["status"] == "exited" and "disk limit 96m" in out["hint"], out
    assert "never" not in out["output"]
    used = sum(p.stat().st_blocks * 512 for p in workspace.rglob("fill*"))
    assert used < 12 * 30_000_000
    assert (await agent.sh("rm -f code/fill*; echo freed"))["output"].strip() == "freed"


async def test_fallocate_faster_than_the_watch_meets_the_kernel(agent: Agent) -> None:
    """fallocate reserves blocks at once, well inside the watch's interval: the workspace's own
    size-limited filesystem refuses them (ENOSPC) before any host disk is spent."""
    require(volume.unavailable_reason() is None,
            f"a workspace volume cannot be made here: {volume.unavailable_reason()}")
    workspace = Path(agent.run.workspace)
    assert os.path.ismount(workspace) and agent.run.config["disk_volume"]
    out = await agent.sh("for i in $(seq 1 40); do fallocate -l 30M code/f$i 2>&1 || break; "
                         "done; echo done", wait_s=30)
    assert "No space left on device" in out["output"], out
    used = sum(p.stat().st_blocks * 512 for p in workspace.rglob("f*") if p.is_file())
    assert used < 40 * 30 << 20
    assert (await agent.sh("rm -f code/f*; echo freed"))["output"].strip() == "freed"


async def test_sparse_file_cannot_exceed_the_file_size_limit(agent: Agent) -> None:
    out = await agent.sh("truncate -s 10G code/sparse; echo t=$?; "
                         "dd if=/dev/zero of=code/sparse2 bs=1 count=1 seek=1G 2>&1 | tail -1; "
                         "ls -l code/")
    assert "t=1" in out["output"], out
    for name in ("sparse", "sparse2"):
        path = Path(agent.run.workspace) / "code" / name
        assert not path.exists() or path.stat().st_size <= 32 * 2**20


# -- every process of the run ends -------------------------------------------------------------


async def test_daemon_does_not_outlive_the_deadline(agent: Agent) -> None:
    t = tag()
    await agent.sh(DAEMON.format(t=t))
    assert wait_for(lambda: len(host_procs(f"1000.{t}")) >= 3), host_procs(f"1000.{t}")
    # The budget runs out: the supervisor stops at its deadline, and the run's whole pid
    # namespace (and cgroup) with it.
    build_runtime(agent.settings, agent.store, agent.run).sandbox().set_deadline(time.time() + 1)
    assert wait_for(lambda: not host_procs(f"1000.{t}"), 15), host_procs(f"1000.{t}")


async def test_other_runs_processes_are_invisible(agent: Agent, backend: Settings,
                                                  store: Store) -> None:
    t = tag()
    async for other in open_agent(backend.model_copy(update=LIMITS), store):
        job = await other.sh(f"sleep 1000.{t}", wait_s=0.5)
        assert job["status"] == "running"
        assert wait_for(lambda: len(host_procs(f"1000.{t}")) == 1)
        (pid,) = host_procs(f"1000.{t}")
        out = await agent.sh(f"ps -eo pid,args 2>/dev/null || ls /proc; grep -l 1000.{t} "
                             f"/proc/*/cmdline 2>/dev/null; kill -9 {pid}; echo k=$?")
        assert f"1000.{t}" not in out["output"].replace(f"grep -l 1000.{t}", "")
        assert "k=1" in out["output"]
        assert host_procs(f"1000.{t}") == [pid]  # still running
