"""What the supervisor asks of the kernel (prctl, /proc, its OOM score) and says to its log."""

from __future__ import annotations

import ctypes
import os
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


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


def set_oom_score_adj(value: int) -> bool:
    """Write this process's `oom_score_adj`; False where the kernel refuses (lowering it
    needs CAP_SYS_RESOURCE)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False
