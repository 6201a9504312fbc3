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
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from a2rl.layout import LEGACY_READONLY_INPUTS
from a2rl.registry import RegistryError, UnknownName
from a2rl.sandbox import volume
from a2rl.sandbox.base import BackendConfig, Sandbox, SandboxError, SandboxSpec, thread_env
from a2rl.sandbox.registry import BACKENDS, backend_config, create_sandbox
from a2rl.settings import Settings
from a2rl.store import Run, Store

from .gpu_usage import GpuUsage
from .paths import Workspace
from .revisions import RevisionScanner
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


def make_sandbox(backend: str, spec: SandboxSpec, config: BackendConfig | None = None) -> Sandbox:
    """The run's sandbox, from the backend registry (`sandbox/registry.py`)."""
    try:
        return create_sandbox(backend, spec, config)
    except UnknownName:
        raise ToolError(f"unknown sandbox backend {backend!r}: use "
                        f"{' or '.join(BACKENDS.names())}") from None
    except RegistryError as exc:
        raise ToolError(str(exc)) from None


def sandbox_owner(settings: Settings) -> tuple[int, int] | None:
    """Who must own files we write in a workspace: the sandbox user when we are root (jobs run
    as that user on both backends), else nobody else (jobs share our user)."""
    if os.geteuid() == 0:
        return settings.sandbox_uid, settings.sandbox_uid
    return None


