"""The agent process's own sandbox: bubblewrap with the network, and little else.

Agent CLIs have file and shell tools of their own; even with those turned off, the process
must not see `$A2RL_HOME` (the store, hidden splits, other runs), the user's files or the
host's secrets. It gets the system directories, a few files of /etc, the folder its program
lives in (read-only), a private home (read-write) and a private /tmp. The network is shared so
that it can reach its model's API and our MCP server on loopback.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from a2rl.tools.sandbox.local import host_system_binds

from .base import AgentLaunch

log = logging.getLogger(__name__)
MARKER_VAR = "A2RL_AGENT"


def program_root(program: str) -> Path:
    """The folder a program needs: its npm prefix when it lives in node_modules."""
    path = Path(shutil.which(program) or program)
    for candidate in (path, path.resolve()):
        for ancestor in candidate.parents:
            if ancestor.name == "node_modules":
                return ancestor.parent
    return path.resolve().parent


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
    root = str(program_root(launch.argv[0]))
    args += ["--ro-bind", root, root, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--bind", str(home), str(home), "--chdir", str(launch.cwd), "--", *launch.argv]
    return args, True
