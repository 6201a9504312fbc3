"""Each job's GPU seconds and peak GPU memory, from NVML, on a machine without a GPU.

NVML is the one part that cannot be reached here: the test puts a `pynvml` module of its own
first on the server's path (a file in a temporary folder, speaking the calls a2rl makes of
nvidia-ml-py), which reports the REAL host pids of a real job's processes, found in /proc, with a
memory figure. Everything else is real: the sandbox (bubblewrap, a container), its namespaces,
the supervisor's report of each job's shim, the store.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2rl.settings import Settings
from a2rl.store import Store, ledger
from a2rl.tools import gpu_usage

from .conftest import backend_settings
from .test_job_causes import ended, job, opened, sh

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

FAKE_PYNVML = '''"""A stand-in for nvidia-ml-py's pynvml: the GPUs and processes that
procs.json beside it lists (rewritten by the test while jobs run)."""
import json
from pathlib import Path
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _table():
    path = Path(__file__).with_name("procs.json")
    if not path.exists():
        raise NVMLError("Driver Not Loaded")
    return json.loads(path.read_text())


def nvmlInit():
    _table()


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return _table()["devices"]


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetComputeRunningProcesses(handle):
    if handle in _table().get("broken", []):
        raise NVMLError("GPU is lost")
    return [SimpleNamespace(pid=pid, usedGpuMemory=used)
            for device, pid, used in _table()["procs"] if device == handle]
'''

MIB = 1 << 20


@pytest.fixture
def fake_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake module's folder, first on sys.path; its procs.json, with two GPUs and no
    process, written (delete it for "no driver")."""
    folder = tmp_path / "nvml"
    folder.mkdir()
    (folder / "pynvml.py").write_text(FAKE_PYNVML)
    table = folder / "procs.json"
    table.write_text(json.dumps({"devices": 2, "procs": []}))
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("pynvml", None)
    gpu_usage.forget_nvml()
    yield table
    sys.modules.pop("pynvml", None)
    gpu_usage.forget_nvml()


def host_pids(argv: list[str], count: int, timeout: float = 10) -> list[int]:
    """The host pids of the processes running exactly `argv`, once `count` of them are."""
    want = "\0".join(argv).encode() + b"\0"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        if f.read() == want:
                            found.append(int(name))
                except OSError:
                    continue
        if len(found) >= count:
            return sorted(found)
        time.sleep(0.05)
    raise AssertionError(f"{argv} did not start {count} processes")


@pytest.mark.parametrize("name", ["local", "docker"])
async def test_gpu_seconds_and_peak_per_job(name: str, settings: Settings, store: Store,
                                            fake_nvml: Path) -> None:
    """Job A's two processes each hold a GPU (100 and 30 MiB, on GPUs 0 and 1) for a second
    or two: its row has GPU seconds on both and a peak of their sum. Job B runs beside it off
    the GPUs, and a host process outside the run is listed too: B measures 0, and nothing of
    the stranger reaches either."""
    backend = backend_settings(settings, name).updated({"recording.gpu_sample_s": 0.1})
    secs = f"2.{random.randrange(10**6):06d}"  # a command line no one else runs
    other = f"3.{random.randrange(10**6):06d}"
    async with opened(backend, store) as (c, run):
        a = await sh(c, f"sleep {secs} & sleep {secs}; wait", wait_s=0)
        b = await sh(c, f"sleep {other}", wait_s=0)
        pids = host_pids(["sleep", secs], 2)
        host_pids(["sleep", other], 1)
        fake_nvml.write_text(json.dumps({"devices": 2, "procs": [
            [0, pids[0], 100 * MIB], [1, pids[1], 30 * MIB], [0, os.getpid(), 999 * MIB]]}))
        start = time.monotonic()
        row_a = await ended(store, a["job_id"], 20)
        listed = time.monotonic() - start
        fake_nvml.write_text(json.dumps({"devices": 2, "procs": []}))
        row_b = await ended(store, b["job_id"], 20)
        totals = ledger.run_resources(store, run.id, None)
    assert row_a.state == "exited" and row_b.state == "exited", (row_a, row_b)
    assert row_a.gpu_memory_peak_bytes == 130 * MIB, row_a
    assert row_a.gpu_s is not None and 1.0 <= row_a.gpu_s <= 2 * listed + 0.5, (row_a, listed)
    assert (row_b.gpu_s, row_b.gpu_memory_peak_bytes) == (0.0, 0), row_b
    assert totals["gpu_s"] == row_a.gpu_s and totals["gpu_memory_peak_bytes"] == 130 * MIB


async def test_without_nvml_nothing_is_measured(settings: Settings, store: Store,
                                                fake_nvml: Path) -> None:
    """NVML that does not start (no driver): the job's GPU columns stay NULL, as on a machine
    without nvidia-ml-py."""
    fake_nvml.unlink()
    backend = backend_settings(settings, "local").updated({"recording.gpu_sample_s": 0.1})
    async with opened(backend, store) as (c, _):
        r = await sh(c, "true")
    row = job(store, r["job_id"])
    assert row.state == "exited" and gpu_usage.nvml() is None
    assert (row.gpu_s, row.gpu_memory_peak_bytes) == (None, None), row


def test_the_account_of_samples() -> None:
    """Each sample credits a job once per GPU it is on; its peak is one sample's sum; nothing
    sampled yet is "not measured", a job never seen is 0."""
    usage = gpu_usage.GpuUsage()
    assert usage.figures("a") == (None, None)
    usage.add([("a", 0, 5 * MIB), ("a", 1, 2 * MIB), ("a", 1, 1 * MIB)], 0.5)
    usage.add([("a", 0, 6 * MIB)], 0.25)
    usage.add([], 0.5)
    assert usage.figures("a") == (1.25, 8 * MIB)
    assert usage.figures("b") == (0.0, 0)


def test_a_process_is_placed_by_its_parents(fake_nvml: Path) -> None:
    """Real processes: a grandchild of a "supervisor" (this process) is its child's (the
    shim's) job; a process outside its tree is nobody's; a GPU NVML cannot list is skipped."""
    secs = f"30.{random.randrange(10**6):06d}"
    shim = subprocess.Popen(["bash", "-c", f"sleep {secs} & wait"])
    try:
        child = host_pids(["sleep", secs], 1)
        assert gpu_usage._status(child[0]) == (shim.pid, child[0]), child
        assert gpu_usage.owner(child[0], os.getpid(), {shim.pid: "j"}) == "j"
        assert gpu_usage.owner(child[0], os.getpid(), {0: "j"}) is None
        # a process below the supervisor's child is never a shim, whatever its pid
        assert gpu_usage.owner(child[0], os.getpid(), {child[0]: "j"}) is None
        assert gpu_usage.owner(os.getppid(), os.getpid(), {shim.pid: "j"}) is None
    finally:
        shim.kill()
        shim.wait()
    fake_nvml.write_text(json.dumps({"devices": 2, "broken": [0], "procs": [[0, 1, 5], [1, 2, 7]]}))
    lib = gpu_usage.nvml()
    assert lib is not None and gpu_usage.gpu_processes(lib) == [(1, 2, 7)]
