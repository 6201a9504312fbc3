"""The sandbox seam: where an agent's commands run.

A run has one long-lived *supervisor* (a bubblewrap process or a container) started detached
from any MCP server. Every command is a job of that supervisor, never a child of the server:
a server that stops or restarts leaves the jobs running, and a new server reattaches to the
supervisor and finds them. Each job's output goes to a log the supervisor writes in a folder
only it can write (`job_logs_dir`, outside the workspace, shown read-only to jobs and linked
from `logs/<job>.log`); the tools layer reads it by head and tail and bounds it, so that
truncation is decided in one place for every backend.

Methods are synchronous (the tools layer calls them from a worker thread) and raise
`SandboxError` with a message fit for the agent when something goes wrong.

Here: what every backend is told (`SandboxSpec`), the base of each backend's own config
(`BackendConfig`), what a run's maker chooses (`SandboxChoices`) and the shapes the rest of
a2rl sees (`Sandbox`, `SandboxBackend`). The supervisor's client and the base class of every
backend are in client.py; the backends (local.py, docker.py) are siblings found by name in
registry.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from a2rl.sections import Section
from a2rl.settings import Settings
from a2rl.store.status import JobState  # a job's state is stored: defined with the store's

log = logging.getLogger(__name__)


class SandboxError(RuntimeError):
    """A sandbox operation failed; the message is shown to the agent as is."""


class SandboxJob(BaseModel):
    job_id: str
    command: str
    state: JobState
    exit_code: int | None = None
    pid: int | None = None
    # its shim's pid in the sandbox's namespace: every process of the job descends from it
    # (the GPU sampler finds a GPU process's job by it); None from an older supervisor
    shim: int | None = None
    started_at: float  # epoch seconds
    ended_at: float | None = None
    log_path: str  # as the agent sees it, relative to the workspace: logs/<job_id>.log
    reason: str = ""  # why a limit ended it ("killed: memory limit 2g reached"), else empty
    # why it ended (a `JobEndCause` value, decided by the supervisor) and one line showing it;
    # empty while it runs, or from a supervisor of an older version
    cause: str = ""
    evidence: str = ""
    # what its processes used, once it ended (the cost ledger): CPU seconds of its whole tree
    # and the peak resident memory of its largest process; None from an older supervisor
    cpu_s: float | None = None
    memory_peak_bytes: int | None = None


# How many threads numeric libraries start (OpenMP, MKL, OpenBLAS). A sandbox's environment is
# an allow-list, so an operator's choice here would not reach the jobs; these pass through.
# Runs sharing a machine need it: two trainings whose OpenMP threads spin on the same cores
# ran eight times slower here than with one thread each.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's thread-count variables that are set, for the jobs' environment."""
    source = os.environ if environ is None else environ
    return {k: source[k] for k in THREAD_VARS if source.get(k, "").isdigit()}


class SandboxSpec(BaseModel):
    """What a backend needs to know to build one run's sandbox."""

    run_id: str
    # The store the run belongs to (`Store.identity`): a backend whose sandboxes outlive the
    # server labels them with it, so that a server never adopts another store's.
    store_id: str = ""
    workspace: Path  # read-write, the working directory; seen at the same path inside
    readonly_paths: list[str] = Field(default_factory=list)  # workspace-relative inputs
    control_dir: Path  # host-only folder for the supervisor's socket, token and log
    services_dir: Path | None = None  # per-run unix sockets, mounted read-write when given
    deadline: float  # epoch seconds: every job is stopped then, and the supervisor exits
    env: dict[str, str] = Field(default_factory=dict)  # extra variables a task allows
    network: bool = False
    require_isolation: bool = True  # refuse to run unisolated (local without bubblewrap)
    python_prefixes: list[Path] = Field(default_factory=list)  # Python envs to show read-only
    # Host files and folders that carry a task's hidden items (`a2rl.tasks.hidden_data`): a
    # backend that shows host paths masks those it would show (every task's, in every run).
    masked_paths: list[Path] = Field(default_factory=list)
    # Where job logs are written; jobs see them read-only (linked from logs/<job>.log). Default:
    # control_dir/joblogs, host-only.
    job_logs_dir: Path | None = None
    # The jobs' user when the server runs as root (ignored otherwise: jobs then share the
    # server's user, and the walls rest on the namespaces).
    uid: int = 61000
    gid: int = 61000
    # Limits every backend enforces with the same settings ("0": none); the memory and process
    # limits are each backend's own (`BackendConfig`).
    disk: str = "0"  # bytes the workspace may take (a watch of the supervisor)
    file_size: str = "0"  # the largest file a job may write (RLIMIT_FSIZE)
    log_bytes: str = "0"  # output bytes kept per job; more ends the job (log flood)

    @property
    def logs_dir(self) -> Path:
        return self.job_logs_dir or self.control_dir / "joblogs"

    def job_user(self) -> tuple[int, int]:
        """Who jobs run as: the sandbox user when we are root, else our own user (an
        unprivileged user namespace can map no other)."""
        if os.geteuid() == 0:
            return self.uid, self.gid
        return os.getuid(), os.getgid()


