"""What a job is to the supervisor (`Job`) and what bounds every job (`Limits`)."""

from __future__ import annotations

import argparse
import re
import threading
import time
from typing import Any

JOB_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
EVIDENCE_CHARS = 300


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
        # what its processes used (CPU seconds, the largest one's peak RSS in bytes): the
        # shim's report at bash's exit, then the kernel's account when the shim is reaped
        self.cpu_s: float | None = None
        self.memory_peak_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "command": self.command,
            "state": self.state,
            "exit_code": self.exit_code,
            "pid": self.pid,
            "shim": self.shim,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "log_path": self.log_path,
            "reason": self.reason,
            "cause": self.cause,
            "evidence": self.evidence,
            "cpu_s": self.cpu_s,
            "memory_peak_bytes": self.memory_peak_bytes,
        }

    def used(self, cpu_us: int, maxrss_kib: int) -> None:
        """Keep the larger account: a later one (the shim's reap) covers an earlier one."""
        cpu_s, peak = round(cpu_us / 1e6, 3), maxrss_kib * 1024  # Linux counts ru_maxrss in KiB
        if self.cpu_s is None or cpu_s >= self.cpu_s:
            self.cpu_s = cpu_s
        self.memory_peak_bytes = max(self.memory_peak_bytes or 0, peak)

    def blame(self, cause: str, evidence: str) -> None:
        """Keep the first cause given: the first kill of a job is the one that ended it."""
        if not self.cause:
            self.cause, self.evidence = cause, evidence[:EVIDENCE_CHARS]
