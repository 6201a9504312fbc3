"""Attacks on the sandbox's walls: the supervisor, the job logs, the limits, the other runs.

Each test is an agent's attack through the real MCP tools on a real run, on both backends, and
asserts on the host (its process table, its files, the store) that the attack did not happen.
The runs get small limits so that a fork bomb, a memory hog or a flood ends in a few seconds.
"""

from __future__ import annotations

import hashlib
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
from sqlalchemy import func
from sqlmodel import select as sql_select

from a2rl.analysis.report import build_report
from a2rl.analysis.web.queries import revision_diff
from a2rl.sandbox import seccomp, volume
from a2rl.sandbox.base import CAP_SYS_RESOURCE, host_has_cap
from a2rl.server import finish_run
from a2rl.server.run import build_runtime
from a2rl.settings import Settings
from a2rl.store import Blob, Job, Revision, Store

from ..conftest import require
from ..helpers import wait_for
from .conftest import Agent, open_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

LIMITS = {
    "sandbox.local.memory": "256m", "sandbox.docker.memory": "256m",
    "sandbox.local.pids_limit": 64, "sandbox.docker.pids_limit": 64,
    "sandbox.disk": "96m", "sandbox.file_size": "32m",
    "sandbox.job_log_max_bytes": "4m", "recording.job_log_keep_bytes": 200_000,
}


@pytest.fixture
async def agent(backend: Settings, store: Store) -> AsyncIterator[Agent]:
    """A fresh arith run on the parametrized backend, with small limits."""
    async for a in open_agent(backend.updated(LIMITS), store):
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


@pytest.mark.cheats("tries to kill the supervisor outside the sandbox")
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


@pytest.mark.cheats("tries to trace the supervisor")
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


@pytest.mark.cheats("probes the sandbox's control socket and the host")
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
    assert lines[0] == str(agent.settings.sandbox.uid) != str(os.geteuid())
    assert lines[1] == str(agent.settings.sandbox.uid)  # no supplementary group
    assert "CapEff:\t0000000000000000" in out["output"]
    assert "CapPrm:\t0000000000000000" in out["output"]
    assert "NoNewPrivs:\t1" in out["output"]
    assert not Path("/probe").exists()
    # The files it writes are the sandbox user's, not root's.
    await agent.sh("echo x > code/mine.py")
    assert (Path(agent.run.workspace) / "code" / "mine.py").stat().st_uid == (
        agent.settings.sandbox.uid)


# -- the kernel's surface: no new namespaces, a seccomp filter ----------------------------------

#: One raw system call each, with arguments that get past the kernel's own checks where a
#: user may make the call at all: without a filter any user gets a user namespace (unshare,
#: clone), a keyring, a user-mode userfaultfd, a software perf counter on itself and
#: ASLR off (personality); the rest the kernel itself refuses a process without capabilities.
#: The filter must answer each first: EPERM, clone3 ENOSYS (so that libc falls back to clone).
SYSCALL_PROBE = r"""
import ctypes, errno, json, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = json.loads(sys.argv[1])
buf = ctypes.create_string_buffer(256)
perf = ctypes.create_string_buffer(struct.pack("<IIQQQQQ", 1, 64, 0, 0, 0, 0, 0b1100000), 128)

def arg(a):
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    if isinstance(a, ctypes.Array):
        return ctypes.cast(a, ctypes.c_void_p)
    return ctypes.c_long(a)

def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *map(arg, args))
    if r == -1:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    if name == "clone":  # it forked: the child leaves at once
        if r == 0:
            os._exit(0)
        os.waitpid(r, 0)
    return "ok"

probes = {
    "mount": (b"none", b"/tmp", b"tmpfs", 0, 0),
    "umount2": (b"/tmp", 0),
    "pivot_root": (b".", b"."),
    "bpf": (0, buf, 72),
    "keyctl": (0, -3, 1),
    "add_key": (b"user", b"a2rl-probe", b"x", 1, -2),
    "request_key": (b"user", b"a2rl-probe", 0, -2),
    "userfaultfd": (1 | os.O_CLOEXEC,),
    "perf_event_open": (perf, 0, -1, -1, 0),
    "kexec_load": (0, 0, 0, 0),
    "init_module": (buf, 0, b""),
    "setns": (os.open("/proc/self/ns/uts", os.O_RDONLY), 0),
    "unshare": (0x10000000,),
    "clone": (0x10000000 | 17, 0, 0, 0, 0),
    "clone3": (0, 0),
    "personality": (0x40000,),
}
print(json.dumps({name: call(name, *args) for name, args in probes.items()}))
"""