class BackendConfig(BaseModel):
    """A backend's own settings for one run, beside the `SandboxSpec` every backend shares.

    Each backend subclasses it with its fields (a container's image, GPUs, ...) and builds it
    from its own section of the settings (`[sandbox.docker]`: `settings.sandbox.section(
    DockerSettings)`), so no other backend sees them. The memory and process limits
    are here, not in the spec: each backend has its own settings for them."""

    memory: str = "16g"  # the jobs' memory together ("0": none)
    pids_limit: int = 4096  # the jobs' processes and threads together (0: none)

    @classmethod
    def from_settings(cls, settings: Settings) -> BackendConfig:
        """This backend's config from the settings as they are now (default: its defaults)."""
        del settings
        return cls()


class SandboxChoices(BaseModel):
    """What a run's maker chooses of its sandbox beside the settings (`create_run`'s options):
    each backend takes what it supports into the options it fixes (`run_options`) and
    ignores the rest."""

    task_image: str = ""  # the task's own sandbox image (`TaskSpec.sandbox_image`)
    gpus: list[str] = Field(default_factory=list)  # host device ids, e.g. ["0", "1"]
    share_gpus: bool = False  # allow a GPU another running sandbox holds
    keep_container: bool = False  # keep a finished run's container (stopped), to inspect it


CAP_SYS_RESOURCE = 24


