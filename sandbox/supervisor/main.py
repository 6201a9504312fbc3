"""The supervisor's start: its command line, the state it drops before any job exists, and the
parts wired together (the job table, the watches, the request server)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import warnings

from .dispatch import Dispatcher, Handler, Server
from .job import Limits
from .jobs import JobTable
from .shim import JOB_OOM_SCORE_ADJ, Forker
from .system import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, log, prctl, set_oom_score_adj
from .watches import DeadlineWatch, LimitWatch


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
    table = JobTable(logs_fd, Limits(args), oom_fd, Forker(args.jobs_cgroup_thread_fd or []))
    deadline = DeadlineWatch(table, args.deadline)
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
    server.dispatcher = Dispatcher(token, table, deadline)
    os.chdir(args.workspace)

    threading.Thread(target=table.reap_forever, daemon=True).start()
    threading.Thread(target=deadline.run, args=(server,), daemon=True).start()
    threading.Thread(target=LimitWatch(table, args.workspace).run, daemon=True).start()
    log(f"listening on {where}, pid {os.getpid()}, uid {os.getuid()}")
    try:
        server.serve_forever(poll_interval=0.1)  # how soon a shutdown takes effect
    finally:
        table.stop("killed")
        if args.socket:
            with contextlib.suppress(OSError):
                os.unlink(args.socket)
        log("exited")
