"""Per-run job supervisor: a standalone script, standard library only.

It runs inside bubblewrap (or, unisolated, as a plain detached process) where only this file is
visible, so it must not import anything from a2rl. It listens on a unix socket and speaks JSON
lines: one request object per line, one response object per line, several connections at once.

Every request carries the token the launcher wrote on stdin: {"token": ..., "op": ..., ...}.
Responses are {"ok": true, ...} or {"ok": false, "error": "..."}. Operations:

    ping                                   -> {"ok", "pid", "deadline"}
    spawn {job_id, command, log_path, env} -> {"ok", "job"}
    get {job_id}                           -> {"ok", "job"}
    wait {job_id, timeout}                 -> {"ok", "job"}  (returns early when the job ends)
    list                                   -> {"ok", "jobs"}
    kill {job_id}                          -> {"ok", "job"}
    set_deadline {deadline}                -> {"ok", "deadline"}
    shutdown                               -> {"ok"} once every job is killed; then it exits

A job is `bash -c command` in the workspace, stdin /dev/null, stdout and stderr appended to
log_path, with A2RL_JOB=<job_id> and A2RL_SANDBOX=<nonce> in its environment. Each job runs under
its own forked *shim*: a session leader and child subreaper, so whatever the command
double-forks or setsids stays in the shim's tree, and `kill` finds it there (and by session,
process group and marker variable). The job ends when bash exits; leftovers it started in the
background keep running, under the shim, until the job is killed or the sandbox stops.

Exit codes: a job that dies of signal N has exit_code -N (the convention of Python's
subprocess); bash itself reports 128+N when the command was not its last simple command, and
that code is kept as is. A job the supervisor killed has state `killed` (or `timeout` at the
deadline) and exit_code -9. `pid` is bash's pid as seen inside the sandbox's pid namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hmac
import json
import os
import signal
import socket
import socketserver
import sys
import threading
import time
import warnings
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
SANDBOX_VAR = "A2RL_SANDBOX"  # the supervisor's nonce, inherited by every job
JOB_VAR = "A2RL_JOB"  # the job id, so that daemonized descendants can still be found
KILL_ROUNDS = 50


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} supervisor: {message}", file=sys.stderr, flush=True)


PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved once: forked shims call it too


def prctl(option: int, value: int) -> None:
    if PRCTL(option, value, 0, 0, 0) != 0:
        log(f"prctl({option}) failed: errno {ctypes.get_errno()}")


class Proc:
    """One /proc entry: what attribution needs."""

    __slots__ = ("pid", "ppid", "pgrp", "sid", "start", "state")

    def __init__(self, pid: int, ppid: int, pgrp: int, sid: int, start: int, state: str):
        self.pid, self.ppid, self.pgrp, self.sid = pid, ppid, pgrp, sid
        self.start, self.state = start, state


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0])


def read_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (SANDBOX_VAR.encode(), JOB_VAR.encode()):
            env[key.decode()] = value.decode("utf-8", "replace")
    return env


def list_procs() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None and proc.state != "Z":
                procs[proc.pid] = proc
    return procs


class Job:
    def __init__(self, job_id: str, command: str, log_path: str, shim: int):
        self.job_id, self.command, self.log_path = job_id, command, log_path
        self.shim = shim  # the job's own subreaper; every descendant stays in its tree
        self.shim_reaped = False  # once reaped, its pid may belong to a stranger
        self.pid: int | None = None  # bash, the command itself
        self.state = "running"
        self.exit_code: int | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.stop_reason: str | None = None  # "killed" or "timeout" once the supervisor kills it

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "command": self.command,
            "state": self.state,
            "exit_code": self.exit_code,
            "pid": self.pid,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "log_path": self.log_path,
        }


def job_shim(report: int, log_fd: int, bash: str, argv: list[str], env: dict[str, str]) -> None:
    """Body of the forked per-job process; never returns.

    It becomes a session leader and a child subreaper, then runs bash: a descendant that
    double-forks or calls setsid is reparented to this process, not to the supervisor, so the
    job's whole tree is always the tree under it. It reports bash's pid and exit code on the
    `report` pipe and lives on, reaping, while leftovers of the job run.
    """
    code = 0
    try:
        # Only async-signal-safe-ish calls here: the parent has other threads, whose locks
        # (logging, stderr) may be held in this copy of memory.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        # The parent's other descriptors (the listening socket, other jobs' report pipes, whose
        # readers would never see EOF) must not live on here. Listing them beats closerange up
        # to a high limit, which is one syscall per number where close_range is unavailable.
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) not in (report, log_fd):
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.setsid()
        PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        PRCTL(PR_SET_NAME, b"a2rl-job", 0, 0, 0)
        pid = os.posix_spawn(
            bash,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ],
            setsigmask=(),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM),
        )
        os.close(log_fd)
        os.write(report, b"pid %d\n" % pid)
        while True:
            try:
                child, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if child == pid:
                os.write(report, b"exit %d\n" % os.waitstatus_to_exitcode(status))
    except BaseException:
        code = 127
    finally:
        os._exit(code)


class Supervisor:
    def __init__(self, token: str, workspace: str, deadline: float):
        self.token = token
        self.workspace = workspace
        self.deadline = deadline
        self.nonce = os.environ.get(SANDBOX_VAR, "")
        self.jobs: dict[str, Job] = {}
        self.by_shim: dict[int, Job] = {}
        self.lock = threading.Condition()
        self.children = threading.Event()  # set once there is something to reap
        self.stopping = threading.Event()
        self.marker_cache: dict[tuple[int, int], str | None] = {}
        self.bash = "/bin/bash" if os.path.exists("/bin/bash") else "/usr/bin/bash"

    # -- processes ---------------------------------------------------------------------------

    def spawn(self, job_id: str, command: str, log_path: str, env: dict[str, str]) -> Job:
        if not os.path.isabs(log_path):
            raise ValueError("log_path must be absolute")
        if self.stopping.is_set():
            raise ValueError("the sandbox is stopping")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        child_env = dict(os.environ)
        child_env.update(env)
        child_env[JOB_VAR] = job_id
        child_env[SANDBOX_VAR] = self.nonce
        argv = ["bash", "-c", command]
        with self.lock:  # held until the job is in the table, so the reaper can match it
            if job_id in self.jobs:
                raise ValueError(f"job {job_id!r} already exists")
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            read_end, write_end = os.pipe()
            try:
                shim = os.fork()
                if shim == 0:
                    job_shim(write_end, log_fd, self.bash, argv, child_env)
            finally:
                os.close(write_end)
                os.close(log_fd)
            job = Job(job_id, command, log_path, shim)
            self.jobs[job_id] = job
            self.by_shim[shim] = job
        self.children.set()
        reports = os.fdopen(read_end, "rb")
        first = reports.readline().split()
        with self.lock:
            if first[:1] == [b"pid"]:
                job.pid = int(first[1])
            threading.Thread(target=self.follow, args=(job, reports), daemon=True).start()
            return job

    def follow(self, job: Job, reports: Any) -> None:
        """Read the shim's report of bash's exit; EOF without one means the shim was killed."""
        code: int | None = None
        with reports:
            for line in reports:
                parts = line.split()
                if parts[:1] == [b"exit"]:
                    code = int(parts[1])
                    break
        with self.lock:
            job.ended_at = time.time()
            job.state = job.stop_reason or "exited"
            if code is None:  # killed before bash reported, or bash could not start at all
                code = -signal.SIGKILL if job.stop_reason else (None if job.pid else 127)
            job.exit_code = code
            self.lock.notify_all()

    def reap_forever(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                self.children.clear()
                self.children.wait(1.0)
                continue
            except InterruptedError:
                continue
            with self.lock:
                job = self.by_shim.pop(pid, None)
                if job is not None:
                    job.shim_reaped = True
                # Otherwise an orphan whose shim was gone, adopted by this subreaper.

    def members(self, procs: dict[int, Proc], job_ids: set[str] | None) -> set[int]:
        """Live processes of the given jobs (all when job_ids is None), their shims excluded."""
        with self.lock:
            roots = {
                j.shim
                for j in self.jobs.values()
                if not j.shim_reaped and (job_ids is None or j.job_id in job_ids)
            }
        children: dict[int, list[int]] = {}
        found: set[int] = set()
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
            if proc.pid in roots or proc.pid == os.getpid():
                continue
            if proc.sid in roots or proc.pgrp in roots:
                found.add(proc.pid)
                continue
            # The marker finds a process that somehow left the tree (it cannot, short of
            # ptrace tricks; this is a second net).
            key = (proc.pid, proc.start)
            if key not in self.marker_cache:
                env = read_environ(proc.pid)
                mine = self.nonce and env.get(SANDBOX_VAR) == self.nonce
                self.marker_cache[key] = env.get(JOB_VAR) if mine else None
            marked = self.marker_cache[key]
            if marked is not None and (job_ids is None or marked in job_ids):
                found.add(proc.pid)
        stack = [*roots, *found]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in found and child not in roots:
                    found.add(child)
                    stack.append(child)
        return found

    def kill_jobs(self, job_ids: set[str] | None, reason: str) -> None:
        """SIGKILL every process of the given jobs until none is left, then their shims."""
        with self.lock:
            for job in self.jobs.values():
                if (job_ids is None or job.job_id in job_ids) and job.state == "running":
                    job.stop_reason = reason
        me = os.getpid()
        for _ in range(KILL_ROUNDS):
            procs = list_procs()
            found = self.members(procs, job_ids)
            if job_ids is None:  # shutting down: orphans this process adopted go too
                found.update(p.pid for p in procs.values() if p.ppid == me)
                with self.lock:
                    found -= {j.shim for j in self.jobs.values() if not j.shim_reaped}
            if not found:
                break
            # The shims stay alive meanwhile: whatever the killed processes fork lands under
            # them and is found by the next round.
            for pid in found:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        with self.lock:
            for job in self.jobs.values():
                if (job_ids is None or job.job_id in job_ids) and not job.shim_reaped:
                    with contextlib.suppress(OSError):
                        os.kill(job.shim, signal.SIGKILL)
        live = {(p.pid, p.start) for p in list_procs().values()}
        for key in [k for k in self.marker_cache if k not in live]:
            self.marker_cache.pop(key, None)  # another kill may be pruning too
        # Wait briefly for the shims' reports so that the answer is final.
        end = time.monotonic() + 2.0
        with self.lock:
            while time.monotonic() < end and any(
                (job_ids is None or j.job_id in job_ids) and j.state == "running"
                for j in self.jobs.values()
            ):
                self.lock.wait(0.05)

    # -- requests ----------------------------------------------------------------------------

    def job(self, job_id: Any) -> Job:
        job = self.jobs.get(str(job_id))
        if job is None:
            raise ValueError(f"no job {job_id!r}")
        return job

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if not hmac.compare_digest(str(request.get("token", "")), self.token):
            return {"ok": False, "error": "bad token"}
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "deadline": self.deadline}
        if op == "spawn":
            env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
            job = self.spawn(
                str(request["job_id"]), str(request["command"]), str(request["log_path"]), env
            )
            return {"ok": True, "job": job.as_dict()}
        if op == "get":
            with self.lock:
                return {"ok": True, "job": self.job(request["job_id"]).as_dict()}
        if op == "wait":
            timeout = max(0.0, float(request.get("timeout", 0)))
            with self.lock:
                job = self.job(request["job_id"])
                self.lock.wait_for(lambda: job.state != "running", timeout)
                return {"ok": True, "job": job.as_dict()}
        if op == "list":
            with self.lock:
                return {"ok": True, "jobs": [j.as_dict() for j in self.jobs.values()]}
        if op == "kill":
            with self.lock:
                job_id = self.job(request["job_id"]).job_id
            self.kill_jobs({job_id}, "killed")
            with self.lock:
                return {"ok": True, "job": self.jobs[job_id].as_dict()}
        if op == "set_deadline":
            with self.lock:
                self.deadline = float(request["deadline"])
                self.lock.notify_all()
            return {"ok": True, "deadline": self.deadline}
        if op == "shutdown":
            self.stop("killed")
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def stop(self, reason: str) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        log(f"stopping ({reason})")
        self.kill_jobs(None, reason)

    def watchdog(self, server: socketserver.BaseServer) -> None:
        while not self.stopping.is_set():
            if time.time() >= self.deadline:
                self.stop("timeout")
                break
            with self.lock:  # set_deadline notifies, so a moved deadline is seen at once
                self.lock.wait(min(1.0, max(0.0, self.deadline - time.time())))
        server.shutdown()


class Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        for line in self.rfile:
            request: Any = None
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
                response = self.server.supervisor.handle(request)
            except (ValueError, KeyError, TypeError, OSError) as exc:
                response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                self.wfile.write(json.dumps(response).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                return
            if response.get("ok") and request.get("op") == "shutdown":
                threading.Thread(target=self.server.shutdown, daemon=True).start()


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    request_queue_size = 512  # bursts of concurrent tool calls must queue, not fail

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        # A fork bomb can use up the sandbox's process limit, and threads count against it;
        # the kill that ends the bomb must still be served, so serve it inline then.
        try:
            super().process_request(request, client_address)
        except RuntimeError:
            self.process_request_thread(request, client_address)
    daemon_threads = True
    supervisor: Supervisor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    args = parser.parse_args()

    # A container gets its token in the environment (there is no stdin to write to); drop it
    # before any job can inherit it. Our memory and /proc environ become unreadable below.
    token = os.environ.pop("A2RL_SUPERVISOR_TOKEN", "") or sys.stdin.readline().strip()
    if not token:
        sys.exit("supervisor: no token on stdin")
    # Forking with threads is safe here: the shim only makes system calls (see job_shim).
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Not dumpable: a job running as the same user cannot read the token from our memory.
    prctl(PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    supervisor = Supervisor(token, args.workspace, args.deadline)
    sock_dir, sock_name = os.path.split(args.socket)
    # Binding a relative name avoids the 108-byte limit on unix socket paths.
    os.chdir(sock_dir)
    if os.path.exists(sock_name):
        os.unlink(sock_name)
    server = Server(sock_name, Handler, bind_and_activate=False)
    server.supervisor = supervisor
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    old_umask = os.umask(0o077)
    server.server_bind()
    os.umask(old_umask)
    server.server_activate()
    os.chdir(args.workspace)

    threading.Thread(target=supervisor.reap_forever, daemon=True).start()
    threading.Thread(target=supervisor.watchdog, args=(server,), daemon=True).start()
    log(f"listening on {args.socket}, pid {os.getpid()}")
    try:
        server.serve_forever(poll_interval=0.1)  # how soon a shutdown takes effect
    finally:
        supervisor.stop("killed")
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(sock_dir, sock_name))
        log("exited")


if __name__ == "__main__":
    main()