def host_has_cap(number: int) -> bool:
    """Whether this process's capability bounding set holds capability `number`: what a
    sandbox started from here (bubblewrap, or a container engine on this host) can be given."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapBnd:"):
                    return bool(int(line.split()[1], 16) >> number & 1)
    except (OSError, ValueError):
        pass
    return False


def open_readonly_inputs(spec: SandboxSpec) -> dict[str, int]:
    """An O_PATH descriptor on each read-only input that is a real folder or file inside the
    workspace: rel -> fd (the caller closes them).

    Why: the workspace is the agent's, and a declared input it could create itself (one the
    task left empty) or rename may be a symlink by the time a sandbox is (re)started; bound by
    name, `env -> /` would show the host's root inside. So each is opened from a handle on the
    workspace (`workspace_fs`: no symlink anywhere on the way, nothing outside) and bound from
    that descriptor, or, where the backend takes names only, by the name just checked: at a
    (re)start no process of the run is left to swap it. Anything else is not mounted (and
    logged): the sandbox then shows whatever the agent put there, which leads nowhere new."""
    from .workspace_fs import WorkspaceError, WorkspaceFS, kind_of, split_path

    fs = WorkspaceFS(spec.workspace)
    found: dict[str, int] = {}
    for rel in spec.readonly_paths:
        try:
            parts = split_path(rel)
            fd = fs.open(parts, os.O_PATH)
        except FileNotFoundError:
            log.warning("read-only input %s does not exist; nothing to protect", rel)
            continue
        except (OSError, WorkspaceError) as exc:
            log.warning("read-only input %s is not mounted: %s", rel, exc)
            continue
        mode = os.fstat(fd).st_mode
        if not parts or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            os.close(fd)
            log.warning("read-only input %s is a %s, not mounted", rel, kind_of(mode))
            continue
        found[rel] = fd
    return found


def give_workspace(spec: SandboxSpec) -> None:
    """Make the workspace's writable tree the jobs' user's, without following a link.

    os.fwalk holds each folder open and chown acts on a name inside it, so a job that swaps a
    folder for a symlink meanwhile makes us chown the link itself, never its target."""
    uid, gid = spec.job_user()
    if (uid, gid) == (os.getuid(), os.getgid()):
        return
    skip = set(spec.readonly_paths)
    root_fd = os.open(spec.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(root_fd, uid, gid)
        for top, dirs, files, dir_fd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
            if top == ".":
                dirs[:] = [d for d in dirs if d not in skip]
                files = [f for f in files if f not in skip]
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    finally:
        os.close(root_fd)


@runtime_checkable
class Sandbox(Protocol):
    spec: SandboxSpec

    @property
    def isolated(self) -> bool:
        """True when commands run in an isolating sandbox (bubblewrap, a container)."""
        ...

    def start(self) -> None:
        """Start the supervisor, or reattach to the one already running for this run (and
        hand it `spec.deadline`: the run's clock may have moved while nobody was attached)."""

    def attach(self) -> bool:
        """Reattach to the supervisor already running for this run, never starting one (a
        process that does not serve the run hands it a moved deadline this way); False when
        none answers."""

    def alive(self) -> bool:
        """Whether the supervisor answers."""
        ...

    def spawn(self, job_id: str, command: str, log_path: str | None = None) -> SandboxJob:
        """Run `command` with bash in the workspace as a new job.

        Its output goes to `<job_logs_dir>/<job_id>.log`, seen by the agent as the returned
        job's `log_path` (`logs/<job_id>.log`); `log_path` is accepted for older callers and
        ignored: a job never chooses where its log is written."""
        ...

    def wait(self, job_id: str, timeout: float) -> SandboxJob:
        """Wait up to `timeout` seconds for the job to end, then return its state."""
        ...

    def get(self, job_id: str) -> SandboxJob:
        """One job's state; `SandboxError` for an unknown id."""
        ...

    def list(self) -> list[SandboxJob]: ...

    def wait_any(self, job_ids: list[str], timeout: float) -> list[SandboxJob]:
        """Wait up to `timeout` seconds until one of the jobs ends (or the sandbox stops);
        their states then (unknown ids are left out)."""
        ...

    def kill(self, job_id: str, cause: str = "job_kill", evidence: str = "") -> SandboxJob:
        """Kill the job's whole process tree, daemonized descendants included; `cause` (a
        `JobEndCause` value) and `evidence` say who asked and why, kept as the job's cause."""
        ...

    def set_deadline(self, deadline: float) -> None:
        """Move the time at which every job is stopped."""

    def watch_access(self) -> None:
        """Make sure the run's access recorder (`access.py`) watches the jobs from now on;
        where it cannot, its journal says why. Never raises."""

    def supervisor_host_pid(self) -> int | None:
        """The supervisor's pid as this host sees it, while it runs (every process of the run
        descends from it: the GPU sampler walks up to it); None where it is not known."""
        ...

    def gone_cause(self) -> tuple[str, str] | None:
        """Why the supervisor no longer answers, where the backend has the kernel's word for
        it (a container's `State.OOMKilled`): a `JobEndCause` value and its evidence, for the
        jobs it took along; None when nothing is known."""
        ...

    def stop(self) -> None:
        """Kill every job and end the supervisor. Idempotent."""

    def release(self) -> None:
        """Remove what a supervisor that ended by itself (at the deadline) left: its
        cgroup, its container. Needs no live supervisor; idempotent."""


class SandboxBackend(Protocol):
    """What a backend's name resolves to in the registry (`registry.py`): the class of its
    sandboxes, with what the server asks of a backend without naming it."""

    config_type: type[BackendConfig]
    #: its own table of settings (`[sandbox.<name>]`), or None
    settings_section: type[Section] | None

    def __call__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> Sandbox: ...

    def config_for(self, settings: Settings, fixed: dict[str, Any]) -> BackendConfig:
        """The run's config: from what it fixed when it was made, else from `settings`."""
        ...

    def run_options(self, settings: Settings, choices: SandboxChoices) -> dict[str, Any]:
        """What a run fixes of this backend when it is made, stored with the run."""
        ...

    def clean_up(self, live_runs: set[str], store_id: str) -> dict[str, list[str]]:
        """At server start: keep what serves this store's live runs, remove the rest."""
        ...
