"""Where the pinned agent CLIs live: the npm cache folder of scripts/agent-clis.sh, else PATH.

The script installs clients/package.json once into `<cache>/a2rl/npm-<hash>`, the hash being
the first 16 hex digits of the file's sha256, so that changing a pin installs a fresh copy and
an unchanged one never reinstalls. This module computes the same folder, so connectors find
the pinned binaries without the script's output and fall back to a CLI the user installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from .base import BaseConnector

PACKAGE_JSON = Path(__file__).with_name("package.json")


def cache_root() -> Path:
    """`$A2RL_NPM_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/a2rl` (as in the script)."""
    if os.environ.get("A2RL_NPM_CACHE"):
        return Path(os.environ["A2RL_NPM_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "a2rl"


def install_dir() -> Path:
    """The folder that holds this package.json's install (it may not exist yet)."""
    key = hashlib.sha256(PACKAGE_JSON.read_bytes()).hexdigest()[:16]
    return cache_root() / f"npm-{key}"


def bin_dir() -> Path:
    return install_dir() / "node_modules" / ".bin"


def cli_path(name: str) -> Path | None:
    """The pinned binary `name` (claude, codex, gemini) when installed, else one on PATH."""
    pinned = bin_dir() / name
    if pinned.exists() and os.access(pinned, os.X_OK):
        return pinned
    found = shutil.which(name)
    return Path(found) if found else None


@cache
def _version_of(path: str) -> str | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\d+\.\d+(?:\.\d+)?(?:[-+.\w]*)?", out.stdout)
    return match.group(0) if out.returncode == 0 and match else None


def program_version(path: Path) -> str | None:
    """`PATH --version` reduced to its version number; None when it fails."""
    return _version_of(str(path))


def cli_version(name: str) -> str | None:
    """`NAME --version` reduced to its version number; None when missing or broken."""
    path = cli_path(name)
    return _version_of(str(path)) if path else None


def node_path_dirs() -> list[str]:
    """PATH entries the npm CLIs need: node itself (the JS ones start with `#!/usr/bin/env
    node`) and the pinned bin folder."""
    dirs = [str(bin_dir())]
    node = shutil.which("node")
    if node:
        dirs.append(str(Path(node).parent))
    return dirs


def launch_path() -> str:
    """The PATH an agent CLI gets: the pinned bin folder, node's folder, the system's."""
    dirs = node_path_dirs() + ["/usr/local/bin", "/usr/bin", "/bin"]
    return ":".join(dict.fromkeys(dirs))


class CliConnector(BaseConnector):
    """What every CLI connector shares: finding its binary and its version."""

    binary_name: str = ""
    kind = "process"
    install_hint = "scripts/agent-clis.sh"

    def installed(self) -> bool:
        return cli_path(self.binary_name) is not None

    def version(self) -> str | None:
        return cli_version(self.binary_name)

    def binary(self) -> Path:
        path = cli_path(self.binary_name)
        if path is None:
            raise FileNotFoundError(f"{self.binary_name} is not installed: run "
                                    "scripts/agent-clis.sh (or install it on PATH)")
        return path
