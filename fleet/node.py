"""What runs on a node: one `a2rl run` as a subprocess, for one Ray task.

Why a subprocess and not the orchestrator in the Ray worker: a run owns process trees (its
sandbox supervisor, the agent, an MCP server) and handles Ctrl-C by finalizing; `a2rl run` is
the tested unit that does both, and a Ray worker is reused between tasks. The run writes to
the fleet's store (`A2RL_DB_URL`) and keeps its workspace and checkpoint copies in the node's
own `$A2RL_HOME`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from a2rl.store import RunConfig

from .plan import resume_key

#: How long a cancelled run may take to finalize (stop its agent, score on test).
FINALIZE_GRACE_S = 1800.0
STDERR_TAIL_CHARS = 3000


class RunOutcome(BaseModel):
    """What a node reports back for one run."""

    key: tuple[str, str, str, int]
    run_id: str | None
    node_id: str
    host: str
    exit_code: int | None
    interrupted: bool = False
    error: str | None = None
    summary: dict | None = None  # `a2rl run --json`'s document


def node_config(config: RunConfig, node_id: str, gpu_ids: list[str]) -> RunConfig:
    """`config` as this node runs it: on this node, with the GPUs Ray gave its task."""
    return config.model_copy(update={"fleet_node": node_id, "gpus": list(gpu_ids)})


def run_argv(config_file: Path) -> list[str]:
    """The `a2rl run` command line for the config in `config_file` (`write_config`): the
    whole config as JSON, no flag round trip."""
    return [str(Path(sys.executable).parent / "a2rl"), "run", "--json",
            "--config", str(config_file)]


def write_config(config: RunConfig, folder: Path) -> Path:
    """The config's JSON in `folder`, readable by this user alone: it carries the agent's
    options, which may hold an API key (a command line would show them to every user)."""
    path = folder / "run-config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(config.node_json())
    return path


def _wait(proc: subprocess.Popen[bytes]) -> bool:
    """Wait for the run; True when it was interrupted. Polls, because Ray cancels a task by
    raising KeyboardInterrupt between bytecodes, which a blocking wait would never reach."""
    try:
        while proc.poll() is None:
            time.sleep(0.2)
        return False
    except KeyboardInterrupt:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)  # `a2rl run` finalizes on SIGINT, like Ctrl-C
    deadline = time.monotonic() + FINALIZE_GRACE_S
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(KeyboardInterrupt):  # a second cancel: keep finalizing
            time.sleep(0.2)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return True


def _spawn(argv: list[str], env: dict[str, str], out: IO[bytes],
           err: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start the run in a session of its own (only our SIGINT reaches it) with SIGINT
    unblocked: a Ray worker blocks SIGINT, and a blocked signal stays blocked across exec,
    which would leave the run deaf to the cancel that should finalize it."""
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def execute(config: RunConfig, env: dict[str, str], node_id: str,
            gpu_ids: list[str]) -> RunOutcome:
    """Run `config` to the end and report it. A cancelled task passes the cancel on to the
    run as SIGINT, which finalizes it; the outcome then says `interrupted`."""
    with tempfile.TemporaryDirectory(prefix="a2rl-fleet-") as tmp:
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        config_file = write_config(node_config(config, node_id, gpu_ids), Path(tmp))
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = _spawn(run_argv(config_file), {**os.environ, **env}, out, err)
            interrupted = _wait(proc)
        stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    summary = None
    with contextlib.suppress(ValueError):
        doc = json.loads(stdout or "null")
        summary = doc if isinstance(doc, dict) else None
    error = stderr[-STDERR_TAIL_CHARS:] if proc.returncode != 0 else None
    return RunOutcome(key=resume_key(config), run_id=(summary or {}).get("run_id"), node_id=node_id,
                      host=socket.gethostname(), exit_code=proc.returncode,
                      interrupted=interrupted, error=error, summary=summary)
