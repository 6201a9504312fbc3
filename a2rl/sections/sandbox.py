"""`[sandbox]`, `[sandbox.local]`, `[sandbox.docker]`: a run's sandbox (`a2rl.sandbox`), what
every backend applies, then one sub-section per backend (`sandbox/local.py`,
`sandbox/docker.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from a2rl.units import Size

from .base import NAME_PATTERN, Section


class LocalSettings(Section):
    """The local backend (bubblewrap and a cgroup)."""

    unsafe: bool = Field(False, description="allow the local backend without bubblewrap for "
                         "non-toy tasks")
    memory: Size = Field("32g", description="memory limit of a local run's jobs (a cgroup; "
                         "where none is writable, not limited)")
    pids_limit: int = Field(4096, ge=0, description="process limit of a local run's jobs "
                            "(0: none)")


class DockerSettings(Section):
    """The docker backend (one container per run)."""

    image: str = Field("", description="sandbox image; default: the task's, else the offline "
                       "test image when only that one is built")
    memory: Size = Field("16g", description="memory limit of a run's container")
    pids_limit: int = Field(4096, ge=0, description="process limit of a run's container")
    cpus: float = Field(0.0, ge=0, description="CPU limit of a run's container (0: none)")
    shm_size: Size = Field("2g", description="/dev/shm size of a run's container")


class SandboxSettings(Section):
    backend: str = Field(
        "local", pattern=NAME_PATTERN, description="default sandbox backend: local, docker, or "
        "one an installed package adds (entry point `a2rl.backends`); `a2rl create -h` lists them")
    uid: int = Field(61000, ge=0, description="user (and group) id jobs run as when the server "
                     "runs as root, on both backends; owns the workspace")
    disk: Size = Field("200g", description="bytes a run's workspace may take; the job writing "
                       "past it is ended (both backends)")
    disk_volume: Literal["auto", "off"] = Field(
        "auto", description="auto: when the server is root and has loop devices, each "
        "workspace is its own size-limited filesystem (sandbox.disk plus the task's inputs), so "
        "the kernel stops a write past the limit; off: the supervisor's watch alone")
    file_size: Size = Field("100g", description="largest file a job may write (RLIMIT_FSIZE, "
                            "both backends)")
    job_log_max_bytes: Size = Field("1g", description="output bytes one job may write to its "
                                    "log; more ends the job as a log flood")
    local: LocalSettings = Field(default_factory=LocalSettings)
    docker: DockerSettings = Field(default_factory=DockerSettings)