def native_syscall_numbers(names: list[str]) -> dict[str, int]:
    """This machine's numbers of the named system calls, from libseccomp's tables."""
    try:
        sc = seccomp._library()
    except seccomp.SeccompUnavailable as exc:
        require(False, str(exc))
    return {name: sc.resolve_syscall(sc.Arch.NATIVE, name) for name in names}


async def test_jobs_cannot_make_namespaces_or_reach_the_filtered_system_calls(
        agent: Agent) -> None:
    """The same probes on both backends: Docker's default profile there, ours locally."""
    out = await agent.sh("grep '^Seccomp:' /proc/self/status; "
                         "for flags in '-U -r' -m -n -p -i -u -C; do "
                         "unshare $flags --fork true 2>&1; echo \"$flags=$?\"; done")
    text = out["output"]
    assert "Seccomp:\t2" in text, text  # a filter is installed
    for flags in ("-U -r", "-m", "-n", "-p", "-i", "-u", "-C"):
        assert f"{flags}=1" in text, text
    assert text.count("Operation not permitted") == 7, text
    names = ["mount", "umount2", "pivot_root", "bpf", "keyctl", "add_key", "request_key",
             "userfaultfd", "perf_event_open", "kexec_load", "init_module", "setns", "unshare",
             "clone", "clone3", "personality"]
    numbers = json.dumps(native_syscall_numbers(names))
    out = await agent.sh(f"cat > /tmp/probe.py <<'EOF'\n{SYSCALL_PROBE}\nEOF\n"
                         f"python3 /tmp/probe.py '{numbers}'")
    results = json.loads(out["output"].strip().splitlines()[-1])
    expected = {name: "EPERM" for name in names} | {"clone3": "ENOSYS"}
    assert results == expected, results
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"


ORDINARY_WORK = r"""
import multiprocessing, subprocess, threading


def main():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = []
    t = threading.Thread(target=out.append, args=("thread",))
    t.start()
    t.join()
    out.append(subprocess.run(["echo", "subprocess"], capture_output=True, text=True,
                              check=True).stdout.strip())
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            out.append(f"{method}={sum(pool.map(abs, [-1, -2, -3]))}")
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=16, num_workers=2):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    out.append("trained" if losses[-1] < losses[0] / 2 else f"not learning {losses}")
    print(" ".join(out))


if __name__ == "__main__":
    main()
"""


async def test_ordinary_work_runs_under_the_filter(backend: Settings, store: Store) -> None:
    """Threads, subprocesses, both multiprocessing starts and a torch training step with
    DataLoader workers: everything a training job does still works under the filter."""
    async for agent in open_agent(backend, store):
        out = await agent.sh(f"cat > /tmp/work.py <<'EOF'\n{ORDINARY_WORK}\nEOF\n"
                             "python3 /tmp/work.py", wait_s=60)
        for _ in range(3):  # a loaded machine imports torch three times slowly
            if out["status"] != "running":
                break
            out = await agent.ok("job_status", job_id=out["job_id"], wait_s=60)
        assert out["exit_code"] == 0, out
        assert out["output"].strip().endswith(
            "thread subprocess fork=6 spawn=6 trained"), out["output"]


# -- job logs ----------------------------------------------------------------------------------


@pytest.mark.cheats("links its job log to the host's secrets")
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


