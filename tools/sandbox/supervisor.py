"""Per-run job supervisor: a standalone script, standard library only.

It runs inside bubblewrap or a container (or, unisolated, as a plain detached process) where only
this file is visible, so it must not import anything from a2rl. It listens on a unix socket and
speaks JSON lines: one request object per line, one response object per line, several
connections at once.

Every request carries the token the launcher wrote on stdin: {"token": ..., "op": ..., ...}.
Responses are {"ok": true, ...} or {"ok": false, "error": "..."}. Operations:

    ping                                   -> {"ok", "pid", "started", "deadline"}
    spawn {job_id, command, env}           -> {"ok", "job"}
    get {job_id}                           -> {"ok", "job"}
    wait {job_id, timeout}                 -> {"ok", "job"}  (returns early when the job ends)
    wait_any {job_ids, timeout}            -> {"ok", "jobs"} (early once one of them ends)
    list                                   -> {"ok", "jobs"}
    kill {job_id, cause?, evidence?}       -> {"ok", "job"}
    set_deadline {deadline}                -> {"ok", "deadline"}
    shutdown {cause?, evidence?}           -> {"ok"} once every job is killed; then it exits

Out of the jobs' reach. In a sandbox the supervisor is the pid namespace's init (pid 1) and
installs no signal handler, so the kernel drops every signal a job sends it, SIGKILL and SIGSTOP
included; it is not dumpable (no ptrace, no /proc/1/{mem,environ,fd} for a job). Its listening
socket is bound by the launcher outside the sandbox and handed over as an inherited descriptor
(`--listen-fd`): no path to it exists inside. When it starts as root, every job drops to the
sandbox user (`--uid/--gid`: no groups, no capabilities, no_new_privs) before running anything.

A job is `bash -c command` in the workspace, stdin /dev/null, stdout and stderr a pipe that the
supervisor copies into the job's log `<job_id>.log` in a folder only it can write (`--logs-fd`,
a directory descriptor, or `--logs-dir`), shown read-only to jobs at `--logs-view`, and linked
from workspace/logs/<job_id>.log by the job itself. Each job runs under its own
forked *shim* (which keeps the supervisor's user: a job cannot signal it): a session leader and
child subreaper, so whatever the command double-forks or setsids stays in the shim's tree, and
`kill` finds it there. The job ends when bash exits; leftovers it started in the background keep
running, under the shim, until the job is killed or the sandbox stops.

Limits the supervisor enforces itself (the kernel's cgroup or container limits stay the hard
wall): a log over `--log-limit` bytes ends the job ("log flood"); a job with `--pids-limit`
processes is ended; a workspace over `--disk-limit` bytes ends the job writing it; files are
capped by RLIMIT_FSIZE (`--fsize-limit`). The reason is kept in the job's `reason` and appended
to its log, so the agent reads it with the output.

Exit codes: a job that dies of signal N has exit_code -N (the convention of Python's
subprocess); bash itself reports 128+N when the command was not its last simple command, and
that code is kept as is. A job the supervisor killed has state `killed` (or `timeout` at the
deadline) and exit_code -9. `pid` is bash's pid as seen inside the sandbox's pid namespace.

Why a job ended is its `cause`, with one line of `evidence`, decided here where it is known: a
kill names who asked for it (the server passes `cause` with `kill`: "job_kill", "budget",
"interrupted", ...), the deadline is "deadline", a limit is "limit", and an exit by SIGKILL is
"out_of_memory" only when the memory cgroup's `oom_kill` count rose during the job; any other
death by a signal is "signal" (sent from inside the job), else "exited".
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import hmac
import json
import os
import queue
import re
import resource
import select
import signal
import socket
import socketserver
import sys
import termios
import threading
import time
import warnings
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
JOB_VAR = "A2RL_JOB"  # the job id, for the job's own use
KILL_ROUNDS = 200
JOB_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
WATCH_EVERY = 0.5  # seconds between two looks at the jobs' processes
DISK_EVERY = 2.0  # seconds between two measures of the workspace
SETTLE_TIMEOUT = 10.0  # the longest a new job waits for an ended job's processes to be reaped
FORK_RETRIES = 100  # a shim's fork of bash that meets EAGAIN is retried, 10 ms apart
JOB_OOM_SCORE_ADJ = 1000  # every job is the OOM killer's first choice (see drop_privileges)
STARTED = time.time()  # which supervisor answers: a restarted one has another
CAUSE = re.compile(r"^[a-z_]{1,32}$")  # a cause the server names (store.status.JobEndCause)
EVIDENCE_CHARS = 300


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} supervisor: {message}", file=sys.stderr, flush=True)


PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved once: forked shims call it too


def prctl(option: int, value: int) -> None:
    if PRCTL(option, value, 0, 0, 0) != 0:
        log(f"prctl({option}) failed: errno {ctypes.get_errno()}")


def human(n: int) -> str:
    for unit, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n} bytes"


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


def written_bytes(pid: int) -> int:
    """Bytes a process wrote (its `wchar`); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def still_there(pid: int, start: int) -> bool:
    """Whether the process `pid` started at `start` still exists, a zombie included (its
    /proc entry goes only when it is reaped, after its process count is given back)."""
    proc = read_proc(pid)
    return proc is not None and proc.start == start