class RunRuntime(Generic[ClockT]):
    def __init__(self, settings: Settings, store: Store, run: Run, *, clock: ClockT,
                 grading: GradingHook,
                 hidden_paths: Callable[[], list[Path]] = list) -> None:
        """`clock` is the run's clock; `grading` is where submissions go (the serving
        process's grading pump, or the queue alone for a runtime built outside a server);
        `hidden_paths` names the host paths that carry any task's hidden items, asked at each
        sandbox start (the tasks know them; the tools import no task)."""
        self.settings, self.store, self.run_id = settings, store, run.id
        self.dir = run_dir(run)
        if run.ended_at is None and run.config.setup.disk_volume:
            volume.remount(self.dir, Path(run.workspace))  # before anything opens it
        readonly = readonly_inputs(run)
        self.workspace = Workspace(Path(run.workspace), readonly)
        self.readonly = readonly
        self.backend = run.backend
        self.config = run.config
        self.owner = sandbox_owner(settings)
        # Job logs: written by the supervisor only, outside the workspace; jobs see them
        # read-only, and `logs/<job>.log` names them for the agent (see jobs.log_file_of).
        self.job_logs_dir = self.dir / "control" / "joblogs"
        self.scanner = RevisionScanner(store, run.id, self.workspace.root,
                                       settings.revision_exclude, settings.revision_max_bytes,
                                       settings.revision_run_max_bytes)
        self.log = run_logger(run.id, self.dir / "run.log")
        self.clock: ClockT = clock
        self.grading: GradingHook = grading
        self.hidden_paths = hidden_paths
        self._sandbox: Sandbox | None = None
        self._pushed: float | None = None  # the deadline this process last gave the sandbox
        self._lock = threading.Lock()
        # Job log bytes this run stored (`jobs.keep_log`), loaded from the store on first use.
        self.log_lock = threading.Lock()
        self.log_bytes_kept: int | None = None
        # Jobs' ends (`jobs.settle`, one at a time) and the thread that records them as they
        # happen (`jobs.watch`).
        self.settle_lock = threading.Lock()
        self.watch_lock = threading.Lock()
        self.watcher: threading.Thread | None = None
        # The jobs' GPU use, sampled while they run (`gpu_usage.track`), read as they settle.
        self.gpu = GpuUsage()
        self.gpu_sampler: threading.Thread | None = None

    def run(self) -> Run:
        with self.store.session() as s:
            run = s.get(Run, self.run_id)
            assert run is not None
            return run

    def has_sandbox(self) -> bool:
        """Whether a supervisor was ever started for this run (by any process)."""
        return self._sandbox is not None or (self.dir / "control" / "token").exists()

    def sandbox_spec(self) -> SandboxSpec:
        """The run's sandbox as this process would build it now: the clock's deadline and the
        settings' limits every backend shares (the backend's own: `sandbox_config`)."""
        # the venv first: its bin/ leads PATH inside the sandbox
        prefixes = list(dict.fromkeys([Path(sys.prefix).resolve(),
                                       Path(sys.base_prefix).resolve()]))
        st = self.settings
        return SandboxSpec(
            run_id=self.run_id, store_id=self.store.identity,
            workspace=self.workspace.root,
            readonly_paths=self.readonly, control_dir=self.dir / "control",
            services_dir=self.dir / "services",
            deadline=self.clock.deadline_ts(),
            network=self.config.network,
            require_isolation=not self.config.setup.allow_unisolated,
            python_prefixes=list(prefixes), job_logs_dir=self.job_logs_dir,
            masked_paths=self.hidden_paths(),
            # the run's seed, as TASK.md's rules tell agents to read it (a replay's differs)
            env={**thread_env(), "A2RL_SEED": str(self.config.job_seed())},
            uid=st.sandbox_uid, gid=st.sandbox_uid, disk=st.sandbox_disk,
            file_size=st.sandbox_file_size, log_bytes=st.job_log_max_bytes,
        )

    def sandbox_config(self) -> BackendConfig:
        """The run's backend config: what the run fixed of it when it was made (a container's
        image and limits), else the settings as they are now."""
        try:
            return backend_config(self.backend, self.settings, self.config.setup.sandbox)
        except RegistryError as exc:
            raise ToolError(str(exc)) from None

    def new_sandbox(self, spec: SandboxSpec | None = None) -> Sandbox:
        """A sandbox object for the run (not started): `spec` or the one built now."""
        return make_sandbox(self.backend, spec or self.sandbox_spec(), self.sandbox_config())

    def sandbox(self) -> Sandbox:
        """The run's sandbox, started (or reattached) on first use."""
        with self._lock:
            if self._sandbox is None:
                spec = self.sandbox_spec()
                spec.control_dir.mkdir(parents=True, exist_ok=True)
                spec.services_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                sandbox = self.new_sandbox(spec)
                try:
                    sandbox.start()
                except Exception as exc:
                    raise ToolError(f"the sandbox could not start: {exc}") from exc
                if not sandbox.isolated:
                    self.log.warning("commands run WITHOUT isolation (bubblewrap not found)")
                self._sandbox, self._pushed = sandbox, spec.deadline
            return self._sandbox

    def started_sandbox(self) -> Sandbox | None:
        """The sandbox this process started or reattached, if any (never starts one)."""
        return self._sandbox

    def deadline_is_stale(self, deadline: float) -> bool:
        """Whether this process's sandbox of the run last heard of another deadline than
        `deadline` (the clock's): a paused grading clock moved it, graded by a process that
        could not reach the supervisor (another node of a fleet, say). Cheap: no store, no
        socket, so every tool call can ask."""
        return self._sandbox is not None and self._pushed != deadline

    def push_deadline(self, deadline: float) -> bool:
        """Hand `deadline` (the clock's, a UNIX time) to the run's supervisor: through this
        process's sandbox, else by attaching to the one another process started (never
        starting one). Returns whether a supervisor took it."""
        with self._lock:
            sandbox = self._sandbox
        if sandbox is None:
            if not self.has_sandbox():
                return False
            try:
                sandbox = self.new_sandbox()
                if not sandbox.attach():
                    return False
            except (ToolError, SandboxError, OSError) as exc:
                self.log.warning("cannot reach the sandbox to move its deadline: %s", exc)
                return False
        try:
            sandbox.set_deadline(deadline)
        except SandboxError as exc:
            self.log.warning("the sandbox did not take its moved deadline: %s", exc)
            return False
        self._pushed = deadline
        self.log.info("sandbox deadline moved to %s", datetime.fromtimestamp(deadline, UTC))
        return True


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
    would wait. Each run gets `max_run_threads` for its work and as many for its waits; the
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