#: Many small processes whose sum crosses the memory limit: each is smaller than the supervisor,
#: so where they share its memory cgroup the OOM killer's first pick would be the supervisor.
SMALL_HOGS = ("for i in $(seq 1 40); do python3 -c 'import time; x = bytearray(6 << 20); "
              "time.sleep(8)' & done; wait; echo waited")


@pytest.mark.cheats("tries to lower its own OOM score after reading pid 1's")
async def test_memory_hog_ends_that_job_only(agent: Agent) -> None:
    """A hog ends its job with a message; so does a hog of many small processes, and the
    supervisor that answers afterwards is the same one: locally jobs have their own cgroup,
    without the supervisor, even for a job that lowers its OOM score; in a container every
    job's score is 1000 and the supervisor's -1000 where the host gives CAP_SYS_RESOURCE."""
    if agent.run.backend == "local":
        require(os.geteuid() == 0, "a memory cgroup needs root on this machine")
    await agent.sh("true")
    before = supervisor_identity(agent)
    hog = await agent.sh("python3 -c 'x = bytearray(1024**3); print(len(x))'", wait_s=60)
    assert hog["exit_code"] != 0 and "memory limit 256m reached" in hog["hint"], hog
    assert "1073741824" not in hog["output"]
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"
    out = await agent.sh("cat /proc/1/oom_score_adj /proc/self/oom_score_adj; "
                         "echo -1000 > /proc/self/oom_score_adj; echo rc=$?")
    supervisor_adj, job_adj = out["output"].split()[:2]
    assert job_adj == "1000" and "rc=1" in out["output"], out  # a job cannot exempt itself
    if host_has_cap(CAP_SYS_RESOURCE):
        assert supervisor_adj == "-1000"
        out = await agent.sh("echo 0 > /proc/self/oom_score_adj; echo rc=$?")
        assert "rc=1" in out["output"], out  # nor come down from 1000
    # Locally the jobs' cgroup holds whatever a job does to its score.
    lower = "echo 0 > /proc/self/oom_score_adj; " if agent.run.backend == "local" else ""
    hogs = await agent.sh(lower + SMALL_HOGS, wait_s=60)
    assert hogs["status"] == "exited" and "waited" in hogs["output"], hogs
    assert supervisor_identity(agent) == before  # the same supervisor, and it answers
    assert (await agent.sh("echo alive"))["output"].strip() == "alive"