def list_procs() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None and proc.state not in ("Z", "X"):
                procs[proc.pid] = proc
    return procs


class Limits:
    def __init__(self, args: argparse.Namespace) -> None:
        self.uid: int = args.uid
        self.gid: int = args.gid
        self.pids: int = args.pids_limit
        self.fsize: int = args.fsize_limit
        self.log_bytes: int = args.log_limit
        self.disk: int = args.disk_limit
        self.memory: str = args.memory_label
        self.readonly: set[str] = set(args.readonly or [])
        self.logs_view: str = args.logs_view
        self.jobs_cgroup_fds: list[int] = list(args.jobs_cgroup_fd or [])


class Job:
    def __init__(self, job_id: str, command: str, shim: int, log_fd: int, oom0: int):
        self.job_id, self.command = job_id, command
        self.log_path = f"logs/{job_id}.log"
        self.shim = shim  # the job's own subreaper; every descendant stays in its tree
        self.shim_reaped = False  # once reaped, its pid may belong to a stranger
        self.pid: int | None = None  # bash, the command itself
        self.state = "running"
        self.exit_code: int | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.stop_reason: str | None = None  # "killed" or "timeout" once the supervisor kills it
        self.reason = ""  # why a limit ended it, for the agent
        self.cause = ""  # why it ended (see the module's doc), set once
        self.evidence = ""  # one line that shows the cause
        self.log_fd = log_fd
        self.log_bytes = 0
        self.log_lock = threading.Lock()  # held while a chunk moves from the pipe to the log
        self.pump_done = threading.Event()
        self.out_read = -1  # the read end of its output pipe, owned by the pump
        self.oom0 = oom0  # the memory cgroup's OOM kill count when the job started
        self.written = 0  # bytes its live processes had written at the last disk check

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
            "reason": self.reason,
            "cause": self.cause,
            "evidence": self.evidence,
        }

    def blame(self, cause: str, evidence: str) -> None:
        """Keep the first cause given: the first kill of a job is the one that ended it."""
        if not self.cause:
            self.cause, self.evidence = cause, evidence[:EVIDENCE_CHARS]


