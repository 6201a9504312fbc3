"""What the supervisor watches on its own: the limits it enforces itself (`LimitWatch`: a
job's processes, the workspace's disk) and the run's deadline (`DeadlineWatch`). Each runs in
its own thread and ends jobs through the job table."""

from __future__ import annotations

import os
import socketserver
import time

from .jobs import JobTable
from .system import human, list_procs, log, written_bytes

WATCH_EVERY = 0.5  # seconds between two looks at the jobs' processes
DISK_EVERY = 2.0  # seconds between two measures of the workspace


class LimitWatch:
    """Ends a job that reaches the process limit, or writes past the disk limit."""

    def __init__(self, table: JobTable, workspace: str) -> None:
        self.table = table
        self.limits = table.limits
        self.workspace = workspace
        self.last_disk = 0.0
        self.last_used = 0  # the workspace's bytes at the last disk check
        self.watched: set[str] = set()  # the jobs running at the last disk check

    def run(self) -> None:
        while not self.table.stopping.is_set():
            time.sleep(WATCH_EVERY)
            try:
                self.check()
            except Exception as exc:  # a limit check must never end the supervisor
                log(f"limit check failed: {exc!r}")

    def check(self) -> None:
        with self.table.lock:
            if not any(j.state == "running" or not j.shim_reaped for j in self.table.jobs.values()):
                return
        procs = list_procs()
        tree = self.table.killer.tree(procs, None)
        if self.limits.pids > 0:
            for job_id, members in tree.items():
                if len(members) + 1 >= self.limits.pids:
                    self.table.end_for(self.table.jobs[job_id], f"killed: process limit "
                                       f"{self.limits.pids} reached (too many processes or "
                                       "threads)")
        if self.limits.disk <= 0 or time.monotonic() - self.last_disk < DISK_EVERY:
            return
        self.last_disk = time.monotonic()
        written = {job_id: sum(written_bytes(p) for p in members)
                   for job_id, members in tree.items()}
        used = self.workspace_bytes()
        grown = used - self.last_used
        with self.table.lock:
            running = sorted((j for j in self.table.jobs.values() if j.state == "running"),
                             key=lambda j: -j.started_at)
        if used > self.limits.disk and grown > 0:
            # Only growth is blamed: a job started while the workspace is over the limit to
            # delete files (`rm`) must be left to finish, or the agent could never make room.
            # The writer is the job whose processes wrote a fair share of the growth since the
            # last look (a job that only printed a line did not fill the disk).
            share = min(grown // 2, 1 << 20)
            deltas = {j: w - self.table.jobs[j].written for j, w in written.items()}
            writers = [j for j, d in sorted(deltas.items(), key=lambda kv: -kv[1])
                       if d >= share]
            # Blocks taken without a write (fallocate, a sparse file filled by mmap) leave no
            # trace in /proc/<pid>/io: then the newest job that was already running at the last
            # look, since only such a job can have taken them.
            writers += [j.job_id for j in running if j.job_id in self.watched]
            for job_id in writers[:1]:
                self.table.end_for(self.table.jobs[job_id], f"killed: workspace disk "
                                   f"limit {human(self.limits.disk)} reached ({used >> 20} "
                                   "MiB used); delete files to make room")
        self.last_used = used
        self.watched = {j.job_id for j in running}
        for job_id, w in written.items():
            self.table.jobs[job_id].written = w

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


class DeadlineWatch:
    """Holds the run's deadline (moved by `set`) and stops every job when it passes, then the
    server: the supervisor exits at the deadline whoever is attached."""

    def __init__(self, table: JobTable, deadline: float) -> None:
        self.table = table
        self.deadline = deadline

    def set(self, deadline: float) -> None:
        with self.table.lock:
            self.deadline = deadline
            self.table.lock.notify_all()  # the watch sees a moved deadline at once

    def run(self, server: socketserver.BaseServer) -> None:
        table = self.table
        while not table.stopping.is_set():
            if time.time() >= self.deadline:
                at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.deadline))
                table.stop("timeout", "deadline", f"the run's deadline ({at}) passed: the "
                           "supervisor stopped every job")
                break
            with table.lock:  # `set` notifies, so a moved deadline is seen at once
                table.lock.wait(min(1.0, max(0.0, self.deadline - time.time())))
        server.shutdown()