def supervisor_identity(agent: Agent) -> tuple[int, float]:
    """(pid, start time) of the supervisor that answers: a restarted one differs."""
    control = run_dir(agent) / "control"
    token = (control / "token").read_text().strip()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(control / "sock" / "supervisor.sock"))
        sock.sendall(json.dumps({"token": token, "op": "ping"}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    assert reply["ok"], reply
    return int(reply["pid"]), float(reply["started"])


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
    await assert_room_can_be_made(agent, "code/fill*")


async def test_fallocate_faster_than_the_watch_meets_the_kernel(agent: Agent) -> None:
    """fallocate reserves blocks at once, well inside the watch's interval: the workspace's own
    size-limited filesystem refuses them (ENOSPC) before any host disk is spent."""
    require(volume.unavailable_reason() is None,
            f"a workspace volume cannot be made here: {volume.unavailable_reason()}")
    workspace = Path(agent.run.workspace)
    assert os.path.ismount(workspace) and agent.run.config.setup.disk_volume
    out = await agent.sh("for i in $(seq 1 40); do fallocate -l 30M code/f$i 2>&1 || break; "
                         "done; echo done", wait_s=30)
    assert "No space left on device" in out["output"], out
    used = sum(p.stat().st_blocks * 512 for p in workspace.rglob("f*") if p.is_file())
    assert used < 40 * 30 << 20
    await assert_room_can_be_made(agent, "code/f*")


async def assert_room_can_be_made(agent: Agent, pattern: str) -> None:
    """Over the limit, a job that deletes files is left alone, however long it runs: the watch
    blames growth, and a job started after the disk filled cannot have filled it."""
    out = await agent.sh(f"sleep 5; rm -f {pattern}; echo freed", wait_s=30)
    assert out["output"].strip() == "freed", out


async def test_sparse_file_cannot_exceed_the_file_size_limit(agent: Agent) -> None:
    out = await agent.sh("truncate -s 10G code/sparse; echo t=$?; "
                         "dd if=/dev/zero of=code/sparse2 bs=1 count=1 seek=1G 2>&1 | tail -1; "
                         "ls -l code/")
    assert "t=1" in out["output"], out
    for name in ("sparse", "sparse2"):
        path = Path(agent.run.workspace) / "code" / name
        assert not path.exists() or path.stat().st_size <= 32 * 2**20


STORE_CAPS = {"recording.revision_run_max_bytes": 2 << 20, "recording.job_log_keep_bytes": 300_000,
              "recording.job_log_run_keep_bytes": 1_000_000}


def blob_bytes(store: Store) -> tuple[int, int]:
    """(content bytes, bytes as stored) of every blob in the store."""
    with store.session() as s:
        rows = s.exec(sql_select(Blob.size, func.length(Blob.data))).all()
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


async def test_many_distinct_files_and_logs_stay_within_the_runs_store_caps(
        backend: Settings, store: Store) -> None:
    """Each command writes 120 distinct, incompressible 100 KB files (12 MB a command, each
    under the per-file limit), then floods its output: the store grows by at most the run's
    revision cap plus its job log cap. Every change is still recorded, past the cap by path,
    size and sha256 without content; the agent still reads every job's whole output."""
    async for agent in open_agent(backend.updated({**LIMITS, **STORE_CAPS}), store):
        before = blob_bytes(store)
        jobs = []
        for i in range(3):
            out = await agent.sh(
                f"mkdir -p code/gen{i} && for f in $(seq 1 120); do head -c 75000 /dev/urandom "
                f"| base64 -w0 > code/gen{i}/f$f.txt; done; "
                "head -c 300000 /dev/urandom | base64 -w0; echo; echo end-of-output", wait_s=60)
            assert out["exit_code"] == 0 and out["output"].rstrip().endswith("end-of-output")
            jobs.append(out["job_id"])
        for _ in range(2):  # logs alone, past the log cap
            out = await agent.sh("head -c 300000 /dev/urandom | base64 -w0; echo; echo tail-end")
            assert out["output"].rstrip().endswith("tail-end")
            jobs.append(out["job_id"])
        grown = [a - b for a, b in zip(blob_bytes(store), before, strict=True)]
        cap = (STORE_CAPS["recording.revision_run_max_bytes"]
               + STORE_CAPS["recording.job_log_run_keep_bytes"])
        assert max(grown) <= cap, (grown, cap)
        ws = Path(agent.run.workspace)
        with store.session() as s:
            revs = {r.path: r for r in s.exec(sql_select(Revision).where(
                Revision.run_id == agent.run.id, Revision.path.startswith("code/gen"))).all()}
            rows = [s.get(Job, j) for j in jobs]
        assert len(revs) == 360  # every file is recorded
        dropped = [r for r in revs.values() if not r.content_stored]
        assert 300 < len(dropped) < 360 and sum(r.content_stored for r in revs.values()) > 10
        for r in dropped[:20] + [revs["code/gen2/f120.txt"]]:
            data = (ws / r.path).read_bytes()
            assert r.size == len(data) and r.blob_sha == hashlib.sha256(data).hexdigest()
            with pytest.raises(KeyError):
                store.get_blob(r.blob_sha)  # the content is not in the store
        assert all(row is not None and row.log_bytes > 400_000 for row in rows)
        assert rows[0].log_blob_sha and not rows[-1].log_blob_sha  # the last keeps its size only
        # The whole log is where the agent reads it.
        text = (await agent.ok("read_file", path=f"logs/{jobs[-1]}.log"))["content"]
        assert text.rstrip().endswith("tail-end")
        # The run's record says what the caps left out: the report and the viewer's diff.
        metrics = build_report(store, agent.run.id).metrics
        assert metrics.revisions_without_content == len(dropped)
        assert metrics.job_logs_not_stored >= 1
        _, diff = revision_diff(store, agent.run.id, dropped[0].id or 0) or (None, "")
        assert "content not stored" in diff and dropped[0].blob_sha in diff


# -- every process of the run ends -------------------------------------------------------------


async def test_daemon_does_not_outlive_the_deadline(agent: Agent) -> None:
    t = tag()
    await agent.sh(DAEMON.format(t=t))
    assert wait_for(lambda: len(host_procs(f"1000.{t}")) >= 3), host_procs(f"1000.{t}")
    # The budget runs out: the supervisor stops at its deadline, and the run's whole pid
    # namespace (and cgroup) with it.
    rt = build_runtime(agent.settings, agent.store, agent.run)
    rt.sandbox.get().set_deadline(time.time() + 1)
    assert wait_for(lambda: not host_procs(f"1000.{t}"), 15), host_procs(f"1000.{t}")


@pytest.mark.cheats("looks for another run's processes")
async def test_other_runs_processes_are_invisible(agent: Agent, backend: Settings,
                                                  store: Store) -> None:
    t = tag()
    async for other in open_agent(backend.updated(LIMITS), store):
        job = await other.sh(f"sleep 1000.{t}", wait_s=0.5)
        assert job["status"] == "running"
        assert wait_for(lambda: len(host_procs(f"1000.{t}")) == 1)
        (pid,) = host_procs(f"1000.{t}")
        out = await agent.sh(f"ps -eo pid,args 2>/dev/null || ls /proc; grep -l 1000.{t} "
                             f"/proc/*/cmdline 2>/dev/null; kill -9 {pid}; echo k=$?")
        assert f"1000.{t}" not in out["output"].replace(f"grep -l 1000.{t}", "")
        assert "k=1" in out["output"]
        assert host_procs(f"1000.{t}") == [pid]  # still running


# -- a restarted sandbox mounts nothing the agent pointed elsewhere ----------------------------


@pytest.mark.cheats("tries to replace the read-only inputs with host files")
async def test_readonly_input_replaced_by_a_symlink_is_not_mounted_at_restart(
        backend: Settings, store: Store) -> None:
    """A declared read-only input the task left empty is a name in the agent's workspace: a job
    makes it a symlink to the host's secrets. When the sandbox starts again (its supervisor
    lost, a new server takes the run over), the input is not bound by name: the secrets stay
    out of the sandbox, and the new sandbox runs commands."""
    secret = f"SECRET-{tag()}"
    seed = backend.home_dir / "secrets" / f"probe-{tag()}.seed"
    seed.parent.mkdir(parents=True, exist_ok=True)
    seed.write_text(secret)
    try:
        async for agent in open_agent(backend, store, task_id="fixture-inputs"):
            out = await agent.sh(f"ls -d env 2>&1; ln -s {seed.parent} env && echo linked")
            assert "linked" in out["output"], out
            assert (Path(agent.run.workspace) / "env").is_symlink()
            # The supervisor is lost (killed from the host, as the machine's OOM killer or a
            # reboot would); a new server serving the run starts a new sandbox.
            build_runtime(agent.settings, agent.store, agent.run).sandbox.get()._force_stop()
            async for again in reopen(agent):
                out = await again.sh(f"cat env/{seed.name} 2>&1; ls env/ 2>&1; echo end")
                assert secret not in out["output"], out
                assert seed.name not in out["output"].splitlines(), out  # not listed
                assert out["output"].rstrip().endswith("end")
    finally:
        seed.unlink()


async def reopen(agent: Agent) -> AsyncIterator[Agent]:
    """A second server on the same run, as after a restart (the run is finished by the first)."""
    from mcp import Client

    from a2rl.server import build_server

    server = build_server(agent.settings, agent.store, run_id=agent.run.id, transport="memory")
    async with Client(server, mode="legacy") as client:
        yield Agent(client, agent.run, agent.settings, agent.store)