def set_oom_score_adj(value: int) -> bool:
    """Write this process's `oom_score_adj`; False where the kernel refuses (lowering it
    needs CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False


def drop_privileges(limits: Limits) -> None:
    """In a job's process, before exec: the sandbox user, no groups, nothing to regain.

    Its OOM score goes up first (`JOB_OOM_SCORE_ADJ`; raising one's own is always allowed): a
    job, never the supervisor or a shim, is what the out-of-memory killer picks. Written while
    we hold CAP_SYS_RESOURCE (where the host gives it), it is also the floor the kernel lets
    the job lower its score to (`oom_score_adj_min`), so the job cannot undo it."""
    set_oom_score_adj(JOB_OOM_SCORE_ADJ)
    if limits.fsize > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize, limits.fsize))
    if os.getuid() == 0 and limits.uid >= 0:
        os.setgroups([])
        os.setresgid(limits.gid, limits.gid, limits.gid)
        os.setresuid(limits.uid, limits.uid, limits.uid)  # clears every capability set
        if os.getuid() == 0 or os.geteuid() == 0:
            raise OSError("could not leave root")
    PRCTL(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def show_log(job_id: str, logs_view: str) -> None:
    """As the job's user: link workspace/logs/<job>.log to the read-only log, so that
    `tail logs/<job>.log` works in commands. The link is the agent's to break; the server
    never reads it (it reads the supervisor's folder)."""
    if not logs_view:
        return
    with contextlib.suppress(OSError):
        os.makedirs("logs", exist_ok=True)
        os.symlink(f"{logs_view}/{job_id}.log", f"logs/{job_id}.log")


def job_shim(report: int, out_fd: int, bash: str, argv: list[str], env: dict[str, str],
             limits: Limits) -> None:
    """Body of the forked per-job process; never returns.

    It becomes a session leader and a child subreaper, then forks bash, which alone drops to the
    sandbox user: a descendant that double-forks or calls setsid is reparented to this process,
    not to the supervisor, so the job's whole tree is always the tree under it, and the job
    cannot signal the shim. It reports bash's pid and exit code on the `report` pipe and lives
    on, reaping, while leftovers of the job run.
    """
    code = 0
    try:
        # Only system calls here: the parent has other threads, whose locks (logging, stderr)
        # may be held in this copy of memory.
        # cgroup v2: into the jobs' cgroup first (its memory and process limits; the
        # supervisor is not there, so a job's OOM never kills it), so that bash and all it
        # starts are born inside (on v1 the shim was born there: see Forker).
        for fd in limits.jobs_cgroup_fds:
            with contextlib.suppress(OSError):
                os.write(fd, b"0")
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        # The parent's other descriptors (the listening socket, other jobs' pipes, whose
        # readers would never see EOF, the logs folder) must not live on here.
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) not in (report, out_fd):
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.setsid()
        PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        PRCTL(PR_SET_NAME, b"a2rl-job", 0, 0, 0)
        pid = fork_retrying(out_fd)
        if pid == 0:
            try:
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out_fd, 1)
                os.dup2(out_fd, 2)
                for fd in (null, out_fd, report):
                    if fd > 2:
                        os.close(fd)
                for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, signal.SIG_DFL)
                drop_privileges(limits)
                show_log(env[JOB_VAR], limits.logs_view)
                os.execve(bash, argv, env)
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.write(2, f"a2rl: the job could not start: {exc}\n".encode())
            os._exit(127)
        os.close(out_fd)
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


def fork_retrying(out_fd: int) -> int:
    """os.fork, retried while the process limit refuses it (EAGAIN: other jobs' processes
    fill the cgroup for a moment); after that the job's log says why it could not start."""
    for _ in range(FORK_RETRIES):
        try:
            return os.fork()
        except BlockingIOError:
            time.sleep(0.01)
    try:
        return os.fork()
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(out_fd, f"a2rl: the job could not start: {exc} (the run's process "
                             "limit is reached: end some jobs)\n".encode())
        raise


class Forker:
    """Forks every shim from one thread, which joins the jobs' cgroup first where a thread may
    (cgroup v1, `--jobs-cgroup-thread-fd`): a child is born in its parent thread's cgroups, so
    jobs start inside their limits without a migration, and the supervisor's process (its
    memory, its other threads) stays out of them."""

    def __init__(self, cgroup_fds: list[int]) -> None:
        self._requests: queue.SimpleQueue[tuple[Any, list[Any], threading.Event]] = (
            queue.SimpleQueue())
        threading.Thread(target=self._run, args=(cgroup_fds,), name="a2rl-forker",
                         daemon=True).start()

    def _run(self, cgroup_fds: list[int]) -> None:
        for fd in cgroup_fds:
            try:
                os.write(fd, b"0")  # this thread, not the process
            except OSError as exc:
                log(f"the forker could not join the jobs' cgroup: {exc}")
            os.close(fd)
        while True:
            body, box, done = self._requests.get()
            try:
                pid = os.fork()
            except OSError as exc:
                box.append(exc)
            else:
                if pid == 0:
                    body()  # never returns (job_shim ends with os._exit)
                    os._exit(127)
                box.append(pid)
            done.set()

    def fork(self, body: Any) -> int:
        """The pid of a child that runs `body` (which must end with os._exit)."""
        box: list[Any] = []
        done = threading.Event()
        self._requests.put((body, box, done))
        done.wait()
        if isinstance(box[0], OSError):
            raise box[0]
        return int(box[0])


