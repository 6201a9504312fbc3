"""The recorder's start and its loop: events in, answers out, the journal flushed, requests
served, and the end when the run's supervisor ends."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import signal
import socket
import sys
import time
from typing import Any

from . import fanotify
from .ledger import Ledger
from .naming import Namer, unnamed
from .procs import OUTSIDE, Resolver

FLUSH_EVERY = 0.5  # seconds between two journal flushes while events come
TICK = 0.1  # the longest wait between two reads of the pid counter
#: one read of the group: each event in it comes with two new descriptors (the file's and a
#: pidfd), and the kernel denies an open whose descriptor it cannot make, so a read never
#: asks for more events than descriptors are left (`read_bytes`)
READ_BYTES = 1 << 18
EVENT_BYTES = 32  # an event with its pidfd record (24 + 8)
FDS_KEPT = 512  # descriptors left free for the rest of the recorder
SYNC_HASH_WAIT_S = 60.0  # how long a sync waits for large files still being hashed
SUPERVISOR_TIMEOUT = 3.0


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} recorder: {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--workspace", required=True, help="the host's mount of the workspace")
    p.add_argument("--root", action="append", default=[],
                   help="where a sandbox shows the workspace (its paths are named from it)")
    p.add_argument("--readonly", action="append", default=[],
                   help="workspace inputs a sandbox binds on their own")
    p.add_argument("--supervisor-pid", type=int, required=True)
    p.add_argument("--supervisor-socket", required=True)
    p.add_argument("--supervisor-token-file", required=True)
    p.add_argument("--dir", required=True, help="the recorder's folder: journal and socket")
    p.add_argument("--ready-fd", type=int, required=True)
    return p.parse_args(argv)


class SupervisorTable:
    """{shim pid in the sandbox: job id} of the supervisor's live shims, asked on demand."""

    def __init__(self, socket_path: str, token_file: str) -> None:
        self.socket_path = socket_path
        with open(token_file) as f:
            self.token = f.read().strip()

    def _call(self, op: str) -> dict[str, Any]:
        request = json.dumps({"token": self.token, "op": op}).encode() + b"\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(SUPERVISOR_TIMEOUT)
            folder = os.open(os.path.dirname(self.socket_path), os.O_PATH | os.O_DIRECTORY)
            try:  # through the folder: a socket path is at most 108 bytes
                sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(self.socket_path)}")
            finally:
                os.close(folder)
            sock.sendall(request)
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data or b"{}")
        if not reply.get("ok"):
            raise OSError(str(reply.get("error", "the supervisor refused")))
        return dict(reply)

    def __call__(self) -> dict[int, str]:
        try:
            return {int(shim): str(job) for shim, job in self._call("shims")["shims"]}
        except OSError as exc:
            if "unknown op" not in str(exc):
                raise
        # a supervisor of an older version: its job list, the latest job of each shim pid
        jobs = sorted(self._call("list")["jobs"], key=lambda j: j.get("started_at") or 0)
        return {int(j["shim"]): str(j["job_id"]) for j in jobs if j.get("shim") is not None}


