"""Each job's GPU seconds and peak GPU memory, sampled through NVML on the host.

NVML (`pynvml`, from the `nvidia-ml-py` package) names the processes on each GPU by their host
pid, while a job's processes live in the sandbox's pid namespace. So a process is placed by the
kernel's own account, read from /proc: walking its parents up to the run's supervisor
(`Sandbox.supervisor_host_pid`) says it is the run's; the supervisor's child on that way is a
job's shim, whose pid in the sandbox's namespace (the last `NSpid:` field) the supervisor
reports with the job, which says whose. A job cannot leave its shim's tree (the shim is its
subreaper) nor rewrite its parents, so a process cannot be put on another job's account.

A sample every `recording.gpu_sample_s` while a run has running jobs: each job with a process on
a GPU is credited the time since the last sample once per such GPU, and its peak is the largest
sum of its processes' memory in one sample. Without `pynvml`, or where NVML does not start (no
driver, no GPU), nothing is sampled and the job's columns stay NULL (one log line); with NVML,
a job never seen on a GPU gets 0 and 0. A job is only seen while this server samples: a job
that began under a server since restarted is measured from the restart on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from a2rl.sandbox.base import Sandbox

    from .runtime import RunRuntime

log = logging.getLogger(__name__)

#: The most parents walked up from one GPU process (a deeper tree is not a run's).
MAX_DEPTH = 256

_nvml_lock = threading.Lock()
_nvml: ModuleType | None = None
_nvml_tried = False


def nvml() -> ModuleType | None:
    """`pynvml`, initialised once per process; None (said once) where it cannot be."""
    global _nvml, _nvml_tried
    with _nvml_lock:
        if not _nvml_tried:
            _nvml_tried = True
            try:
                import pynvml

                pynvml.nvmlInit()
                _nvml = pynvml
            except Exception as exc:  # ImportError, NVMLError (no driver), a broken library
                log.info("jobs' GPU use is not measured: NVML is unavailable (%s)",
                         f"{type(exc).__name__}: {exc}")
        return _nvml


def forget_nvml() -> None:
    """Look for NVML again at the next `nvml()` (tests that put a module in its place)."""
    global _nvml, _nvml_tried
    with _nvml_lock:
        _nvml, _nvml_tried = None, False


def gpu_processes(lib: ModuleType) -> list[tuple[int, int, int]]:
    """(device index, host pid, bytes of GPU memory) of every compute process; memory NVML
    does not report (None) counts 0. A device NVML cannot list (lost, not supported) is
    skipped: the others still count."""
    found = []
    for index in range(lib.nvmlDeviceGetCount()):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            procs = lib.nvmlDeviceGetComputeRunningProcesses(handle)
        except lib.NVMLError:
            continue
        found += [(index, int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]
    return found


def _status(pid: int) -> tuple[int, int] | None:
    """A process's parent (host pid) and its pid in its innermost namespace, from the
    kernel's /proc/<pid>/status; None once it is gone."""
    ppid = nspid = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("PPid:"):
                    ppid = int(line.split()[1])
                elif line.startswith("NSpid:"):
                    nspid = int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None if ppid is None or nspid is None else (ppid, nspid)


def owner(pid: int, supervisor: int, shims: dict[int, str]) -> str | None:
    """The running job (by its shim's namespace pid) that host process `pid` belongs to; None
    where it is no process of this run's running jobs. Only the supervisor's own child can be
    a shim: a process deeper down whose pid in a namespace it made matches another job's
    shim is still under its own shim (the leftover of an ended job, say) and is nobody's."""
    for _ in range(MAX_DEPTH):
        st = _status(pid)
        if st is None:
            return None
        ppid, nspid = st
        if ppid == supervisor:
            return shims.get(nspid)
        if ppid <= 1:
            return None
        pid = ppid
    return None


@dataclass
class JobGpu:
    gpu_s: float = 0.0
    peak_bytes: int = 0


@dataclass
class GpuUsage:
    """A run's per-job GPU account, filled by the sampler, read when a job settles."""

    measured: bool = False  # NVML answered at least once for this run
    jobs: dict[str, JobGpu] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seen: Iterable[tuple[str, int, int]], seconds: float) -> None:
        """One sample: (job, device, bytes) of each of the run's GPU processes."""
        devices: dict[str, set[int]] = {}
        memory: dict[str, int] = {}
        for job, device, used in seen:
            devices.setdefault(job, set()).add(device)
            memory[job] = memory.get(job, 0) + used
        with self.lock:
            self.measured = True
            for job, devs in devices.items():
                acc = self.jobs.setdefault(job, JobGpu())
                acc.gpu_s += seconds * len(devs)
                acc.peak_bytes = max(acc.peak_bytes, memory[job])

    def figures(self, job_id: str) -> tuple[float | None, int | None]:
        """A job's (GPU seconds, peak GPU bytes) for its row: None, None where nothing was
        measured; 0, 0 for a job never seen on a GPU."""
        with self.lock:
            if not self.measured:
                return None, None
            acc = self.jobs.get(job_id, JobGpu())
            return round(acc.gpu_s, 3), acc.peak_bytes


def sample_once(usage: GpuUsage, lib: ModuleType, sandbox: Sandbox, seconds: float) -> None:
    """Credit `seconds` to each of the run's jobs on a GPU now."""
    procs = gpu_processes(lib)
    supervisor = sandbox.supervisor_host_pid() if procs else None
    seen: list[tuple[str, int, int]] = []
    if supervisor is not None:
        shims: dict[int, str] | None = None
        for device, pid, used in procs:
            if shims is None:
                shims = {sj.shim: sj.job_id for sj in sandbox.list()
                         if sj.shim is not None and sj.state == "running"}
            job = owner(pid, supervisor, shims)
            if job is not None:
                seen.append((job, device, used))
    usage.add(seen, seconds)


def track(rt: RunRuntime) -> None:
    """Make sure a thread of this process samples the run's GPUs while its jobs run (nothing
    where NVML is unavailable)."""
    if nvml() is None:
        return
    rt.gpu_sampler.ensure(lambda: _sample(rt))


def _sampling(rt: RunRuntime) -> Sandbox | None:
    """The sandbox whose jobs to sample, or None: none started here, or no job runs."""
    from .jobs import running_ids

    sandbox = rt.sandbox.started()
    return sandbox if sandbox is not None and running_ids(rt) else None


def _sample(rt: RunRuntime) -> None:
    lib = nvml()
    interval = rt.settings.recording.gpu_sample_s
    last = time.monotonic() - interval
    while lib is not None:
        sandbox = rt.gpu_sampler.unless_idle(lambda: _sampling(rt))
        if sandbox is None:
            return
        now = time.monotonic()
        try:
            sample_once(rt.gpu, lib, sandbox, now - last)
        except Exception as exc:  # one bad look (a supervisor restarting) ends no sampling
            rt.log.warning("GPU sampler: %s", exc)
        last = now
        time.sleep(interval)
