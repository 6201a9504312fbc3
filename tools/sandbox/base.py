"""The sandbox seam: where an agent's commands run.

A run has one long-lived *supervisor* (a bubblewrap process or a container) started detached
from any MCP server. Every command is a job of that supervisor, never a child of the server:
a server that stops or restarts leaves the jobs running, and a new server reattaches to the
supervisor and finds them. Each job's output goes to a log file in the workspace; the tools
layer reads and bounds it, so that truncation is decided in one place for every backend.

Methods are synchronous (the tools layer calls them from a worker thread) and raise
`SandboxError` with a message fit for the agent when something goes wrong.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class SandboxError(RuntimeError):
    """A sandbox operation failed; the message is shown to the agent as is."""


class JobState(StrEnum):
    running = "running"
    exited = "exited"  # ended by itself; exit_code says how
    killed = "killed"  # by job_kill, a budget stop or the sandbox stopping
    timeout = "timeout"  # killed at the run's deadline
    lost = "lost"  # the supervisor that ran it is gone; its fate is unknown


class SandboxJob(BaseModel):
    job_id: str
    command: str
    state: JobState
    exit_code: int | None = None
    pid: int | None = None
    started_at: float  # epoch seconds
    ended_at: float | None = None
    log_path: str  # relative to the workspace


class SandboxSpec(BaseModel):
    """What a backend needs to know to build one run's sandbox."""

    run_id: str
    workspace: Path  # read-write, the working directory; seen at the same path inside
    readonly_paths: list[str] = Field(default_factory=list)  # workspace-relative inputs
    control_dir: Path  # host-only folder for the supervisor's socket, token and log
    services_dir: Path | None = None  # per-run unix sockets, mounted read-write when given
    deadline: float  # epoch seconds: every job is stopped then, and the supervisor exits
    env: dict[str, str] = Field(default_factory=dict)  # extra variables a task allows
    network: bool = False
    require_isolation: bool = True  # refuse to run unisolated (no bubblewrap) when True
    python_prefixes: list[Path] = Field(default_factory=list)  # Python envs to show read-only
    # Container backends only:
    image: str | None = None
    gpus: list[str] = Field(default_factory=list)  # host device ids, e.g. ["0", "1"]
    share_gpus: bool = False  # allow a GPU another running sandbox holds
    memory: str = "16g"
    pids_limit: int = 4096
    cpus: float | None = None
    shm_size: str = "2g"
    keep_container: bool = False


@runtime_checkable
class Sandbox(Protocol):
    spec: SandboxSpec

    @property
    def isolated(self) -> bool:
        """True when commands run in an isolating sandbox (bubblewrap, a container)."""
        ...

    def start(self) -> None:
        """Start the supervisor, or reattach to the one already running for this run."""

    def alive(self) -> bool:
        """Whether the supervisor answers."""
        ...

    def spawn(self, job_id: str, command: str, log_path: str) -> SandboxJob:
        """Run `command` with bash in the workspace as a new job; output goes to log_path."""
        ...

    def wait(self, job_id: str, timeout: float) -> SandboxJob:
        """Wait up to `timeout` seconds for the job to end, then return its state."""
        ...

    def get(self, job_id: str) -> SandboxJob:
        """One job's state; `SandboxError` for an unknown id."""
        ...

    def list(self) -> list[SandboxJob]: ...

    def kill(self, job_id: str) -> SandboxJob:
        """Kill the job's whole process tree, daemonized descendants included."""
        ...

    def set_deadline(self, deadline: float) -> None:
        """Move the time at which every job is stopped."""

    def stop(self) -> None:
        """Kill every job and end the supervisor. Idempotent."""
