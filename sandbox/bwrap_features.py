"""What this host's bubblewrap can do, asked once (`bwrap --help`): bind from a descriptor,
load a seccomp program. The local backend refuses a sandbox it cannot build whole rather than
start one with a wall missing."""

from __future__ import annotations

import functools
import subprocess

from . import seccomp
from .base import SandboxError


@functools.cache
def bwrap_help(bwrap: str) -> str:
    """bubblewrap's option list, which says what this version can do."""
    try:
        p = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout + p.stderr


def bwrap_binds_fds(bwrap: str) -> bool:
    """Whether this bubblewrap binds from a descriptor (`--ro-bind-fd`, bubblewrap 0.5+)."""
    return "--ro-bind-fd" in bwrap_help(bwrap)


def open_seccomp(bwrap: str) -> int:
    """A descriptor holding the run's seccomp program (`seccomp.py`), for `--seccomp`; a
    sandbox without it is refused rather than started with the kernel's whole surface."""
    if "--seccomp" not in bwrap_help(bwrap):
        raise SandboxError("this bubblewrap cannot load a seccomp filter (--seccomp): "
                           "install bubblewrap 0.3 or later")
    try:
        return seccomp.program_fd()
    except seccomp.SeccompUnavailable as exc:
        raise SandboxError(str(exc)) from None
