"""The run's sandbox as one serving process holds it: built from the run's record and the
clock's deadline, started (or reattached) once, and told when the deadline moves.

Why a part of its own: the sandbox is the one slow, stateful thing a run's tools share (a
container, or a bubblewrap supervisor with the run's jobs as its children); every call of
the run in this process uses the one this process started or reattached, under one lock, and
the deadline it last handed the supervisor belongs with it (`deadline_is_stale`). The spec
it is built from is the run's (its backend, what the backend fixed when the run was made,
read-only inputs, seed) with the settings' limits every backend shares.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from a2rl.registry import RegistryError, UnknownName
from a2rl.sandbox.base import BackendConfig, Sandbox, SandboxError, SandboxSpec, thread_env
from a2rl.sandbox.registry import BACKENDS, backend_config, create_sandbox
from a2rl.settings import Settings
from a2rl.store import RunConfig

from .seam import RunClockView


def make_sandbox(backend: str, spec: SandboxSpec, config: BackendConfig | None = None) -> Sandbox:
    """The run's sandbox, from the backend registry (`sandbox/registry.py`)."""
    try:
        return create_sandbox(backend, spec, config)
    except UnknownName:
        raise ToolError(f"unknown sandbox backend {backend!r}: use "
                        f"{' or '.join(BACKENDS.names())}") from None
    except RegistryError as exc:
        raise ToolError(str(exc)) from None


class RunSandbox:
    """One run's sandbox in this process: started or reattached on first use."""

    def __init__(self, settings: Settings, store_id: str, run_id: str, run_dir: Path,
                 workspace: Path, readonly: list[str], backend: str, config: RunConfig,
                 clock: RunClockView, log: logging.Logger,
                 hidden_paths: Callable[[], list[Path]] = list) -> None:
        """`clock` gives the deadline the sandbox enforces; `hidden_paths` names the host
        paths that carry any task's hidden items, asked at each start (the tasks know them;
        the tools import no task)."""
        self.settings, self.store_id, self.run_id = settings, store_id, run_id
        self.dir, self.workspace, self.readonly = run_dir, workspace, readonly
        self.backend, self.config = backend, config
        self.clock, self.log, self.hidden_paths = clock, log, hidden_paths
        # Job logs: written by the supervisor only, outside the workspace; jobs see them
        # read-only (`a2rl.tools.job_logs`).
        self.job_logs_dir = run_dir / "control" / "joblogs"
        self._sandbox: Sandbox | None = None
        self._pushed: float | None = None  # the deadline this process last gave the sandbox
        self._lock = threading.Lock()

    def ever_started(self) -> bool:
        """Whether a supervisor was ever started for this run (by any process)."""
        return self._sandbox is not None or (self.dir / "control" / "token").exists()

    def spec(self) -> SandboxSpec:
        """The run's sandbox as this process would build it now: the clock's deadline and the
        settings' limits every backend shares (the backend's own: `backend_config`)."""
        # the venv first: its bin/ leads PATH inside the sandbox
        prefixes = list(dict.fromkeys([Path(sys.prefix).resolve(),
                                       Path(sys.base_prefix).resolve()]))
        st = self.settings
        return SandboxSpec(
            run_id=self.run_id, store_id=self.store_id, workspace=self.workspace,
            readonly_paths=self.readonly, control_dir=self.dir / "control",
            services_dir=self.dir / "services",
            deadline=self.clock.deadline_ts(),
            network=self.config.network,
            require_isolation=not self.config.setup.allow_unisolated,
            python_prefixes=list(prefixes), job_logs_dir=self.job_logs_dir,
            masked_paths=self.hidden_paths(),
            # the run's seed, as TASK.md's rules tell agents to read it (a replay's differs)
            env={**thread_env(), "A2RL_SEED": str(self.config.job_seed())},
            uid=st.sandbox.uid, gid=st.sandbox.uid, disk=st.sandbox.disk,
            file_size=st.sandbox.file_size, log_bytes=st.sandbox.job_log_max_bytes,
        )

    def backend_config(self) -> BackendConfig:
        """The run's backend config: what the run fixed of it when it was made (a container's
        image and limits), else the settings as they are now."""
        try:
            return backend_config(self.backend, self.settings, self.config.setup.sandbox)
        except RegistryError as exc:
            raise ToolError(str(exc)) from None

    def build(self, spec: SandboxSpec | None = None) -> Sandbox:
        """A sandbox object for the run (not started): `spec` or the one built now."""
        return make_sandbox(self.backend, spec or self.spec(), self.backend_config())

    def get(self) -> Sandbox:
        """The run's sandbox, started (or reattached) on first use."""
        with self._lock:
            if self._sandbox is None:
                spec = self.spec()
                spec.control_dir.mkdir(parents=True, exist_ok=True)
                spec.services_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                sandbox = self.build(spec)
                try:
                    sandbox.start()
                except Exception as exc:
                    raise ToolError(f"the sandbox could not start: {exc}") from exc
                if not sandbox.isolated:
                    self.log.warning("commands run WITHOUT isolation (bubblewrap not found)")
                self._sandbox, self._pushed = sandbox, spec.deadline
            return self._sandbox

    def started(self) -> Sandbox | None:
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
            if not self.ever_started():
                return False
            try:
                sandbox = self.build()
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
