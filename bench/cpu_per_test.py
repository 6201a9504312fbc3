"""The CPU each test costs, every process it started included: a pytest plugin and its report.

The workers' own account (`getrusage`) misses what a test starts and does not wait for: the
sandbox supervisors and their jobs (a training run), the Ray daemons, fork servers. Each
pytest-xdist worker here moves itself into a cgroup of its own in the CPU accounting hierarchy
(cgroup v1 `cpuacct`, or v2 `cpu.stat`), which every process it starts inherits and no sandbox
leaves (a run's own cgroups are in other hierarchies on v1); the plugin reads the group's usage
before and after each test, setup and teardown included, and writes one JSON line per test.
Not counted: container processes (Docker puts them in its own groups) and daemons the tests
share (PostgreSQL, dockerd).

It needs root (it makes cgroups). Run the suite with it, then the report:

    PYTHONPATH=bench CI=true .venv/bin/python -m pytest -n 3 --dist loadfile \\
        --no-loadscope-reorder -p no:cacheprovider -p cpu_per_test
    .venv/bin/python bench/cpu_per_test.py          # files and tests by CPU-seconds

Lines go to `$A2RL_CPU_PER_TEST` (default /tmp/a2rl-cpu-per-test), one file per worker. A
worker's group is removed at its end when empty; one that still held a process then (a fork
server ends at the worker's exit) is removed by the report.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

OUT = Path(os.environ.get("A2RL_CPU_PER_TEST", "/tmp/a2rl-cpu-per-test"))
V1, V2 = Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup")
_group: Path | None = None


def _usage_s(group: Path) -> float:
    if (group / "cpuacct.usage").exists():
        return int((group / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def pytest_configure(config: pytest.Config) -> None:
    global _group
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    parent = V1 if V1.is_dir() else V2
    _group = parent / f"a2rl-cpu-per-test-{worker}"
    _group.mkdir(exist_ok=True)
    (_group / "cgroup.procs").write_text(str(os.getpid()))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{worker}.jsonl").write_text("")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _group is not None:
        (_group.parent / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):  # something the session started still runs in it
            _group.rmdir()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    assert _group is not None
    cpu, wall = _usage_s(_group), time.monotonic()
    yield
    line = {"id": item.nodeid, "cpu_s": round(_usage_s(_group) - cpu, 3),
            "wall_s": round(time.monotonic() - wall, 3)}
    with open(OUT / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def remove_empty_groups() -> None:
    """The workers' groups that nothing is in any more (a group holding a process stays)."""
    for parent in (V1, V2):
        for group in parent.glob("a2rl-cpu-per-test-*") if parent.is_dir() else []:
            with contextlib.suppress(OSError):
                group.rmdir()


def report(folder: Path = OUT, top: int = 30) -> None:
    rows = [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        acc = by_file[r["id"].split("::")[0]]
        acc[0] += r["cpu_s"]
        acc[1] += r["wall_s"]
        acc[2] += 1
    print(f"{len(rows)} tests, {sum(r['cpu_s'] for r in rows):.0f} CPU-s in all")
    print("\nfiles by CPU-seconds (wall-seconds, tests)")
    for name, (cpu, wall, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{cpu:8.1f} {wall:8.1f} {n:5d}  {name}")
    print("\ntests by CPU-seconds (wall-seconds)")
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        print(f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['id']}")


if __name__ == "__main__":
    remove_empty_groups()
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
