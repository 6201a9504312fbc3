"""Where the test suite's CPU goes: the kernel's process accounting around one command.

The pytest workers' own account (`getrusage`) misses most of the suite's work: sandbox
supervisors and their jobs, fork servers killed at their server's end, the PostgreSQL and Ray
daemons, container processes. BSD process accounting (acct(2)) writes one record for every
process that exits on the machine, whoever its parent was, with its CPU time, its user and its
name. This script switches it on, runs the command (by default the suite as `make test` runs
it), switches it off, and prints:

- the wall time and how busy the cores were (from /proc/stat, the whole machine);
- the CPU of the processes that exited during the command, by user and process name (a
  process's name is its last thread's: a training job can show as `jemalloc_bg_thd`), each as a
  share of all the machine's busy CPU measured in the same run.

It needs root (CAP_SYS_PACCT), and it takes over the machine's accounting file while it runs
(there is no call that reads the current one back): do not use it where accounting is in use.

    .venv/bin/python bench/suite_cpu.py                            # the whole suite, 3 workers
    .venv/bin/python bench/suite_cpu.py -- .venv/bin/python -m pytest tests/test_cli.py
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import pwd
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = [".venv/bin/python", "-m", "pytest", "-q", "-n", "3", "--dist", "loadfile",
         "--no-loadscope-reorder", "-p", "no:cacheprovider"]
#: struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
#: etime (float), then eight comp_t (utime, stime, mem, io, rw, minflt, majflt, swaps), comm
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # the unit of comp_t times in acct_v3 records


@dataclass(frozen=True)
class Exited:
    """One process's accounting record: who, what, and its CPU seconds."""
    uid: int
    pid: int
    ppid: int
    comm: str
    cpu_s: float


def comp_t(value: int) -> int:
    """acct's 16-bit float: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def parse_records(data: bytes) -> list[Exited]:
    """The acct_v3 records in `data` (version 3 only: the one Linux writes)."""
    out = []
    for (_flag, version, _tty, _exit, uid, _gid, pid, ppid, _btime, _etime, utime, stime,
         *_rest, comm) in ACCT_V3.iter_unpack(data[: len(data) - len(data) % ACCT_V3.size]):
        if version & 0x7F != 3:
            raise ValueError(f"not an acct_v3 record (version {version})")
        out.append(Exited(uid=uid, pid=pid, ppid=ppid,
                          comm=comm.split(b"\0", 1)[0].decode(errors="replace"),
                          cpu_s=(comp_t(utime) + comp_t(stime)) / AHZ))
    return out


def by_user_and_name(records: list[Exited]) -> list[tuple[str, str, float, int]]:
    """(user, process name, CPU seconds, processes), the most CPU first."""
    groups: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    for r in records:
        groups[(r.uid, r.comm)].append(r.cpu_s)
    rows = [(user_name(uid), comm, sum(cpus), len(cpus)) for (uid, comm), cpus in groups.items()]
    return sorted(rows, key=lambda row: -row[2])


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"  # a sandbox's user exists only inside its namespace


def busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def set_accounting(path: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"suite_cpu: acct({path!r}) failed: {os.strerror(err)} "
                         "(process accounting needs root and a kernel with BSD_PROCESS_ACCT)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=15, help="rows of the table")
    parser.add_argument("command", nargs="*", help="the command (default: the suite)")
    args = parser.parse_args()
    command = args.command or SUITE
    with tempfile.TemporaryDirectory(prefix="a2rl-acct-") as tmp:
        log = Path(tmp) / "acct"
        log.touch(mode=0o600)
        busy0, total0 = busy_ticks()
        start = time.monotonic()
        set_accounting(str(log))
        try:
            proc = subprocess.run(command, cwd=ROOT, env={**os.environ, "CI": "true"})
        except OSError as exc:
            raise SystemExit(f"suite_cpu: cannot run {command[0]!r}: {exc.strerror}") from None
        finally:
            set_accounting(None)
        wall = time.monotonic() - start
        busy1, total1 = busy_ticks()
        records = parse_records(log.read_bytes())
    hz = os.sysconf("SC_CLK_TCK")
    machine_busy = (busy1 - busy0) / hz
    accounted = sum(r.cpu_s for r in records)
    print(f"\nexit {proc.returncode}; {wall:.0f} s wall on {os.cpu_count()} cores; cores busy "
          f"{(busy1 - busy0) / (total1 - total0):.0%} ({machine_busy:.0f} CPU-s); "
          f"{len(records)} processes exited with {accounted:.0f} CPU-s "
          f"({accounted / machine_busy:.0%} of the busy CPU; the rest is daemons still "
          "running and the kernel)")
    print("\n| user | process name | CPU-s | share of busy CPU | processes |")
    print("|---|---|---|---|---|")
    for user, comm, cpu, n in by_user_and_name(records)[: args.top]:
        print(f"| {user} | `{comm}` | {cpu:.0f} | {cpu / machine_busy:.1%} | {n} |")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
