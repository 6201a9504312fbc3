"""The `docker` backend: one container per run, the same supervisor inside.

The container's main process (pid 1) is the sandbox supervisor (the stdlib-only
`supervisor/`), so jobs, kills, deadlines, limits and reattachment work exactly as on the local
backend, through the same client (`client.py`), over a unix socket the supervisor binds in
`control_dir/sock/` (mounted at a fixed path only container root can reach; the token stays on
the host). Only what the container engine does is here. The supervisor runs as container
root with only the capabilities it needs (switch user, signal and read its jobs' /proc, write
its own folders) and no-new-privileges; every job drops to the sandbox user with no capability.
The container is otherwise hardened: a read-only root filesystem with a private /tmp, pids and
memory limits, no network unless asked, and only the environment the sandbox needs. GPUs are
given by a device request, never shared between two running sandboxes unless `share_gpus`.
What a run's container is (`DockerConfig`: image, GPUs, limits) is fixed when the run is made,
from the backend's section (`[sandbox.docker]`, `DockerSettings`) and the run's choices, so a
restarted server rebuilds the same one.

The run's folders are mounted at fixed container paths (`/workspace`, `/a2rl/...`), so no
component of the host path (a 0700 home, say) must be traversable by the sandbox user. Job
logs are written by the supervisor into `/a2rl/joblogs` (read-only to jobs) and linked from
`/workspace/logs/<job>.log`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from a2rl.sections import Section
from a2rl.settings import Settings
from a2rl.units import Size

from .base import (
    BackendConfig,
    SandboxChoices,
    SandboxError,
    SandboxSpec,
    give_workspace,
    open_readonly_inputs,
)
from .cgroup import SUPERVISOR_RESERVE
from .client import (
    LOGS_INSIDE,
    SOCKET_NAME,
    START_TIMEOUT,
    SUPERVISOR_INSIDE,
    SUPERVISOR_PATH,
    SupervisedSandbox,
    sandbox_env,
    supervisor_args,
    supervisor_caps,
)

log = logging.getLogger(__name__)

LABEL_RUN = "a2rl.run"
LABEL_GPUS = "a2rl.gpus"
LABEL_MANAGED = "a2rl.managed"
LABEL_STORE = "a2rl.store"  # Store.identity: which store's run the container serves
CONTAINER_PATH = "/usr/local/bin:/usr/bin:/bin"
WORKSPACE_INSIDE = "/workspace"
CONTROL_INSIDE = "/a2rl/control"  # the supervisor's socket; root-only
SERVICES_INSIDE = "/a2rl/services"
# Capabilities the supervisor keeps (jobs keep none): switch to the sandbox user, signal and
# read the /proc of its jobs, give its socket to the server's user, write its folders; and
# SYS_RESOURCE where the host has it (client.supervisor_caps).
SUPERVISOR_CAPS = ["SETUID", "SETGID", "KILL", "SYS_PTRACE", "CHOWN", "DAC_OVERRIDE", "FOWNER"]


class DockerSettings(Section, place="sandbox.docker"):
    """`[sandbox.docker]`: the docker backend (one container per run)."""

    image: str = Field("", description="sandbox image; default: the task's, else the offline "
                       "test image when only that one is built")
    memory: Size = Field("16g", description="memory limit of a run's container")
    pids_limit: int = Field(4096, ge=0, description="process limit of a run's container")
    cpus: float = Field(0.0, ge=0, description="CPU limit of a run's container (0: none)")
    shm_size: Size = Field("2g", description="/dev/shm size of a run's container")


class DockerConfig(BackendConfig):
    """A run's container, fixed when the run is made (`DockerSandbox.run_options`) and stored
    with it, so that its restarts after a server's build the same container."""

    image: str = ""  # the sandbox image ("": refused when the sandbox is built)
    gpus: list[str] = Field(default_factory=list)  # host device ids, e.g. ["0", "1"]
    share_gpus: bool = False  # allow a GPU another running sandbox holds
    cpus: float | None = None
    shm_size: str = "2g"
    keep_container: bool = False  # a finished run's container is stopped, not removed

    @classmethod
    def from_settings(cls, settings: Settings, choices: SandboxChoices | None = None,
                      image: str | None = None) -> DockerConfig:
        """From `[sandbox.docker]` and the run's choices; `image` as resolved
        (`resolve_image`), else the setting as is."""
        choices = choices or SandboxChoices()
        ours = settings.sandbox.section(DockerSettings)
        return cls(image=ours.image if image is None else image,
                   gpus=choices.gpus, share_gpus=choices.share_gpus,
                   keep_container=choices.keep_container, memory=ours.memory,
                   pids_limit=ours.pids_limit, cpus=ours.cpus or None, shm_size=ours.shm_size)


def docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a dependency of a2rl-bench[docker]
        raise SandboxError("the docker backend needs the `docker` package") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise SandboxError(f"no Docker engine answers ({exc}); start dockerd or use "
                           "--backend local") from None
    return client


TEST_IMAGE = "a2rl-sandbox-test:latest"  # docker/build-test-image.sh, for offline machines


def resolve_image(configured: str, task_image: str) -> str:
    """The image a run uses: the setting, else the task's, else the offline test image."""
    if configured:
        return configured
    client = docker_client()
    for name in (task_image, f"{task_image}:latest", TEST_IMAGE):
        with contextlib.suppress(Exception):
            client.images.get(name)
            return name
    raise SandboxError(f"no sandbox image: build {task_image!r} with `make image`, or the "
                       "offline test image with docker/build-test-image.sh")


def container_name(run_id: str) -> str:
    return f"a2rl-{run_id}"


def gpus_in_use(client: Any, exclude_run: str | None = None) -> dict[str, str]:
    """Host GPU id -> run id, for every running a2rl container."""
    used: dict[str, str] = {}
    for c in client.containers.list(filters={"label": LABEL_MANAGED}):
        run = c.labels.get(LABEL_RUN, "")
        if run == exclude_run:
            continue
        for gpu in filter(None, c.labels.get(LABEL_GPUS, "").split(",")):
            used[gpu] = run
    return used


