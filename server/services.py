"""Per-run services: unix sockets in the run's `services/` folder, served by the serving process.

Why: a sandbox has no network, yet some environments need something from outside it (a search
engine with a key, a large index). The sandbox mounts `<run dir>/services/` (both backends), so a
socket there is the one door out, and this process holds the key and the data behind it.

Protocol (what `env/` code speaks): a unix stream socket `<services dir>/<name>.sock`; each
request is one JSON object on one line, each answer one JSON line: `{"ok": true, "result": ...}`
or `{"ok": false, "error": "..."}`. A connection may carry many requests. The client side,
for host tools and the sandbox's `env/` code alike, is `a2rl.jsonl_socket` (`call`).

Every request is recorded as a `ToolCall` row (tool `service.<name>`, the request as arguments,
a summary of the answer, with what the handler kept for the record only (`ServiceAnswer`),
its duration and error), written by the same recording functions as MCP
tool calls, so reports and `a2rl show` count service use with the agent's tool calls. The
services of a run are the task's (its `services` part, `a2rl.tasks.services`; none by
default), started by `RunRegistry` when this process first serves the run; they live as long
as the process (a restarted server binds them again).

Bounds (`service_limits`): a run's services together hold a bounded number of connections,
answer a bounded number of requests per second and carry a bounded number of bytes; what is
over is refused at once with one `{"ok": false, "error": "refused: ..."}` line (a connection
over the cap gets that line and is closed), counted, and kept in the run's `service.refused`
row. A refused request is not a `service.<name>` row: a flood would otherwise be one store
write per line. A connection idle for `IDLE_TIMEOUT_S` is closed, so an abandoned one frees
its slot.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.tasks.services import ServiceAnswer, service_handlers

from .recording import end_call, start_call
from .service_limits import RunServiceBudget, ServiceLimits

log = logging.getLogger(__name__)

#: One service: a request (parsed JSON object) -> a JSON-able result; raise ValueError for a
#: refused request (its message goes back to the caller).
Handler = Callable[[dict[str, Any]], Any]
MAX_REQUEST_BYTES = 1_000_000
SUMMARY_CHARS = 2_000
IDLE_TIMEOUT_S = 300.0  # longer than any honest client waits between two requests


def socket_path(services_dir: Path, name: str) -> Path:
    return services_dir / f"{name}.sock"


def _line(answer: dict[str, Any]) -> bytes:
    return (json.dumps(answer, default=str) + "\n").encode()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A thread per connection, as many as the run's budget has slots: one over the cap is
    answered with its refusal and closed in the accepting thread (a fresh socket's buffer takes
    one line without blocking), so a flood of connections never grows the thread count."""

    daemon_threads = True
    allow_reuse_address = True
    # Connects wait here until accepted; a client with a timeout (env/'s) meets EAGAIN when it
    # is full, so it holds a flood's worth while the accepting thread refuses them.
    request_queue_size = 128
    budget: RunServiceBudget

    def process_request(self, request: Any, client_address: Any) -> None:
        refusal = self.budget.open_connection()
        if refusal is None:
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread: its slot is not taken
                self.budget.close_connection()
                raise
            return
        try:
            request.settimeout(1.0)
            request.sendall(_line({"ok": False, "error": refusal}))
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.budget.close_connection()