class Supervisor:
    def __init__(self, token: str, workspace: str, deadline: float, logs_fd: int,
                 limits: Limits, oom_fd: int | None, forker: Forker | None = None):
        self.token = token
        self.workspace = workspace
        self.deadline = deadline
        self.logs_fd = logs_fd
        self.limits = limits
        self.oom_fd = oom_fd
        self.jobs: dict[str, Job] = {}
        self.by_shim: dict[int, Job] = {}
        self.lock = threading.Condition()
        self.children = threading.Event()  # set once there is something to reap
        self.stopping = threading.Event()
        self.bash = "/bin/bash" if os.path.exists("/bin/bash") else "/usr/bin/bash"
        self.forker = forker or Forker([])
        self.last_disk = 0.0
        self.last_used = 0  # the workspace's bytes at the last disk check
        self.watched: set[str] = set()  # the jobs running at the last disk check
        # pid -> start time of every process a kill signalled and that may not be reaped yet:
        # until it is, it still counts against the jobs' process limit (see settle)
        self.dying: dict[int, int] = {}

    # -- processes ---------------------------------------------------------------------------

    def oom_kills(self) -> int:
        """The memory cgroup's OOM kill count (v1 memory.oom_control, v2 memory.events): the
        kernel's own word that its out-of-memory killer ended a process there."""
        if self.oom_fd is None:
            return 0
        try:
            data = os.pread(self.oom_fd, 4096, 0)
        except OSError:
            return 0
        for line in data.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill":
                return int(value)
        return 0

    def spawn(self, job_id: str, command: str, env: dict[str, str]) -> Job:
        if not JOB_ID.match(job_id):
            raise ValueError(f"bad job id {job_id!r}")
        if self.stopping.is_set():
            raise ValueError("the sandbox is stopping")
        child_env = dict(os.environ)
        child_env.update(env)
        child_env[JOB_VAR] = job_id
        argv = ["bash", "-c", command]
        self.settle()
        with self.lock:  # held until the job is in the table, so the reaper can match it
            if job_id in self.jobs:
                raise ValueError(f"job {job_id!r} already exists")
            log_fd = os.open(f"{job_id}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
                             | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=self.logs_fd)
            out_read, out_write = os.pipe()
            read_end, write_end = os.pipe()
            try:
                shim = self.forker.fork(lambda: job_shim(
                    write_end, out_write, self.bash, argv, child_env, self.limits))
            except OSError:  # no process left to fork (the limit): nothing must leak
                for fd in (log_fd, out_read, read_end):
                    os.close(fd)
                raise
            finally:
                os.close(write_end)
                os.close(out_write)
            job = Job(job_id, command, shim, log_fd, self.oom_kills())
            job.out_read = out_read
            self.jobs[job_id] = job
            self.by_shim[shim] = job
        self.children.set()
        threading.Thread(target=self.pump, args=(job, out_read), daemon=True).start()
        reports = os.fdopen(read_end, "rb")
        first = reports.readline().split()
        with self.lock:
            if first[:1] == [b"pid"]:
                job.pid = int(first[1])
            threading.Thread(target=self.follow, args=(job, reports), daemon=True).start()
            return job

    def pump(self, job: Job, out_read: int) -> None:
        """Copy the job's output into its log, up to the log limit; then end the job."""
        flooded = False
        try:
            while True:
                ready, _, _ = select.select([out_read], [], [], 0.2)
                if not ready:
                    continue
                with job.log_lock:
                    data = os.read(out_read, 1 << 16)
                    if not data:
                        break
                    if flooded:
                        continue
                    room = self.limits.log_bytes - job.log_bytes
                    if self.limits.log_bytes > 0 and len(data) > room:
                        data = data[: max(room, 0)]
                        flooded = True
                    if job.log_fd >= 0:
                        with contextlib.suppress(OSError):
                            os.write(job.log_fd, data)
                    job.log_bytes += len(data)
                if flooded:
                    reason = (f"killed: log flood: the job wrote more than "
                              f"{human(self.limits.log_bytes)} of output")
                    threading.Thread(target=self.end_for, args=(job, reason),
                                     daemon=True).start()
        finally:
            with job.log_lock:
                job.pump_done.set()
                os.close(out_read)
            self.release_log(job)

    def note(self, job: Job, reason: str) -> None:
        """Keep why a limit ended the job and append it to the log, where the agent reads it."""
        if job.reason:
            return
        job.reason = reason
        with job.log_lock, contextlib.suppress(OSError):
            if job.log_fd >= 0:
                os.write(job.log_fd, f"\n[a2rl] {reason}\n".encode())
        log(f"job {job.job_id}: {reason}")

    def end_for(self, job: Job, reason: str) -> None:
        """End one job because it hit a limit."""
        if job.state != "running":
            return
        self.note(job, reason)
        self.kill_jobs({job.job_id}, "killed", "limit", reason)

    def follow(self, job: Job, reports: Any) -> None:
        """Read the shim's report of bash's exit; EOF without one means the shim was killed."""
        code: int | None = None
        with reports:
            for line in reports:
                parts = line.split()
                if parts[:1] == [b"exit"]:
                    code = int(parts[1])
                    break
        # What bash wrote before it exited is in the pipe: wait until the pump has moved it
        # (leftovers in the background may keep the pipe open, so not for its end).
        end = time.monotonic() + 2.0
        while time.monotonic() < end and not self.pipe_empty(job):
            time.sleep(0.005)
        if job.stop_reason is None and code is not None:
            self.explain_exit(job, code)
        elif job.stop_reason is None:  # the shim died without a report: nobody we know killed it
            job.blame("signal", "the job's shim ended without reporting bash's exit")
        with self.lock:
            job.ended_at = time.time()
            job.state = job.stop_reason or "exited"
            if code is None:  # killed before bash reported, or bash could not start at all
                code = -signal.SIGKILL if job.stop_reason else (None if job.pid else 127)
            job.exit_code = code
            self.lock.notify_all()
        self.release_log(job)

    @staticmethod
    def release_log(job: Job) -> None:
        """Close the log once the job has ended and its pipe is drained."""
        with job.log_lock:
            if job.log_fd >= 0 and job.pump_done.is_set() and job.state != "running":
                os.close(job.log_fd)
                job.log_fd = -1

    @staticmethod
    def pipe_empty(job: Job) -> bool:
        """Whether everything written to the job's pipe so far is in its log: the pump holds
        log_lock from each read to its write, so an empty pipe under the lock means so."""
        with job.log_lock:
            if job.pump_done.is_set():
                return True
            buf = bytearray(4)
            fcntl.ioctl(job.out_read, termios.FIONREAD, buf)
            return int.from_bytes(buf, sys.byteorder) == 0

    def explain_exit(self, job: Job, code: int) -> None:
        """The cause of an exit nobody here asked for, from the kernel's counters and the
        exit code (bash reports a command killed by signal N as 128+N)."""
        ooms = self.oom_kills()
        counted = f"the memory cgroup's oom_kill count rose from {job.oom0} to {ooms}"
        signum = -code if code < 0 else code - 128 if 128 < code <= 128 + 64 else 0
        if signum == signal.SIGKILL and ooms > job.oom0:
            reason = (f"killed: memory limit {self.limits.memory} reached (the kernel's "
                      "out-of-memory killer ended a process of this job)")
            self.note(job, reason)
            job.blame("out_of_memory", f"exit code {code} (SIGKILL); {counted}")
        elif signum == signal.SIGXFSZ and self.limits.fsize > 0:
            reason = (f"killed: file size limit {human(self.limits.fsize)} reached "
                      "(no file may be larger)")
            self.note(job, reason)
            job.blame("limit", reason)
        elif signum:
            name = signal.Signals(signum).name if signum in signal.valid_signals() else "?"
            job.blame("signal", f"exit code {code}: signal {signum} ({name}), not sent by "
                                "a2rl" + (f"; {counted}" if ooms > job.oom0 else "; no OOM kill "
                                          "was counted" if self.oom_fd is not None else ""))
        else:
            job.blame("exited", f"exit code {code}" + (
                f"; {counted} meanwhile (a process of the run was killed)"
                if ooms > job.oom0 else ""))

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
                # Otherwise an orphan whose shim was gone, adopted by this init or subreaper.

    def tree(self, procs: dict[int, Proc], job_ids: set[str] | None) -> dict[str, set[int]]:
        """Live processes of the given jobs (all when job_ids is None), shims excluded."""
        with self.lock:
            roots = {
                j.shim: j.job_id
                for j in self.jobs.values()
                if not j.shim_reaped and (job_ids is None or j.job_id in job_ids)
            }
        children: dict[int, list[int]] = {}
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        found: dict[str, set[int]] = {}
        for shim, job_id in roots.items():
            members = found.setdefault(job_id, set())
            stack = [shim]
            # A process of the shim's session or group that left its tree (it cannot, short
            # of ptrace tricks) is found too.
            members.update(p.pid for p in procs.values()
                           if p.pid != shim and (p.sid == shim or p.pgrp == shim))
            stack += list(members)
            while stack:
                for child in children.get(stack.pop(), ()):
                    if child not in members and child != shim:
                        members.add(child)
                        stack.append(child)
        return found

    def settle(self, timeout: float = SETTLE_TIMEOUT) -> None:
        """Wait until every process a kill signalled is reaped, killing any still running.

        A killed process counts against the jobs' process limit (and holds its memory) until
        it is reaped, which for a fork bomb's hundred processes, reparented to us, takes a
        moment on a loaded machine: a job started meanwhile could not fork its command. The
        wait is bounded: a process stuck in the kernel does not stop the run."""
        end = time.monotonic() + timeout
        while True:
            with self.lock:
                pending = dict(self.dying)
            left = {pid for pid, start in pending.items() if still_there(pid, start)}
            with self.lock:
                for pid in pending.keys() - left:
                    self.dying.pop(pid, None)
            if not left:
                return
            if time.monotonic() > end:
                log(f"processes of ended jobs not reaped after {timeout:.0f} s: "
                    f"{sorted(left)[:20]}")
                return
            for pid in left:  # a zombie ignores it; a process that escaped a round does not
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def members(self, procs: dict[int, Proc], job_ids: set[str] | None) -> set[int]:
        return set().union(*self.tree(procs, job_ids).values())

    def kill_jobs(self, job_ids: set[str] | None, reason: str, cause: str = "job_kill",
                  evidence: str = "") -> None:
        """Stop every process of the given jobs, then SIGKILL them until none is left; a job
        still running is blamed on `cause` (`evidence`: who asked, and why)."""
        with self.lock:
            for job in self.jobs.values():
                if (job_ids is None or job.job_id in job_ids) and job.state == "running":
                    job.stop_reason = job.stop_reason or reason
                    job.blame(cause, evidence or f"killed by the supervisor ({cause})")
        me = os.getpid()
        # SIGSTOP first: a stopped process forks no more, so a fork bomb cannot outrun the
        # sweep; then SIGKILL the whole, stopped set at once.
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for _ in range(KILL_ROUNDS):
                procs = list_procs()
                found = self.members(procs, job_ids)
                if job_ids is None:  # shutting down: orphans this process adopted go too
                    found.update(p.pid for p in procs.values() if p.ppid == me)
                    with self.lock:
                        found -= {j.shim for j in self.jobs.values() if not j.shim_reaped}
                if signum == signal.SIGSTOP:
                    found = {pid for pid in found if procs[pid].state not in ("T", "t")}
                if not found:
                    break
                if signum == signal.SIGKILL:
                    with self.lock:
                        self.dying.update((pid, procs[pid].start) for pid in found)
                # The shims stay alive meanwhile: whatever the killed processes fork lands
                # under them and is found by the next round.
                for pid in found:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signum)
                time.sleep(0.005)
        with self.lock:
            for job in self.jobs.values():
                if (job_ids is None or job.job_id in job_ids) and not job.shim_reaped:
                    shim = read_proc(job.shim)
                    if shim is not None:
                        self.dying[job.shim] = shim.start
                    with contextlib.suppress(OSError):
                        os.kill(job.shim, signal.SIGKILL)
        # Wait briefly for the shims' reports so that the answer is final.
        end = time.monotonic() + 2.0
        with self.lock:
            while time.monotonic() < end and any(
                (job_ids is None or j.job_id in job_ids) and j.state == "running"
                for j in self.jobs.values()
            ):
                self.lock.wait(0.05)

    # -- limits --------------------------------------------------------------------------------

    def watch_limits(self) -> None:
        """End a job that reaches the process limit, or writes past the disk limit."""
        while not self.stopping.is_set():
            time.sleep(WATCH_EVERY)
            try:
                self.check_limits()
            except Exception as exc:  # a limit check must never end the supervisor
                log(f"limit check failed: {exc!r}")

    def check_limits(self) -> None:
        with self.lock:
            if not any(j.state == "running" or not j.shim_reaped for j in self.jobs.values()):
                return
        procs = list_procs()
        tree = self.tree(procs, None)
        if self.limits.pids > 0:
            for job_id, members in tree.items():
                if len(members) + 1 >= self.limits.pids:
                    self.end_for(self.jobs[job_id], f"killed: process limit "
                                 f"{self.limits.pids} reached (too many processes or threads)")
        if self.limits.disk <= 0 or time.monotonic() - self.last_disk < DISK_EVERY:
            return
        self.last_disk = time.monotonic()
        written = {job_id: sum(written_bytes(p) for p in members)
                   for job_id, members in tree.items()}
        used = self.workspace_bytes()
        grown = used - self.last_used
        with self.lock:
            running = sorted((j for j in self.jobs.values() if j.state == "running"),
                             key=lambda j: -j.started_at)
        if used > self.limits.disk and grown > 0:
            # Only growth is blamed: a job started while the workspace is over the limit to
            # delete files (`rm`) must be left to finish, or the agent could never make room.
            # The writer is the job whose processes wrote a fair share of the growth since the
            # last look (a job that only printed a line did not fill the disk).
            share = min(grown // 2, 1 << 20)
            deltas = {j: w - self.jobs[j].written for j, w in written.items()}
            writers = [j for j, d in sorted(deltas.items(), key=lambda kv: -kv[1])
                       if d >= share]
            # Blocks taken without a write (fallocate, a sparse file filled by mmap) leave no
            # trace in /proc/<pid>/io: then the newest job that was already running at the last
            # look, since only such a job can have taken them.
            writers += [j.job_id for j in running if j.job_id in self.watched]
            for job_id in writers[:1]:
                self.end_for(self.jobs[job_id], f"killed: workspace disk limit "
                             f"{human(self.limits.disk)} reached ({used >> 20} MiB used); "
                             "delete files to make room")
        self.last_used = used
        self.watched = {j.job_id for j in running}
        for job_id, w in written.items():
            self.jobs[job_id].written = w

    def workspace_bytes(self, cap: int = 200_000) -> int:
        """Bytes the writable workspace takes on disk (blocks: a sparse file counts as used)."""
        total, seen = 0, 0
        stack = [self.workspace]
        top = True
        while stack and seen < cap:
            folder = stack.pop()
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        seen += 1
                        if top and entry.name in self.limits.readonly:
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
            except OSError:
                pass
            top = False
        return total

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
            return {"ok": True, "pid": os.getpid(), "started": STARTED,
                    "deadline": self.deadline}
        if op == "spawn":
            env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
            job = self.spawn(str(request["job_id"]), str(request["command"]), env)
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
        if op == "wait_any":
            # The server's watcher: one request that returns when any of these jobs ends, so
            # that a job's end is recorded when it happens, not when the agent polls.
            timeout = max(0.0, float(request.get("timeout", 0)))
            wanted = [str(j) for j in request.get("job_ids") or []]
            with self.lock:
                jobs = [self.jobs[j] for j in wanted if j in self.jobs]
                self.lock.wait_for(lambda: any(j.state != "running" for j in jobs)
                                   or self.stopping.is_set(), timeout)
                return {"ok": True, "jobs": [j.as_dict() for j in jobs]}
        if op == "list":
            with self.lock:
                return {"ok": True, "jobs": [j.as_dict() for j in self.jobs.values()]}
        if op == "kill":
            with self.lock:
                job_id = self.job(request["job_id"]).job_id
            self.kill_jobs({job_id}, "killed", *self.cause_of(request, "job_kill"))
            with self.lock:
                return {"ok": True, "job": self.jobs[job_id].as_dict()}
        if op == "set_deadline":
            with self.lock:
                self.deadline = float(request["deadline"])
                self.lock.notify_all()
            return {"ok": True, "deadline": self.deadline}
        if op == "shutdown":
            self.stop("killed", *self.cause_of(request, "run_finished"))
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    @staticmethod
    def cause_of(request: dict[str, Any], default: str) -> tuple[str, str]:
        """The cause and evidence a request names (the server's words), else `default`."""
        cause = str(request.get("cause") or default)
        if not CAUSE.match(cause):
            raise ValueError(f"bad cause {cause!r}")
        evidence = " ".join(str(request.get("evidence") or "").split())
        return cause, evidence or f"stopped at the server's request ({cause})"

    def stop(self, reason: str, cause: str = "run_finished",
             evidence: str = "the sandbox was stopped") -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        log(f"stopping ({reason})")
        self.kill_jobs(None, reason, cause, evidence)
        with self.lock:
            self.lock.notify_all()  # wake wait_any even where no job ran: nothing more will

    def watchdog(self, server: socketserver.BaseServer) -> None:
        while not self.stopping.is_set():
            if time.time() >= self.deadline:
                at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.deadline))
                self.stop("timeout", "deadline", f"the run's deadline ({at}) passed: the "
                          "supervisor stopped every job")
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen-fd", type=int, help="an inherited, listening unix socket")
    where.add_argument("--socket", help="a path to bind (containers: a supervisor-only mount)")
    parser.add_argument("--socket-owner", default="", help="uid:gid to give the bound socket")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    logs = parser.add_mutually_exclusive_group(required=True)
    logs.add_argument("--logs-fd", type=int, help="an inherited descriptor of the logs folder")
    logs.add_argument("--logs-dir", help="the logs folder (jobs cannot write it)")
    parser.add_argument("--logs-view", default="", help="where jobs see the logs folder")
    parser.add_argument("--uid", type=int, default=-1, help="the jobs' user when run as root")
    parser.add_argument("--gid", type=int, default=-1)
    parser.add_argument("--pids-limit", type=int, default=0)
    parser.add_argument("--fsize-limit", type=int, default=0)
    parser.add_argument("--log-limit", type=int, default=0)
    parser.add_argument("--disk-limit", type=int, default=0)
    parser.add_argument("--memory-label", default="")
    oom = parser.add_mutually_exclusive_group()
    oom.add_argument("--oom-fd", type=int, help="the memory cgroup's OOM counter file, open")
    oom.add_argument("--oom-file", help="the memory cgroup's OOM counter file")
    parser.add_argument("--readonly", action="append", help="workspace inputs: not counted")
    jobs = parser.add_mutually_exclusive_group()
    jobs.add_argument("--jobs-cgroup-fd", type=int, action="append",
                      help="the jobs' cgroup's cgroup.procs, open: each shim enters it")
    jobs.add_argument("--jobs-cgroup-thread-fd", type=int, action="append",
                      help="the jobs' cgroup's tasks file (v1), open: the forker thread enters")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # A container gets its token in the environment (there is no stdin to write to); drop it
    # before any job can inherit it. Our memory and /proc environ become unreadable below.
    token = os.environ.pop("A2RL_SUPERVISOR_TOKEN", "") or sys.stdin.readline().strip()
    if not token:
        sys.exit("supervisor: no token on stdin")
    # Forking with threads is safe here: the shim only makes system calls (see job_shim).
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Not dumpable: no job can ptrace us or read our memory, environment or descriptors.
    prctl(PR_SET_DUMPABLE, 0)
    # Where the jobs share our memory cgroup (a container), a hog of many small processes would
    # make us, the largest, the OOM killer's pick, and with us every job of the run. Exempt
    # ourselves where we hold CAP_SYS_RESOURCE; jobs raise theirs (drop_privileges).
    if os.getuid() == 0 and not set_oom_score_adj(-1000):
        log("no CAP_SYS_RESOURCE: the supervisor is not exempt from the OOM killer; jobs are "
            f"its first choice (oom_score_adj {JOB_OOM_SCORE_ADJ})")
    for fd in (args.jobs_cgroup_fd or []) + (args.jobs_cgroup_thread_fd or []):
        os.set_inheritable(fd, False)  # the shims use them after fork; no exec keeps them
    if os.getpid() == 1:
        # As a pid namespace's init with no handler installed, the kernel drops every signal
        # sent from inside the namespace, SIGKILL and SIGSTOP included: no job can end or
        # freeze us. Python's own SIGINT handler would be a way in: remove it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    logs_fd = args.logs_fd
    if logs_fd is None:
        logs_fd = os.open(args.logs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.set_inheritable(logs_fd, False)
    oom_fd = args.oom_fd
    if oom_fd is None and args.oom_file:
        with contextlib.suppress(OSError):
            oom_fd = os.open(args.oom_file, os.O_RDONLY | os.O_CLOEXEC)
    if oom_fd is not None:
        os.set_inheritable(oom_fd, False)
    supervisor = Supervisor(token, args.workspace, args.deadline, logs_fd, Limits(args),
                            oom_fd, Forker(args.jobs_cgroup_thread_fd or []))
    if args.listen_fd is not None:
        server = Server("", Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=args.listen_fd)
        server.socket.set_inheritable(False)
        where = f"descriptor {args.listen_fd}"
    else:
        sock_dir, sock_name = os.path.split(args.socket)
        os.chdir(sock_dir)  # binding a relative name avoids the 108-byte limit
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock_name)
        server = Server(sock_name, Handler, bind_and_activate=False)
        old_umask = os.umask(0o077)
        server.server_bind()
        os.umask(old_umask)
        if args.socket_owner:
            uid, gid = (int(x) for x in args.socket_owner.split(":"))
            os.chown(sock_name, uid, gid)
        server.server_activate()
        where = args.socket
    server.supervisor = supervisor
    os.chdir(args.workspace)

    threading.Thread(target=supervisor.reap_forever, daemon=True).start()
    threading.Thread(target=supervisor.watchdog, args=(server,), daemon=True).start()
    threading.Thread(target=supervisor.watch_limits, daemon=True).start()
    log(f"listening on {where}, pid {os.getpid()}, uid {os.getuid()}")
    try:
        server.serve_forever(poll_interval=0.1)  # how soon a shutdown takes effect
    finally:
        supervisor.stop("killed")
        if args.socket:
            with contextlib.suppress(OSError):
                os.unlink(args.socket)
        log("exited")


if __name__ == "__main__":
    main()
