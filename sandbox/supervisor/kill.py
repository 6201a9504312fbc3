"""Ending jobs: every process of a job's tree, found in /proc, stopped then killed until none
is left, and each reaped before the next job starts (`Killer`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

from .system import Proc, list_procs, log, read_proc, still_there

if TYPE_CHECKING:
    from .jobs import JobTable

KILL_ROUNDS = 200
SETTLE_TIMEOUT = 10.0  # the longest a new job waits for an ended job's processes to be reaped


class Killer:
    """Kills the jobs of `table`; remembers what it signalled until it is reaped."""

    def __init__(self, table: JobTable) -> None:
        self.table = table
        # pid -> start time of every process a kill signalled and that may not be reaped yet:
        # until it is, it still counts against the jobs' process limit (see settle)
        self.dying: dict[int, int] = {}

    def tree(self, procs: dict[int, Proc], job_ids: set[str] | None) -> dict[str, set[int]]:
        """Live processes of the given jobs (all when job_ids is None), shims excluded."""
        with self.table.lock:
            roots = {
                j.shim: j.job_id
                for j in self.table.jobs.values()
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
            with self.table.lock:
                pending = dict(self.dying)
            left = {pid for pid, start in pending.items() if still_there(pid, start)}
            with self.table.lock:
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
        with self.table.lock:
            for job in self.table.jobs.values():
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
                    with self.table.lock:
                        found -= {j.shim for j in self.table.jobs.values() if not j.shim_reaped}
                if signum == signal.SIGSTOP:
                    found = {pid for pid in found if procs[pid].state not in ("T", "t")}
                if not found:
                    break
                if signum == signal.SIGKILL:
                    with self.table.lock:
                        self.dying.update((pid, procs[pid].start) for pid in found)
                # The shims stay alive meanwhile: whatever the killed processes fork lands
                # under them and is found by the next round.
                for pid in found:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signum)
                time.sleep(0.005)
        with self.table.lock:
            for job in self.table.jobs.values():
                if (job_ids is None or job.job_id in job_ids) and not job.shim_reaped:
                    shim = read_proc(job.shim)
                    if shim is not None:
                        self.dying[job.shim] = shim.start
                    with contextlib.suppress(OSError):
                        os.kill(job.shim, signal.SIGKILL)
        # Wait briefly for the shims' reports so that the answer is final.
        end = time.monotonic() + 2.0
        with self.table.lock:
            while time.monotonic() < end and any(
                (job_ids is None or j.job_id in job_ids) and j.state == "running"
                for j in self.table.jobs.values()
            ):
                self.table.lock.wait(0.05)