class ServiceHost:
    """One named service of one run, on its socket, in daemon threads."""

    def __init__(self, store: Store | None, run_id: str, services_dir: Path, name: str,
                 handler: Handler, budget: RunServiceBudget | None = None) -> None:
        self.store, self.run_id, self.name, self.handler = store, run_id, name, handler
        # The run's budget, shared by its hosts; alone, the default bounds.
        self.budget = budget or RunServiceBudget(ServiceLimits.from_settings(Settings()),
                                                 store, run_id)
        self.path = socket_path(services_dir, name)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._inode = -1

    def handle(self, request: Any) -> dict[str, Any]:
        """Answer one request (recorded); never raises."""
        started = time.perf_counter()
        args = request if isinstance(request, dict) else {"request": request}
        call_id = (start_call(self.store, self.run_id, f"service.{self.name}", args, "unix")
                   if self.store is not None else None)
        error: str | None = None
        try:
            if not isinstance(request, dict):
                raise ValueError("a request is one JSON object per line")
            out = self.handler(request)
            if isinstance(out, ServiceAnswer):  # a part for the record only
                answer: dict[str, Any] = {"ok": True, "result": out.result}
                summary = json.dumps({"recorded_only": out.record, "result": out.result},
                                     default=str)
            else:
                answer = {"ok": True, "result": out}
                summary = json.dumps(out, default=str)
        except ValueError as exc:
            error = str(exc)
            answer, summary = {"ok": False, "error": error}, error
        except Exception as exc:  # noqa: BLE001 - the caller gets the error, the host survives
            error = f"{type(exc).__name__}: {exc}"
            log.exception("service %s failed", self.name)
            answer, summary = {"ok": False, "error": error}, error
        if call_id is not None:
            end_call(self.store, call_id, started, summary[:SUMMARY_CHARS], error)
        return answer

    def start(self) -> ServiceHost:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        host = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = IDLE_TIMEOUT_S

            def handle(self) -> None:
                while True:
                    try:
                        line = self.rfile.readline(MAX_REQUEST_BYTES)
                    except (TimeoutError, OSError):
                        return  # idle too long, or the peer went away
                    if not line:
                        return
                    refusal = host.budget.admit(len(line))
                    if refusal is not None:
                        answer: dict[str, Any] = {"ok": False, "error": refusal}
                    else:
                        try:
                            request = json.loads(line)
                        except ValueError:
                            answer = host.handle(line.decode(errors="replace")[:200])
                        else:
                            answer = host.handle(request)
                    data = _line(answer)
                    if refusal is None:
                        host.budget.charge(len(data))
                    try:
                        self.wfile.write(data)
                        self.wfile.flush()
                    except OSError:
                        return  # the peer left without reading its answer

        self._server = _Server(str(self.path), Handler, bind_and_activate=False)
        self._server.budget = self.budget
        self._inode = bind_private_then_move(self._server.socket, self.path)
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name=f"a2rl-service-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.budget.close()
        with contextlib.suppress(OSError):  # only our socket: the name is in the jobs' reach
            if os.stat(self.path, follow_symlinks=False).st_ino == self._inode:
                self.path.unlink()


def bind_private_then_move(sock: socket.socket, path: Path) -> int:
    """Bind `sock` as `path` (mode 0666: a container's user must connect) without ever touching
    a name a job can swap: `services/` is mounted into the sandbox, so between a bind there and
    a chmod by name a job could put a symlink in the socket's place and have us chmod its target
    (the store, a secret) to 0666. So the socket is bound and chmodded in a fresh 0700 folder
    beside `services/` (the run's folder, which no sandbox shows), then renamed into place:
    rename replaces whatever a job left at the name (a stale socket, a symlink) and follows
    nothing. Returns the socket file's inode."""
    private = Path(tempfile.mkdtemp(prefix=".bind-", dir=path.parent.parent))
    src = os.open(private, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    dst = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # Through the folder's descriptor: unix socket paths are limited to 108 bytes.
        sock.bind(f"/proc/self/fd/{src}/{path.name}")
        os.chmod(path.name, 0o666, dir_fd=src)
        inode = os.stat(path.name, dir_fd=src, follow_symlinks=False).st_ino
        try:
            os.rename(path.name, path.name, src_dir_fd=src, dst_dir_fd=dst)
        except IsADirectoryError:  # a folder planted at the name: only an empty one goes
            os.rmdir(path.name, dir_fd=dst)
            os.rename(path.name, path.name, src_dir_fd=src, dst_dir_fd=dst)
        return inode
    finally:
        os.close(dst)
        os.close(src)
        shutil.rmtree(private, ignore_errors=True)


def start_run_services(settings: Settings, store: Store, run: Run,
                       services_dir: Path) -> list[ServiceHost]:
    """Start the services the run's task declares (none for most tasks)."""
    from a2rl.tasks import get_task  # heavy: only when a run is served

    task = get_task(run.task_id, run.profile).with_recorded_options(run.task_options or {})
    budget = RunServiceBudget(ServiceLimits.from_settings(settings), store, run.id)
    hosts = []
    for name, handler in service_handlers(task, settings).items():
        hosts.append(ServiceHost(store, run.id, services_dir, name, handler, budget).start())
    return hosts
