"""`[sandbox]`: a run's sandbox (`a2rl.sandbox`), what every backend applies. Each backend's own
table (`[sandbox.local]`, `[sandbox.docker]`, a plugin's) is declared by the backend, in its
module (`sandbox/local.py`: `LocalSettings`), and kept here raw (`OwnerTables`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from a2rl.units import Size

from .base import NAME_PATTERN, OwnerTables


class SandboxSettings(OwnerTables):
    owns: ClassVar[str] = "sandbox"
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
