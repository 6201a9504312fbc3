"""The host's side of a run's access recorder (`recorder/`): started with the run's sandbox,
asked to sync before its record is read, stopped with the sandbox.

One recorder per run, on the host, as root: it needs the run's workspace to be a filesystem of
its own (the volume, `volume.py`: a fanotify mark on a filesystem shared with the host would
see the host's files) and CAP_SYS_ADMIN. Where either is missing, or it cannot start, the
journal gets an `error` line saying why: the run's record then says its accesses were not
recorded, and why, rather than showing an empty record as a clean one.

Like the supervisor, it is detached from the server (its own session): a server that stops
leaves it watching the jobs that go on, and a server that comes back finds it through its
socket. It ends by itself when the run's supervisor ends; `stop` makes sure of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RECORDER_PATH = Path(__file__).with_name("recorder")
FOLDER = "access"  # in the run's control folder (host-only)
JOURNAL = "journal.jsonl"
SOCKET = "recorder.sock"
META = "recorder.json"
READY_TIMEOUT = 10.0
SYNC_TIMEOUT = 90.0  # a sync drains the queue and waits (60 s at most) for large hashes


def folder_of(control_dir: Path) -> Path:
    return control_dir / FOLDER


def unavailable_reason(workspace: Path) -> str | None:
    """Why a recorder cannot watch this workspace, or None when it can."""
    if os.geteuid() != 0:
        return "the server is not root (fanotify needs CAP_SYS_ADMIN)"
    if not os.path.ismount(workspace):
        return ("the workspace is not a filesystem of its own (no volume: "
                "sandbox_disk_volume is off, or this machine cannot mount one)")
    return None


def note(folder: Path, kind: str, **fields: Any) -> None:
    """A line of the journal written by the server (an `error`: why no recorder watches)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = json.dumps({"t": kind, "at": time.time(), **fields}) + "\n"
    fd = os.open(folder / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def call(folder: Path, request: str = "sync",
         timeout: float = SYNC_TIMEOUT) -> dict[str, Any] | None:
    """The recorder's answer to `request` (sync: everything its jobs did until now is in the
    journal), or None when no recorder answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
            try:  # through the folder: a socket path is at most 108 bytes
                sock.connect(f"/proc/self/fd/{fd}/{SOCKET}")
            finally:
                os.close(fd)
            sock.sendall(request.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data)
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) and reply.get("ok") else None


def start(workspace: Path, control_dir: Path, supervisor: Callable[[], int | None], *,
          inside: str, readonly: list[str], supervisor_socket: Path, token_file: Path,
          check_supervisor: bool = True) -> str | None:
    """Make sure a recorder watches the run: the one already answering (watching the
    supervisor `supervisor()` names, unless `check_supervisor` is false: a run has one
    supervisor at a time, and a recorder ends with its own), else a new one. Returns None when
    one watches, else why not (also written to the journal)."""
    folder = folder_of(control_dir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    running = call(folder, "ping", timeout=3.0)
    supervisor_pid = None
    if running is not None:
        if not check_supervisor:
            return None
        supervisor_pid = supervisor()
        if running.get("supervisor") == supervisor_pid:
            return None
        stop(control_dir, wait_s=5.0)  # an earlier supervisor's, ending with it
    why = unavailable_reason(workspace)
    if why is None and supervisor_pid is None:
        supervisor_pid = supervisor()
    if why is None and supervisor_pid is None:
        why = "the sandbox's supervisor has no pid on this host"
    if why is None:
        why = _launch(workspace, folder, supervisor_pid, inside, readonly,  # type: ignore[arg-type]
                      supervisor_socket, token_file)
    if why is not None:
        note(folder, "error", why=why)
        log.info("workspace accesses of %s are not recorded: %s", control_dir.parent.name, why)
    return why


def _launch(workspace: Path, folder: Path, supervisor_pid: int, inside: str,
            readonly: list[str], supervisor_socket: Path, token_file: Path) -> str | None:
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-I", str(RECORDER_PATH), "--workspace", str(workspace),
            "--root", inside, "--supervisor-pid", str(supervisor_pid),
            "--supervisor-socket", str(supervisor_socket),
            "--supervisor-token-file", str(token_file), "--dir", str(folder),
            "--ready-fd", str(write_end)]
    for rel in readonly:
        argv += ["--readonly", rel]
    try:
        with open(folder / "recorder.log", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, pass_fds=[write_end],
                                    start_new_session=True, cwd="/")
    except OSError as exc:
        os.close(read_end)
        return f"the access recorder could not start: {exc}"
    finally:
        os.close(write_end)
    # reaped when it ends, whoever is still here: no zombie stays behind it
    threading.Thread(target=proc.wait, daemon=True, name="a2rl-recorder-reaper").start()
    answer = _ready(read_end)
    if answer == "ready":
        meta = {"pid": proc.pid, "start": _start_time(proc.pid)}
        (folder / META).write_text(json.dumps(meta))
        return None
    _kill(proc.pid, _start_time(proc.pid))
    return answer.removeprefix("error ").strip() or "the access recorder exited at start"


def _ready(fd: int) -> str:
    data = b""
    end = time.monotonic() + READY_TIMEOUT
    try:
        while b"\n" not in data and time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
    finally:
        os.close(fd)
    if b"\n" not in data:
        return "the access recorder did not start in time"
    return data.split(b"\n", 1)[0].decode(errors="replace")


def stop(control_dir: Path, wait_s: float = 10.0) -> None:
    """Make sure the run's recorder is gone. It ends by itself once the supervisor is gone
    (after reading everything queued); after `wait_s` it is told to stop, then killed."""
    folder = folder_of(control_dir)
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return
    pid, start_time = meta.get("pid"), meta.get("start")
    if not isinstance(pid, int) or start_time is None:
        return
    end = time.monotonic() + wait_s
    while _start_time(pid) == start_time and time.monotonic() < end:
        time.sleep(0.02)
    _kill(pid, start_time)


def _kill(pid: int, start_time: int | None) -> None:
    for signum, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        if start_time is None or _start_time(pid) != start_time:
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
        end = time.monotonic() + grace
        while _start_time(pid) == start_time and time.monotonic() < end:
            time.sleep(0.02)


def _start_time(pid: int) -> int | None:
    """The process's start time, None once it is gone (a zombie is gone: it waits to be
    reaped, its work is done)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    if fields[:1] in ([b"Z"], [b"X"]):
        return None
    return int(fields[19])
