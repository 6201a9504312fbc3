"""The agent process's own sandbox: bubblewrap with the network, and little else.

Agent CLIs have file and shell tools of their own; even with those turned off, the process
must not see `$A2RL_HOME` (the store, hidden splits, other runs), the user's files or the
host's secrets. It gets the system directories, a few files of /etc, what its program needs
(read-only: its npm prefix, or its virtual environment and the Python that environment was
made from), a private home (read-write) and a private /tmp. The network is shared so that it
can reach its model's API and our MCP server on loopback.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from a2rl.sandbox.local import SYSTEM_DIRS, host_system_binds

from .base import AgentLaunch

log = logging.getLogger(__name__)
MARKER_VAR = "A2RL_AGENT"


def program_root(program: str) -> Path:
    """The folder a program needs: its npm prefix when it lives in node_modules, its virtual
    environment when it lives in one, else its own folder."""
    path = Path(shutil.which(program) or program)
    for candidate in (path, path.resolve()):
        for ancestor in candidate.parents:
            if ancestor.name == "node_modules":
                return ancestor.parent
            if (ancestor / "pyvenv.cfg").is_file():
                return ancestor
    return path.resolve().parent


def python_home(venv: Path) -> Path | None:
    """The Python installation a virtual environment was made from (its `pyvenv.cfg`'s
    `home`, the folder of that interpreter, one level up), when it is not a system folder:
    the environment's interpreter is a link into it, and its standard library is there."""
    try:
        lines = (venv / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            prefix = Path(value.strip()).resolve().parent
            system = any(prefix == Path(d) or prefix.is_relative_to(d) for d in SYSTEM_DIRS)
            return None if system or prefix == Path("/") else prefix
    return None


def program_roots(program: str) -> list[Path]:
    """Every folder the program needs, read-only: `program_root`, and for a program in a
    virtual environment the Python installation it was made from."""
    root = program_root(program)
    home = python_home(root) if (root / "pyvenv.cfg").is_file() else None
    return [root] + ([home] if home else [])


def agent_env(launch: AgentLaunch, home: Path, marker: str) -> dict[str, str]:
    bins = [str(Path(shutil.which(launch.argv[0]) or launch.argv[0]).parent)]
    return {"PATH": ":".join([*bins, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp",
            MARKER_VAR: marker, **launch.env}


def sandboxed_argv(launch: AgentLaunch, home: Path, marker: str) -> tuple[list[str], bool]:
    """The command line that runs the agent sandboxed, and whether it is (bubblewrap found)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        log.warning("bubblewrap is not installed: the agent runs UNSANDBOXED and can read "
                    "everything this user can")
        return launch.argv, False
    args = [bwrap, "--unshare-all", "--share-net", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    args.append("--clearenv")
    for key, value in agent_env(launch, home, marker).items():
        args += ["--setenv", key, value]
    args += host_system_binds()
    for root in map(str, program_roots(launch.argv[0])):
        args += ["--ro-bind", root, root]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--bind", str(home), str(home), "--chdir", str(launch.cwd), "--", *launch.argv]
    return args, True
