"""Requests: from a line on the socket to the operation that answers it.

`Dispatcher` checks the token and looks the operation up in its table (`ops`), one small method
per operation, each calling the job table or the deadline watch; `Handler` and `Server` carry
the JSON lines (several connections at once). The operations are listed in the package's
docstring.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any

from .jobs import JobTable
from .watches import DeadlineWatch

STARTED = time.time()  # which supervisor answers: a restarted one has another
CAUSE = re.compile(r"^[a-z_]{1,32}$")  # a cause the server names (store.status.JobEndCause)

Reply = dict[str, Any]


class Dispatcher:
    #: every operation, answered by the method of the same name
    OPS = ("ping", "spawn", "get", "wait", "wait_any", "list", "shims", "kill",
           "set_deadline", "shutdown")

    def __init__(self, token: str, table: JobTable, deadline: DeadlineWatch) -> None:
        self.token = token
        self.table = table
        self.deadline = deadline
        self.ops: dict[str, Callable[[dict[str, Any]], Reply]] = {
            op: getattr(self, op) for op in self.OPS}

    def handle(self, request: dict[str, Any]) -> Reply:
        if not hmac.compare_digest(str(request.get("token", "")), self.token):
            return {"ok": False, "error": "bad token"}
        op = request.get("op")
        answer = self.ops.get(op) if isinstance(op, str) else None
        if answer is None:
            return {"ok": False, "error": f"unknown op {op!r}"}
        return answer(request)

    # -- the operations --------------------------------------------------------------------

    def ping(self, request: dict[str, Any]) -> Reply:
        return {"ok": True, "pid": os.getpid(), "started": STARTED,
                "deadline": self.deadline.deadline}

    def spawn(self, request: dict[str, Any]) -> Reply:
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
        job = self.table.spawn(str(request["job_id"]), str(request["command"]), env)
        return {"ok": True, "job": job.as_dict()}

    def get(self, request: dict[str, Any]) -> Reply:
        with self.table.lock:
            return {"ok": True, "job": self.table.job(request["job_id"]).as_dict()}

    def wait(self, request: dict[str, Any]) -> Reply:
        timeout = max(0.0, float(request.get("timeout", 0)))
        table = self.table
        with table.lock:
            job = table.job(request["job_id"])
            table.lock.wait_for(lambda: job.state != "running", timeout)
            return {"ok": True, "job": job.as_dict()}

    def wait_any(self, request: dict[str, Any]) -> Reply:
        """The server's watcher: one request that returns when any of these jobs ends, so
        that a job's end is recorded when it happens, not when the agent polls."""
        timeout = max(0.0, float(request.get("timeout", 0)))
        wanted = [str(j) for j in request.get("job_ids") or []]
        table = self.table
        with table.lock:
            jobs = [table.jobs[j] for j in wanted if j in table.jobs]
            table.lock.wait_for(lambda: any(j.state != "running" for j in jobs)
                                or table.stopping.is_set(), timeout)
            return {"ok": True, "jobs": [j.as_dict() for j in jobs]}

    def list(self, request: dict[str, Any]) -> Reply:
        with self.table.lock:
            return {"ok": True, "jobs": [j.as_dict() for j in self.table.jobs.values()]}

    def shims(self, request: dict[str, Any]) -> Reply:
        """[shim pid, job id] of every shim not yet reaped (a reaped one's pid may be a
        stranger's): the host's access recorder finds a process's job by its shim."""
        with self.table.lock:
            return {"ok": True, "shims": [[j.shim, j.job_id] for j in self.table.jobs.values()
                                          if not j.shim_reaped]}

    def kill(self, request: dict[str, Any]) -> Reply:
        table = self.table
        with table.lock:
            job_id = table.job(request["job_id"]).job_id
        table.killer.kill_jobs({job_id}, "killed", *cause_of(request, "job_kill"))
        with table.lock:
            return {"ok": True, "job": table.jobs[job_id].as_dict()}

    def set_deadline(self, request: dict[str, Any]) -> Reply:
        self.deadline.set(float(request["deadline"]))
        return {"ok": True, "deadline": self.deadline.deadline}

    def shutdown(self, request: dict[str, Any]) -> Reply:
        """Every job killed, then the answer; the server stops after sending it (Handler)."""
        self.table.stop("killed", *cause_of(request, "run_finished"))
        return {"ok": True}


def cause_of(request: dict[str, Any], default: str) -> tuple[str, str]:
    """The cause and evidence a request names (the server's words), else `default`."""
    cause = str(request.get("cause") or default)
    if not CAUSE.match(cause):
        raise ValueError(f"bad cause {cause!r}")
    evidence = " ".join(str(request.get("evidence") or "").split())
    return cause, evidence or f"stopped at the server's request ({cause})"


class Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        for line in self.rfile:
            request: Any = None
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
                response = self.server.dispatcher.handle(request)
            except (ValueError, KeyError, TypeError, OSError) as exc:
                response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                self.wfile.write(json.dumps(response).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                return
            if response.get("ok") and request.get("op") == "shutdown":
                threading.Thread(target=self.server.shutdown, daemon=True).start()


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    request_queue_size = 512  # bursts of concurrent tool calls must queue, not fail
    daemon_threads = True
    dispatcher: Dispatcher

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        # A fork bomb can use up the sandbox's process limit, and threads count against it;
        # the kill that ends the bomb must still be served, so serve it inline then.
        try:
            super().process_request(request, client_address)
        except RuntimeError:
            self.process_request_thread(request, client_address)
