"""One run as the tools see it: its row, clock, workspace, sandbox, revision scanner and log.

A `RunRuntime` is built once per run per server process and shared by all of that run's
calls. The tool functions find theirs through `current()`, set by the recording layer for the
duration of one call. The clock and the grading hook are the server's, handed in when it
builds the runtime (`a2rl.server.run.build_runtime`); the tools know them only by the shapes
of `seam` (`RunClockView`, `GradingHook`), so nothing here imports the server.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from a2rl.layout import LEGACY_READONLY_INPUTS
from a2rl.sandbox import volume
from a2rl.settings import Settings
from a2rl.store import Run, Store

from .gpu_usage import GpuUsage
from .job_logs import JobLogs
from .on_demand import OnDemandThread
from .paths import Workspace
from .revisions import RevisionScanner
from .run_sandbox import RunSandbox
from .seam import GradingHook, RunClockView

#: The clock's own type, as its maker sees it (the server's `RunClock`): the tools read it as
#: a `RunClockView`, the server that built the runtime also moves it.
ClockT = TypeVar("ClockT", bound=RunClockView)

T = TypeVar("T")


def run_dir(run: Run) -> Path:
    return Path(run.workspace).parent


def readonly_inputs(run: Run) -> list[str]:
    """The workspace paths mounted read-only for `run`: those its task declared
    (`TaskSpec.readonly_paths`, recorded when the run was made), else, for an older run, the
    folders of `a2rl.layout.LEGACY_READONLY_INPUTS` it has. A declared path is kept even when
    the task wrote nothing there: the file tools still refuse to create it."""
    declared = run.readonly_paths
    if declared is not None:
        return [p.strip("/") for p in declared]
    return [p for p in LEGACY_READONLY_INPUTS if (Path(run.workspace) / p).exists()]


def run_logger(run_id: str, path: Path) -> logging.Logger:
    logger = logging.getLogger(f"a2rl.run.{run_id}")
    if not any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def sandbox_owner(settings: Settings) -> tuple[int, int] | None:
    """Who must own files we write in a workspace: the sandbox user when we are root (jobs run
    as that user on both backends), else nobody else (jobs share our user)."""
    if os.geteuid() == 0:
        return settings.sandbox.uid, settings.sandbox.uid
    return None


class RunRuntime(Generic[ClockT]):
    """One run as the tools of one process see it, built once and shared by its calls.

    Besides what the run is (its settings, store, workspace, revision scanner, log, clock and
    grading hook), each concern that holds state across calls is a part of its own:

    - `sandbox` (`RunSandbox`): the run's sandbox, started or reattached once, and the
      deadline it last heard;
    - `job_logs` (`JobLogs`): where the jobs' logs are, and what the store keeps of them
      within the run's allowance;
    - `watcher` (`OnDemandThread`): the thread settling the run's background jobs as they
      end (`jobs.watch`), and `settle_lock`, one settlement at a time (the watcher and a tool
      call may see the same end together; its log and rescan must happen once);
    - `gpu` (`GpuUsage`) and `gpu_sampler` (`OnDemandThread`): the jobs' GPU use, sampled
      while they run (`gpu_usage.track`), read as they settle;
    - `grading_settings`: the `[grading]` section the run was frozen with (its limits).
    """

    def __init__(self, settings: Settings, store: Store, run: Run, *, clock: ClockT,
                 grading: GradingHook,
                 hidden_paths: Callable[[], list[Path]] = list) -> None:
        """`clock` is the run's clock; `grading` is where submissions go (the serving
        process's grading pump, or the queue alone for a runtime built outside a server);
        `hidden_paths` names the host paths that carry any task's hidden items, asked at each
        sandbox start (the tasks know them; the tools import no task)."""
        self.settings, self.store, self.run_id = settings, store, run.id
        #: the grading settings the run is held to (its limits, its checks): frozen with it,
        #: whichever process serves it
        self.grading_settings = run.config.grading_settings(settings.grading)
        self.dir = run_dir(run)
        if run.ended_at is None and run.config.setup.disk_volume:
            volume.remount(self.dir, Path(run.workspace))  # before anything opens it
        self.workspace = Workspace(Path(run.workspace), readonly_inputs(run))
        self.owner = sandbox_owner(settings)
        recording = settings.recording
        self.scanner = RevisionScanner(store, run.id, self.workspace.root,
                                       recording.revision_exclude, recording.revision_max_bytes,
                                       recording.revision_run_max_bytes)
        self.log = run_logger(run.id, self.dir / "run.log")
        self.clock: ClockT = clock
        self.grading: GradingHook = grading
        self.sandbox = RunSandbox(settings, store.identity, run.id, self.dir,
                                  self.workspace.root, self.workspace.readonly_names,
                                  run.backend, run.config, clock, self.log, hidden_paths)
        self.job_logs = JobLogs(store, run.id, self.sandbox.job_logs_dir,
                                recording.job_log_keep_bytes, recording.job_log_run_keep_bytes)
        self.settle_lock = threading.Lock()
        self.watcher = OnDemandThread(f"a2rl-jobs-{run.id}")
        self.gpu = GpuUsage()
        self.gpu_sampler = OnDemandThread(f"a2rl-gpu-{run.id}")

    def run(self) -> Run:
        with self.store.session() as s:
            run = s.get(Run, self.run_id)
            assert run is not None
            return run


@dataclass
class CallContext:
    runtime: RunRuntime[Any]
    tool_call_id: int
    #: the run's share of worker threads (`A2RLServer`): None outside a server (the default)
    limiter: anyio.CapacityLimiter | None = None
    #: its share for waiting on jobs, apart: its own waits never hold up its other calls
    wait_limiter: anyio.CapacityLimiter | None = None


async def in_thread(fn: Callable[..., T], *args: Any, waiting: bool = False) -> T:
    """Run blocking tool work in a worker thread counted against the current run's limiter
    (`waiting`: the one for waits on a job).

    Why: anyio's default pool is shared by every run a server serves (40 threads); one run's
    agent with 40 long `job_status(wait_s=60)` calls would hold them all and every other run
    would wait. Each run gets `server.max_run_threads` for its work and as many for its waits; the
    default pool stays for the recording."""
    call = current()
    limiter = call.wait_limiter if waiting else call.limiter
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)


_current: contextvars.ContextVar[CallContext] = contextvars.ContextVar("a2rl_call")


def current() -> CallContext:
    try:
        return _current.get()
    except LookupError:
        raise ToolError("no run is bound to this call") from None


def bind(ctx: CallContext) -> contextvars.Token[CallContext]:
    return _current.set(ctx)


def unbind(token: contextvars.Token[CallContext]) -> None:
    _current.reset(token)
