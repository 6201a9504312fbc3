"""Which job a process belongs to, from the kernel alone.

Every process of a job descends from the job's *shim* (supervisor/shim.py): a session leader
and child subreaper forked by the supervisor, renamed `a2rl-job`, whose children are
reparented to it whatever they double-fork or setsid, and which no job can signal or rename.
So the job of a process is found by walking its parent chain on the host (`/proc/PID/stat`)
up to a child of the supervisor, whose pid in the sandbox's namespace (`NSpid`) the
supervisor's table maps to a job (`shims`). Nothing a job can write decides it: not its
environment, its name or its folder.

Pids are reused: the kernel hands out a number again once its counter wraps (`pid_max` is
32768 on many hosts). A verdict is kept per pid for as long as the host's pid counter has not
wrapped (`PidCounter`, read after every read of events): until then no other process can have
that pid, so a later event of it, even one read after its process was reaped (a `cp` closes
and exits in a millisecond), is that process's. A process not seen before is named from /proc
while its pidfd (in the event) says it is not reaped; one already reaped is stored
unattributed, never guessed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

#: not the run's: a process outside its sandbox (the server reading the workspace, a grader)
OUTSIDE = "\0outside"
SHIM_NAME = "a2rl-job"
MAX_CHAIN = 4096  # ancestors walked at most (a chain is a few deep; this bounds a loop)
MAX_CACHED = 200_000

#: a job id, None (the run's, but no job's: unattributed) or OUTSIDE
Verdict = str | None


class Stat:
    __slots__ = ("pid", "ppid", "start", "name")

    def __init__(self, pid: int, ppid: int, start: int, name: str) -> None:
        self.pid, self.ppid, self.start, self.name = pid, ppid, start, name


def read_stat(pid: int) -> Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # The name may hold spaces and parentheses: the fields start after the last ')'.
    close = raw.rfind(")")
    fields = raw[close + 2:].split()
    try:
        return Stat(pid, int(fields[1]), int(fields[19]), raw[raw.find("(") + 1:close])
    except (IndexError, ValueError):
        return None


def inner_pid(pid: int) -> int | None:
    """The process's pid in the innermost pid namespace it is in (its sandbox's)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def not_reaped(pidfd: int) -> bool:
    """Whether the process of `pidfd` still exists (a zombie counts: its pid is still its)."""
    if pidfd < 0:
        return False
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    return True


class PidCounter:
    """The host's last allocated pid: when it goes down, the counter wrapped and a pid seen
    before may now be another process's (`generation` moves on). It is read after every read
    of events and every tenth of a second; a whole turn between two reads would take hundreds
    of thousands of forks a second."""

    PATH = "/proc/sys/kernel/ns_last_pid"

    def __init__(self) -> None:
        self.generation = 0
        try:
            self._fd = os.open(self.PATH, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = -1
        self.last = self._read()

    def _read(self) -> int:
        try:
            return int(os.pread(self._fd, 32, 0))
        except (OSError, ValueError):
            return -1  # unreadable: every read counts as a wrap, nothing is trusted

    def tick(self) -> int:
        now = self._read()
        if now < self.last or now < 0:
            self.generation += 1
        self.last = now
        return self.generation


class Resolver:
    """Maps a host pid to its verdict; `jobs_of_shims` asks the supervisor for
    {shim pid in the sandbox: job id} of its live shims."""

    def __init__(self, supervisor_pid: int, jobs_of_shims: Callable[[], dict[int, str]]) -> None:
        self.supervisor_pid = supervisor_pid
        sup = read_stat(supervisor_pid)
        self.supervisor_start = sup.start if sup is not None else -1
        self.jobs_of_shims = jobs_of_shims
        self.counter = PidCounter()
        self._known: dict[int, Verdict] = {}  # this turn of the pid counter's verdicts
        self.unknown = 0  # events whose process could not be named (kept unattributed)

    def tick(self) -> None:
        generation = self.counter.generation
        if self.counter.tick() != generation:
            self._known.clear()

    def verdict(self, pid: int, pidfd: int) -> Verdict:
        """The job of the process that caused an event: the verdict given to its pid in this
        turn of the pid counter, else read from /proc while its pidfd says it is not reaped,
        else None (unattributed)."""
        if pid in self._known:
            return self._known[pid]
        if pidfd >= 0:
            stat = read_stat(pid)
            if stat is not None and not_reaped(pidfd):
                found = self._walk(stat)
                if found is not _GONE:
                    return found  # type: ignore[return-value]
        self.unknown += 1
        return None

    def _walk(self, stat: Stat) -> Verdict | object:
        chain: list[int] = []
        verdict: Verdict | object = _GONE
        current: Stat | None = stat
        for _ in range(MAX_CHAIN):
            if current is None:
                break
            if current.pid in self._known:
                verdict = self._known[current.pid]
                break
            if current.pid == self.supervisor_pid and current.start == self.supervisor_start:
                verdict = None  # the supervisor itself: the run's, no job's
                break
            if current.ppid == self.supervisor_pid:
                chain.append(current.pid)
                verdict = self._shim_job(current)
                break
            if current.ppid <= 1:
                chain.append(current.pid)
                verdict = OUTSIDE  # reached the host's init: never in the sandbox
                break
            parent = read_stat(current.ppid)
            if parent is not None and parent.start > current.start:
                # a parent is older than its child: a younger one took the pid of a parent
                # reaped while we looked (the child was reparented meanwhile); read the
                # child again for its new parent
                again = read_stat(current.pid)
                if again is None or again.start != current.start:
                    break
                current = again
                continue
            chain.append(current.pid)
            current = parent
        if verdict is _GONE:
            return _GONE
        if len(self._known) > MAX_CACHED:
            self._known.clear()
        for pid in chain:
            self._known[pid] = verdict  # type: ignore[assignment]
        return verdict

    def _shim_job(self, stat: Stat) -> Verdict:
        """The job of a child of the supervisor: a shim's, found in the supervisor's table by
        its pid in the sandbox; anything else the supervisor has as a child (none today) is
        the run's without a job."""
        supervisor = read_stat(self.supervisor_pid)
        if supervisor is None or supervisor.start != self.supervisor_start:
            return None
        if stat.name != SHIM_NAME:
            return None
        inner = inner_pid(stat.pid)
        if inner is None:
            return None
        try:
            return self.jobs_of_shims().get(inner)
        except OSError:
            return None


_GONE = object()  # the process went while its chain was read