def oom_file_inside() -> str:
    """The container's own OOM counter, as the container sees its cgroup."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "/sys/fs/cgroup/memory.events"
    return "/sys/fs/cgroup/memory/memory.oom_control"


def container_config(spec: SandboxSpec, config: DockerConfig, token: str) -> dict[str, Any]:
    """Keyword arguments of `containers.run` for this spec (pure: tested without an engine)."""
    from docker.types import DeviceRequest, Mount

    ws = WORKSPACE_INSIDE
    env = {**sandbox_env(spec, home=ws, path=CONTAINER_PATH), "A2RL_SUPERVISOR_TOKEN": token}
    mounts = [Mount(SUPERVISOR_INSIDE, str(SUPERVISOR_PATH), type="bind", read_only=True),
              Mount(ws, str(spec.workspace), type="bind")]
    # Docker takes names only: each input is checked first (no symlink on the way, inside the
    # workspace); no process of the run is left to swap it when a container is made.
    readonly = open_readonly_inputs(spec)
    for fd in readonly.values():
        os.close(fd)
    mounts += [Mount(f"{ws}/{rel}", str(spec.workspace / rel), type="bind", read_only=True)
               for rel in readonly]
    mounts += [Mount(LOGS_INSIDE, str(spec.logs_dir), type="bind"),
               Mount(CONTROL_INSIDE, str(spec.control_dir / "sock"), type="bind")]
    if spec.services_dir is not None:
        mounts.append(Mount(SERVICES_INSIDE, str(spec.services_dir), type="bind"))
        env["A2RL_SERVICES_DIR"] = SERVICES_INSIDE
    args = supervisor_args(spec, config)
    args[args.index("--workspace") + 1] = ws
    run: dict[str, Any] = {
        "image": config.image,
        "command": ["python3", "-I", SUPERVISOR_INSIDE,
                    "--socket", f"{CONTROL_INSIDE}/{SOCKET_NAME}",
                    "--socket-owner", f"{os.getuid()}:{os.getgid()}",
                    "--logs-dir", LOGS_INSIDE, "--logs-view", LOGS_INSIDE,
                    "--oom-file", oom_file_inside(), *args],
        "name": container_name(spec.run_id),
        "labels": {LABEL_MANAGED: "1", LABEL_RUN: spec.run_id, LABEL_STORE: spec.store_id,
                   LABEL_GPUS: ",".join(config.gpus)},
        "user": "0:0",  # the supervisor; each job drops to the sandbox user
        "working_dir": ws,
        "environment": env,
        "mounts": mounts,
        "network_mode": "bridge" if spec.network else "none",
        "cap_drop": ["ALL"],
        "cap_add": list(dict.fromkeys(SUPERVISOR_CAPS + supervisor_caps(prefix=""))),
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=4g"},
        # the supervisor's own threads count too; the supervisor ends a job at pids_limit
        "pids_limit": config.pids_limit + SUPERVISOR_RESERVE,
        "mem_limit": config.memory,
        "memswap_limit": config.memory,  # no swap: a memory hog is killed, not slowed to a crawl
        "shm_size": config.shm_size,
        "detach": True,
    }
    if config.cpus:
        run["nano_cpus"] = int(config.cpus * 1e9)
    if config.gpus:
        run["device_requests"] = [DeviceRequest(device_ids=list(config.gpus),
                                                capabilities=[["gpu"]])]
        # the container sees its devices renumbered from 0
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(config.gpus)))
    return run


class DockerSandbox(SupervisedSandbox):
    """A run's container; the supervisor protocol and job handling are the shared client's."""

    config_type = DockerConfig
    settings_section = DockerSettings
    config: DockerConfig

    def __init__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> None:
        super().__init__(spec, config)
        if not self.config.image:
            raise SandboxError("the docker backend needs an image (setting sandbox.docker.image)")
        self._engine: Any = None

    @classmethod
    def run_options(cls, settings: Settings, choices: SandboxChoices) -> dict[str, Any]:
        """The container, fixed now: the image resolved (the setting, the task's, the test
        image), the `[sandbox.docker]` limits and the run's GPUs."""
        image = resolve_image(settings.sandbox.section(DockerSettings).image, choices.task_image)
        return DockerConfig.from_settings(settings, choices, image).model_dump()

    @classmethod
    def clean_up(cls, live_runs: set[str], store_id: str) -> dict[str, list[str]]:
        return adopt_containers(live_runs, store_id)

    @property
    def engine(self) -> Any:
        if self._engine is None:
            self._engine = docker_client()
        return self._engine

    @property
    def isolated(self) -> bool:
        return True

    @property
    def workspace_inside(self) -> str:
        return WORKSPACE_INSIDE

    def container(self) -> Any | None:
        import docker

        try:
            return self.engine.containers.get(container_name(self.spec.run_id))
        except docker.errors.NotFound:
            return None

    def _launch(self) -> None:
        spec, config = self.spec, self.config
        self._check_deadline()
        old = self.container()
        if old is not None:
            old.remove(force=True)  # its supervisor no longer answers
        if config.gpus and not config.share_gpus:
            taken = {g: r for g, r in gpus_in_use(self.engine, spec.run_id).items()
                     if g in config.gpus}
            if taken:
                raise SandboxError(f"GPU(s) {sorted(taken)} are held by run(s) "
                                   f"{sorted(set(taken.values()))}; pick others or share")
        give_workspace(spec)  # the jobs' user writes it; the socket and log folders stay root's
        token = self.client.new_token()
        with contextlib.suppress(FileNotFoundError):
            self.client.socket_path.unlink()
        try:
            self.engine.containers.run(**container_config(spec, config, token))
        except Exception as exc:
            raise SandboxError(f"the container could not start: {exc}") from None
        end = time.monotonic() + START_TIMEOUT
        while True:
            try:
                self.client.call("ping", timeout=1.0)
                return
            except SandboxError:
                c = self.container()
                if c is None or c.status == "exited" or time.monotonic() > end:
                    logs = c.logs(tail=30).decode(errors="replace") if c is not None else ""
                    raise SandboxError(f"the sandbox container did not answer:\n{logs}") from None
            time.sleep(0.05)

    def gone_cause(self) -> tuple[str, str] | None:
        c = self.container()
        evidence = container_oom_evidence(c) if c is not None else None
        return ("out_of_memory", evidence) if evidence else None

    def supervisor_host_pid(self) -> int | None:
        """The container's init, the supervisor, as the engine's host sees it (`State.Pid`;
        0 once it stopped)."""
        c = self.container()
        pid = ((getattr(c, "attrs", None) or {}).get("State") or {}).get("Pid")
        return pid if isinstance(pid, int) and pid > 0 else None

    def _force_stop(self) -> None:
        c = self.container()
        if c is not None:
            if self.config.keep_container:
                with contextlib.suppress(Exception):
                    c.stop(timeout=5)
            else:
                c.remove(force=True)
        with contextlib.suppress(FileNotFoundError):
            self.client.socket_path.unlink()


def container_oom_evidence(container: Any) -> str | None:
    """The engine's word that the kernel's OOM killer struck the container (its init, the
    supervisor, with it), from `State.OOMKilled`; None otherwise."""
    with contextlib.suppress(Exception):
        container.reload()
    state = (getattr(container, "attrs", None) or {}).get("State") or {}
    if not state.get("OOMKilled"):
        return None
    return (f"docker: the container's State.OOMKilled is true (status {state.get('Status')}, "
            f"exit code {state.get('ExitCode')})")


def adopt_containers(live_runs: set[str], store_id: str) -> dict[str, list[str]]:
    """At server start: keep the containers of this store's live runs (their jobs go on) and
    remove this store's others. Another store's containers on the same engine are not ours to
    judge: its runs are unknown here, live or not."""
    try:
        client = docker_client()
    except SandboxError:
        return {"kept": [], "removed": []}
    kept, removed = [], []
    mine = [LABEL_MANAGED, f"{LABEL_STORE}={store_id}"]
    for c in client.containers.list(all=True, filters={"label": mine}):
        run = c.labels.get(LABEL_RUN, "")
        if run in live_runs and c.status == "running":
            kept.append(run)
        else:
            c.remove(force=True)
            removed.append(run)
    return {"kept": kept, "removed": removed}
