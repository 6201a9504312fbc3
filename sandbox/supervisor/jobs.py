"""The jobs: starting each, copying its output into its log, and recording how it ended.

`JobTable` holds every job of the run and the lock (a condition) under which their states
change; a request waits on it for a job's end. Ending processes is the `Killer`'s (kill.py),
watching limits and the deadline is the watches' (watches.py), answering requests the
dispatcher's (dispatch.py): each calls in here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sys
import termios
import threading
import time
from typing import Any

from .job import JOB_ID, Job, Limits
from .kill import Killer
from .shim import JOB_VAR, Forker, job_shim
from .system import human, log

#: How long a job's end waits for its shim to be reaped (the whole tree's account): briefly
#: after bash exited (a shim with leftovers to reap lives on; the report's account stands),
#: longer for a killed job, whose shim is killed once its tree is gone.
SHIM_REAP_WAIT_S = 0.2
KILLED_REAP_WAIT_S = 1.0


class JobTable:
    def __init__(self, logs_fd: int, limits: Limits, oom_fd: int | None,
                 forker: Forker | None = None):
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
        self.killer = Killer(self)

    def job(self, job_id: Any) -> Job:
        """The job called `job_id` (call under the lock); ValueError for an unknown one."""
        job = self.jobs.get(str(job_id))
        if job is None:
            raise ValueError(f"no job {job_id!r}")
        return job

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
        self.killer.settle()
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
        self.killer.kill_jobs({job.job_id}, "killed", "limit", reason)

    def follow(self, job: Job, reports: Any) -> None:
        """Read the shim's report of bash's exit; EOF without one means the shim was killed."""
        code: int | None = None
        with reports:
            for line in reports:
                parts = line.split()
                if parts[:1] == [b"exit"]:
                    code = int(parts[1])
                    if len(parts) >= 4:
                        job.used(int(parts[2]), int(parts[3]))
                    break
        # What bash wrote before it exited is in the pipe: wait until the pump has moved it
        # (leftovers in the background may keep the pipe open, so not for its end).
        end = time.monotonic() + 2.0
        while time.monotonic() < end and not self.pipe_empty(job):
            time.sleep(0.005)
        # The kernel's account of the whole tree comes when the shim is reaped: at once when
        # nothing of the job lingers; a killed job's shim is killed once its tree is gone.
        end = time.monotonic() + (SHIM_REAP_WAIT_S if code is not None else KILLED_REAP_WAIT_S)
        while time.monotonic() < end and not job.shim_reaped:
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
                pid, _, used = os.wait4(-1, 0)
            except ChildProcessError:
                self.children.clear()
                self.children.wait(1.0)
                continue
            except InterruptedError:
                continue
            with self.lock:
                job = self.by_shim.pop(pid, None)
                if job is not None:  # its children's account: every process of the job
                    job.used(int((used.ru_utime + used.ru_stime) * 1e6), used.ru_maxrss)
                    job.shim_reaped = True
                # Otherwise an orphan whose shim was gone, adopted by this init or subreaper.

    def stop(self, reason: str, cause: str = "run_finished",
             evidence: str = "the sandbox was stopped") -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        log(f"stopping ({reason})")
        self.killer.kill_jobs(None, reason, cause, evidence)
        with self.lock:
            self.lock.notify_all()  # wake wait_any even where no job ran: nothing more will
