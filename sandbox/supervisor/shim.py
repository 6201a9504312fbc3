"""How a job's processes are made: forked from one thread (`Forker`), each under its own shim
(`job_shim`), bash dropped to the sandbox user (`drop_privileges`).

Only system calls run in a forked child here: the supervisor has other threads, whose locks
(logging, stderr) may be held in the child's copy of memory.
"""

from __future__ import annotations

import contextlib
import os
import queue
import resource
import signal
import threading
import time
from typing import Any

from .job import Limits
from .system import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_NAME,
    PR_SET_NO_NEW_PRIVS,
    PRCTL,
    log,
    set_oom_score_adj,
)

JOB_VAR = "A2RL_JOB"  # the job id, for the job's own use
FORK_RETRIES = 100  # a shim's fork of bash that meets EAGAIN is retried, 10 ms apart
JOB_OOM_SCORE_ADJ = 1000  # every job is the OOM killer's first choice (see drop_privileges)


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
    cannot signal the shim. It reports bash's pid and exit code on the `report` pipe (with the
    CPU time and peak memory of what it reaped so far) and lives on, reaping, while leftovers
    of the job run. Since every process of the tree is reaped inside it, the kernel's account
    of the shim's children, read by the supervisor when it reaps the shim, is the whole job's.
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
                # What the kernel accounted to the processes reaped so far in this tree (bash
                # and whatever it waited for): CPU microseconds, the largest one's peak RSS
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_us = int((used.ru_utime + used.ru_stime) * 1e6)
                os.write(report, b"exit %d %d %d\n" % (os.waitstatus_to_exitcode(status),
                                                        cpu_us, used.ru_maxrss))
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
