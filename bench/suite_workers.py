"""How many pytest workers `make test` should run on this machine (issue 28: the suite's time).

The same test files run once per worker count, one after the other, each a fresh pytest
process with `--dist loadfile` as `make test` runs it; the first count is the baseline. For
each: wall seconds, the CPU seconds of pytest and the processes it started and reaped (user +
system, the kernel's account of the children: sandbox supervisors and their jobs, fork servers
and containers are not in it), and how busy the whole machine's cores were (/proc/stat, as
`suite_cpu.py` reads it). Tests that wait on jobs, deadlines, containers and servers leave
cores idle; one more worker fills them until the cores are busy.

    .venv/bin/python bench/suite_workers.py                 # the default files, 2 and 3 workers
    .venv/bin/python bench/suite_workers.py --workers 2 3 4 --files tests/test_cli.py
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from suite_cpu import busy_ticks  # bench/ is this script's folder, first on sys.path

ROOT = Path(__file__).resolve().parent.parent
#: a mix of what the suite does: served runs, deadlines, signals, submissions and grading
DEFAULT_FILES = ["tests/test_submissions.py", "tests/test_cli.py", "tests/test_audit.py",
                 "tests/test_run_signals.py", "tests/test_fair_grading.py",
                 "tests/test_run_overdue.py"]


def run_once(workers: int, files: list[str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, total0 = busy_ticks()
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers),
                           "--dist", "loadfile", "-p", "no:cacheprovider", *files],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1, total1 = busy_ticks()
    if proc.returncode != 0:
        sys.exit(f"pytest failed with {workers} workers:\n{proc.stdout[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "busy": (busy1 - busy0) / (total1 - total0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--files", nargs="+", default=DEFAULT_FILES)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at the start")
    results = {n: run_once(n, args.files) for n in args.workers}
    base = results[args.workers[0]]["wall_s"]
    for n, r in results.items():
        print(f"-n {n}: {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU, cores busy "
              f"{r['busy']:.0%} (the whole machine), wall / baseline {r['wall_s'] / base:.2f}")


if __name__ == "__main__":
    main()