class Recorder:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = Ledger(os.path.join(args.dir, "journal.jsonl"))
        self.resolver = Resolver(args.supervisor_pid, SupervisorTable(
            args.supervisor_socket, args.supervisor_token_file))
        self.namer = Namer(args.workspace, args.root, args.readonly)
        self.deep: dict[tuple[int, int], str] = {}  # (dev, inode) -> its name, too long to print
        self.group = -1
        self.failures = 0
        self.read_bytes = read_bytes()

    def start(self) -> tuple[int, socket.socket]:
        if not os.path.ismount(self.args.workspace):
            raise fanotify.FanotifyError(0, "the workspace is not a filesystem of its own")
        if self.resolver.supervisor_start < 0:
            raise fanotify.FanotifyError(0, "the run's supervisor is gone")
        self.group = fanotify.open_group()
        fanotify.mark_filesystem(self.group, self.args.workspace)
        supervisor = os.pidfd_open(self.args.supervisor_pid)
        listener = bind(os.path.join(self.args.dir, "recorder.sock"))
        return supervisor, listener

    # -- events ----------------------------------------------------------------------------

    def drain(self) -> int:
        """Handle every event queued now; how many."""
        count = 0
        while True:
            try:
                buf = os.read(self.group, self.read_bytes)
            except BlockingIOError:
                return count
            except InterruptedError:
                continue
            self.resolver.tick()  # after the read: a wrap before these events is seen
            for event in fanotify.parse(buf):
                count += 1
                self.handle(event)

    def handle(self, event: fanotify.Event) -> None:
        waiting = event.permission and event.fd >= 0  # an opener waits for our answer
        try:
            if event.mask & fanotify.FAN_Q_OVERFLOW:  # never with an unlimited queue
                self.ledger.line("lost", why="the kernel's event queue overflowed")
                return
            if event.fd < 0:
                return
            verdict = self.resolver.verdict(event.pid, event.pidfd)
            if event.permission:
                fanotify.allow(self.group, event.fd)
                waiting = False
                return
            if verdict == OUTSIDE:
                return
            st = os.fstat(event.fd)
            path = self.namer.name(event.fd, st) or self.deep_name(event, st) or unnamed(st)
            written = bool(event.mask & fanotify.FAN_CLOSE_WRITE)
            self.ledger.note(verdict, printable(path), written, event.fd, st)
        except Exception as exc:  # one bad event must never stop the recorder
            self.failures += 1
            if self.failures <= 20:
                log(f"event {event.mask:#x} of pid {event.pid}: {exc!r}")
        finally:
            if waiting:
                fanotify.allow(self.group, event.fd)  # whatever failed, it goes on
            for fd in (event.fd, event.pidfd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def deep_name(self, event: fanotify.Event, st: os.stat_result) -> str | None:
        """A name too long for the kernel to print: rebuilt from the process's folder while
        it is there, else the one found for this file before if it still names it."""
        key = (st.st_dev, st.st_ino)
        name = self.namer.deep_name(event.pid, st) if event.pidfd >= 0 else None
        if name is None:
            return self.namer.checked(self.deep.get(key), st)
        if len(self.deep) > 10_000:
            self.deep.clear()
        self.deep[key] = name
        return name

    # -- the loop ---------------------------------------------------------------------------

    def sync(self) -> dict[str, Any]:
        self.drain()
        hashed = self.ledger.hashes_done(SYNC_HASH_WAIT_S)
        self.ledger.flush()
        return {"ok": True, "at": time.time(), "events": self.ledger.events,
                "unattributed_processes": self.resolver.unknown, "hashes_done": hashed}

    def serve(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                line = conn.recv(64).strip()
                if line == b"sync":
                    reply = self.sync()
                elif line == b"ping":
                    reply = {"ok": True, "supervisor": self.args.supervisor_pid}
                else:
                    reply = {"ok": False, "error": "unknown request"}
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass

    def run(self, supervisor: int, listener: socket.socket) -> str:
        stop: list[str] = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append("stopped by the server"))
        last_flush = time.monotonic()
        poller = select.poll()
        for fd in (self.group, supervisor, listener.fileno()):
            poller.register(fd, select.POLLIN)
        while not stop:
            try:
                ready = {fd for fd, _ in poller.poll(TICK * 1000)}
            except InterruptedError:
                continue
            self.resolver.tick()
            if self.group in ready:
                self.drain()
            if listener.fileno() in ready:
                self.serve(listener)
            if supervisor in ready:
                stop.append("the run's supervisor exited")
            if time.monotonic() - last_flush >= FLUSH_EVERY:
                self.ledger.flush()
                last_flush = time.monotonic()
        # whatever its processes did before they ended is queued: read it all
        self.sync()
        return stop[0]


def read_bytes() -> int:
    """How many bytes one read of the group may ask for: as many events as two descriptors
    each leave room for (see READ_BYTES)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    events = (soft - FDS_KEPT) // 2 if soft != resource.RLIM_INFINITY else READ_BYTES
    return max(EVENT_BYTES, min(READ_BYTES, events * EVENT_BYTES))


def printable(path: str) -> str:
    """A name that is not UTF-8 keeps its bytes as backslash escapes (the store takes text)."""
    try:
        path.encode()
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def bind(path: str) -> socket.socket:
    """A listening socket at `path`, for root only (the folder is 0700)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)
    sock.listen(16)
    sock.setblocking(False)
    return sock


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    recorder = Recorder(args)
    try:
        supervisor, listener = recorder.start()
    except OSError as exc:
        why = exc.strerror or str(exc)
        recorder.ledger.line("error", why=why)
        with contextlib.suppress(OSError):
            os.write(args.ready_fd, f"error {why}\n".encode())
        sys.exit(1)
    recorder.ledger.line("start", pid=os.getpid(), supervisor=args.supervisor_pid)
    os.write(args.ready_fd, b"ready\n")
    os.close(args.ready_fd)
    log(f"watching {args.workspace} for the supervisor {args.supervisor_pid}")
    why = recorder.run(supervisor, listener)
    recorder.ledger.line("end", why=why, events=recorder.ledger.events,
                         unattributed_processes=recorder.resolver.unknown,
                         cpu_s=round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 3))
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(args.dir, "recorder.sock"))
    log(f"exited: {why}")

