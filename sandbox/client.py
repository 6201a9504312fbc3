"""The host's side of the sandbox supervisor, one home for every backend.

Every backend runs the same supervisor (`supervisor/`, standard library only) somewhere
isolated and talks to it the same way, so that a job, a kill, a deadline or a reattachment means
one thing whatever isolates it. This module is that common part:

- `SupervisorClient`: the run's control files (`control_dir/`: the socket in `sock/`, the token,
  the launcher's notes and the supervisor's log) and the protocol, one JSON request per
  connection, authenticated by the token (0600, never shown inside a sandbox).
- `supervisor_args` and the names the supervisor is shown under inside a sandbox: its command
  line, which both backends build the same way.
- `SupervisedSandbox`: the `Sandbox` every backend is. Starting or reattaching under a lock,
  the job calls, `stop` and `release` are written once here; a backend subclasses it and says
  how its supervisor is launched (`_launch`) and how whatever is left of it is ended
  (`_force_stop`), with its own config type (`BackendConfig`) and its own clean-up when a
  server starts (`clean_up`). docs/adding-a-task.md, "Adding a sandbox backend", walks
  through one.

Nothing here knows how a backend isolates (no bubblewrap, no container engine): a fix to one
backend cannot change another's behaviour.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from a2rl import jsonl_socket
from a2rl.sections import Section
from a2rl.settings import Settings, parse_size

from . import access
from .base import (
    CAP_SYS_RESOURCE,
    BackendConfig,
    JobState,
    SandboxChoices,
    SandboxError,
    SandboxJob,
    SandboxSpec,
    host_has_cap,
)

log = logging.getLogger(__name__)

# The supervisor program, a folder run as `python -I <folder>` (its __main__.py says how), and
# where a sandbox shows it, read-only.
SUPERVISOR_PATH = Path(__file__).with_name("supervisor")
SUPERVISOR_INSIDE = "/a2rl/supervisor"
LOGS_INSIDE = "/a2rl/joblogs"  # where jobs see their logs, read-only (every backend)
SOCKET_NAME = "supervisor.sock"
START_TIMEOUT = 15.0
CALL_TIMEOUT = 10.0
#: Tries of a connection while the supervisor's accept queue is full (EAGAIN), 20 ms apart.
CONNECT_TRIES = 100
KILL_TIMEOUT = 60.0  # a kill sweeps /proc until nothing is left, then waits for the reap
# Capabilities the supervisor keeps when it runs as root (jobs keep none): switch to the
# sandbox user, signal and read the /proc of its jobs.
SUPERVISOR_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_PTRACE")


def supervisor_caps(prefix: str = "CAP_") -> list[str]:
    """The capabilities the supervisor keeps as root: SUPERVISOR_CAPS, and SYS_RESOURCE where
    this host can give it, to leave the OOM killer's reach and pin each job's score
    (supervisor/shim.py, drop_privileges). Without it a backend must keep the supervisor out of its
    jobs' OOM kills some other way (the local backend's cgroup does)."""
    caps = [prefix + c.removeprefix("CAP_") for c in SUPERVISOR_CAPS]
    if host_has_cap(CAP_SYS_RESOURCE):
        caps.append(prefix + "SYS_RESOURCE")
    return caps


def supervisor_args(spec: SandboxSpec, config: BackendConfig, isolated: bool = True) -> list[str]:
    """The limits and the jobs' user, as the supervisor's command line options.

    Unisolated (no bubblewrap, --unsafe-local) jobs keep the server's user: the whole host is
    visible to them anyway, and the server's Python may sit in a home only its user reaches."""
    uid, gid = spec.job_user() if isolated else (-1, -1)
    args = ["--workspace", str(spec.workspace), "--deadline", repr(spec.deadline),
            "--uid", str(uid), "--gid", str(gid),
            "--pids-limit", str(config.pids_limit),
            "--fsize-limit", str(parse_size(spec.file_size)),
            "--log-limit", str(parse_size(spec.log_bytes)),
            "--disk-limit", str(parse_size(spec.disk)),
            "--memory-label", config.memory]
    for rel in spec.readonly_paths:
        args += ["--readonly", rel]
    return args


def sandbox_env(spec: SandboxSpec, *, home: str, path: str) -> dict[str, str]:
    """The whole environment of the supervisor and its jobs, on every backend: an allow-list,
    nothing inherited. `home` is the workspace as the sandbox shows it, `path` its PATH."""
    env = {
        "PATH": path,
        "HOME": home,
        "USER": "a2rl",  # no passwd entry names the sandbox user; getpass needs a name
        "XDG_CACHE_HOME": f"{home}/.cache",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": "/tmp",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.update(spec.env)
    return env


def write_private(path: Path, text: str) -> None:
    """Write `path` whole, readable by our user only (a token, the launcher's notes)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class SupervisorClient:
    """One run's supervisor as the host reaches it: its control files and its protocol.

    `control_dir` is host-only (0700); no backend shows it inside, except the `sock/` folder a
    container's supervisor binds its socket in, which only root there can reach."""

    def __init__(self, control_dir: Path) -> None:
        self.control_dir = control_dir
        self.token: str | None = None

    # -- files ---------------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        return self.control_dir / "sock" / SOCKET_NAME

    @property
    def token_path(self) -> Path:
        return self.control_dir / "token"

    @property
    def meta_path(self) -> Path:
        """What the launcher noted about the supervisor it started (pids, start times)."""
        return self.control_dir / "supervisor.json"

    @property
    def log_path(self) -> Path:
        return self.control_dir / "supervisor.log"

    def make_dirs(self) -> None:
        self.control_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.control_dir / "sock").mkdir(exist_ok=True, mode=0o700)

    def new_token(self) -> str:
        """A fresh token, written for later callers and held here."""
        token = secrets.token_hex(32)
        write_private(self.token_path, token + "\n")
        self.token = token
        return token

    def load_token(self) -> bool:
        """Take the token of the supervisor another caller started; False when there is none."""
        try:
            self.token = self.token_path.read_text().strip()
        except FileNotFoundError:
            return False
        return True

    def read_meta(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.meta_path.read_text()))
        except (OSError, ValueError):
            return {}

    def write_meta(self, meta: dict[str, Any]) -> None:
        write_private(self.meta_path, json.dumps(meta))

    def log_tail(self, limit: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()[-limit:]
        except OSError:
            return "(no supervisor log)"
        return data.decode("utf-8", "replace")

    # -- protocol ------------------------------------------------------------------------------

    def call(
        self, op: str, fields: dict[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT
    ) -> dict[str, Any]:
        """One request on a fresh connection; `timeout` bounds the whole exchange."""
        if self.token is None:
            raise SandboxError("the sandbox is not started")
        request = {"token": self.token, "op": op, **(fields or {})}
        try:
            with jsonl_socket.connect(self.socket_path, timeout,
                                      full_queue_tries=CONNECT_TRIES) as sock:
                data = jsonl_socket.exchange(sock, request)
        except (FileNotFoundError, ConnectionRefusedError):
            raise SandboxError("supervisor is not running") from None
        except TimeoutError:
            raise SandboxError(f"the sandbox supervisor did not answer {op} in time") from None
        except OSError as exc:
            raise SandboxError(f"cannot reach the sandbox supervisor: {exc}") from None
        if not data:
            raise SandboxError("supervisor is not running (connection closed)")
        try:
            reply = jsonl_socket.answer_of(data)
        except ValueError:
            raise SandboxError(f"the sandbox supervisor answered garbage: {data[:200]!r}") from None
        if not reply.get("ok"):
            raise SandboxError(str(reply.get("error", "the sandbox supervisor refused")))
        return reply

    def answers(self, timeout: float = 3.0) -> bool:
        try:
            self.call("ping", timeout=timeout)
        except SandboxError:
            return False
        return True


class SupervisedSandbox(ABC):
    """A `Sandbox` whose jobs are a supervisor's, reached through a `SupervisorClient`.

    A backend is a subclass (registered by name in `registry.py`) that gives:
    - `config_type`, its `BackendConfig`, and `isolated`;
    - `_launch()`: start a new supervisor for `spec` (`client.new_token()` first) and return
      once it answers; called under the run's start lock, after `_reattach` found none;
    - `_force_stop()`: make sure nothing of the run's supervisor is left, answering or not;
    and, where it has them, `settings_section` (its own table of settings, `[sandbox.<name>]`:
    a `Section` declared with `place="sandbox.<name>"`), `gone_cause`, `run_options` (what a
    run fixes when it is made) and `clean_up` (what a server starting up removes or keeps)."""

    config_type: ClassVar[type[BackendConfig]] = BackendConfig
    settings_section: ClassVar[type[Section] | None] = None

    def __init__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> None:
        self.spec = spec
        self.config = config if config is not None else self.config_type()
        self.client = SupervisorClient(spec.control_dir)
        self._access_refused: str | None = None  # why no access recorder could watch

    # -- what a backend is -----------------------------------------------------------------------

    @property
    @abstractmethod
    def isolated(self) -> bool:
        """True when commands run in an isolating sandbox."""

    @abstractmethod
    def _launch(self) -> None:
        """Start this run's supervisor and wait until it answers (`SandboxError` otherwise)."""

    @abstractmethod
    def _force_stop(self) -> None:
        """End every process of the run and whatever holds them, whether or not the
        supervisor answers. Idempotent."""

    @classmethod
    def config_for(cls, settings: Settings, fixed: dict[str, Any]) -> BackendConfig:
        """This backend's config for a run: from the options fixed when the run was made
        (`run_options`, stored with it), else from the settings as they are now."""
        return cls.config_type.model_validate(fixed) if fixed else (
            cls.config_type.from_settings(settings))

    @classmethod
    def run_options(cls, settings: Settings, choices: SandboxChoices) -> dict[str, Any]:
        """What a run fixes of this backend when it is made (stored with the run and given
        back to `config_for` at every start), from the settings and the run's `choices`
        (`task_image`, `gpus`, `share_gpus`, `keep_container`). Default: nothing, so the
        settings at each start apply."""
        del settings, choices
        return {}

    @classmethod
    def clean_up(cls, live_runs: set[str], store_id: str) -> dict[str, list[str]]:
        """At server start, given this store's runs of this backend that are still live:
        keep what serves them, remove what is left of the others. Default: nothing to do."""
        del live_runs, store_id
        return {}

    def gone_cause(self) -> tuple[str, str] | None:
        return None  # the backend has no record of how its supervisor ended

    def supervisor_host_pid(self) -> int | None:
        return None  # a backend that cannot say: its jobs' GPU use is not measured

    @property
    def workspace_inside(self) -> str:
        """Where the sandbox shows the workspace (the host's path unless a backend moves it):
        the access recorder names files from it."""
        return str(self.spec.workspace)

    # -- starting ------------------------------------------------------------------------------

    def start(self) -> None:
        self.client.make_dirs()
        # Jobs read their logs (read-only, root's files) but never write this folder.
        self.spec.logs_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        with self._start_lock():
            if self._reattach():
                self._record_access(check_supervisor=True)  # one that died meanwhile
                return
            try:
                self._launch()
            except BaseException:
                # A start that failed halfway (the supervisor exited at once, a container that
                # did not answer) leaves nothing: no process, no run cgroup, no container.
                try:
                    self._force_stop()
                except Exception as exc:  # the start's own error is the one to report
                    log.warning("run %s: cleaning up a failed start: %s", self.spec.run_id, exc)
                raise
            self._record_access(check_supervisor=True)

    def watch_access(self) -> None:
        """Before each new job: a recorder that died is started again (a ping when it
        answers, about a millisecond)."""
        self._record_access(check_supervisor=False)

    def _record_access(self, check_supervisor: bool) -> None:
        """Make sure the run's access recorder watches this supervisor's jobs (`access`): at
        every start, before any job, and before each job; where none can, the journal says why
        (once per process: a reason that stands, no volume or a kernel that refuses, is not
        tried again for every command). Never fails a start or a job."""
        if self._access_refused is not None:
            return
        try:
            why = access.start(self.spec.workspace, self.spec.control_dir,
                               self.supervisor_host_pid, inside=self.workspace_inside,
                               readonly=self.spec.readonly_paths,
                               supervisor_socket=self.client.socket_path,
                               token_file=self.client.token_path,
                               check_supervisor=check_supervisor)
        except Exception as exc:  # noqa: BLE001 - jobs run unrecorded, and the record says so
            why = f"the access recorder could not start: {exc}"
            with contextlib.suppress(OSError):
                access.note(access.folder_of(self.spec.control_dir), "error", why=why)
        self._access_refused = why

    def attach(self) -> bool:
        if not self.spec.control_dir.is_dir():
            return False
        with self._start_lock():  # not halfway through another caller's launch
            return self._reattach()

    @contextlib.contextmanager
    def _start_lock(self) -> Iterator[None]:
        """Held while a supervisor is found or launched: two callers starting the same run at
        once must not launch two."""
        with open(self.spec.control_dir / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _reattach(self) -> bool:
        if not self.client.socket_path.exists() or not self.client.load_token():
            return False
        try:
            reply = self.client.call("ping", timeout=3.0)
            if reply.get("deadline") != self.spec.deadline:
                # the spec holds the clock's deadline as it is now: a paused grading clock
                # may have moved it since the supervisor last heard of it
                self.set_deadline(self.spec.deadline)
        except SandboxError:
            self.client.token = None
            return False
        self._reattached(self.client.read_meta())
        log.info("reattached to the supervisor of run %s", self.spec.run_id)
        return True

    def _reattached(self, meta: dict[str, Any]) -> None:
        """Take over what the launcher noted (`client.write_meta`) of the running supervisor."""
        del meta  # nothing, unless the backend noted something

    def _check_deadline(self) -> None:
        if self.spec.deadline <= time.time():
            raise SandboxError("the run's deadline has passed; the sandbox cannot start")

    # -- the supervisor's life -----------------------------------------------------------------

    def alive(self) -> bool:
        return self.client.token is not None and self.client.answers()

    def stop(self) -> None:
        if self.client.token is None:
            self.client.load_token()
        if self.client.token is not None:
            try:
                self.client.call("shutdown", timeout=KILL_TIMEOUT)
            except SandboxError as exc:
                if "not running" not in str(exc):
                    log.warning("supervisor shutdown failed (%s); killing it", exc)
        self._force_stop()
        access.stop(self.spec.control_dir)  # it read what the jobs left, then ended

    def release(self) -> None:
        self._force_stop()
        access.stop(self.spec.control_dir)

    # -- jobs ----------------------------------------------------------------------------------

    def spawn(self, job_id: str, command: str, log_path: str | None = None) -> SandboxJob:
        del log_path  # a job's log is always logs/<job_id>.log, in the supervisor's folder
        fields = {"job_id": job_id, "command": command, "env": self.spec.env}
        return _job(self.client.call("spawn", fields)["job"])

    def wait(self, job_id: str, timeout: float) -> SandboxJob:
        timeout = max(0.0, timeout)
        reply = self.client.call("wait", {"job_id": job_id, "timeout": timeout},
                                 timeout=timeout + CALL_TIMEOUT)
        return _job(reply["job"])

    def get(self, job_id: str) -> SandboxJob:
        return _job(self.client.call("get", {"job_id": job_id})["job"])

    def list(self) -> list[SandboxJob]:
        return [_job(job) for job in self.client.call("list")["jobs"]]

    def wait_any(self, job_ids: list[str], timeout: float) -> list[SandboxJob]:
        timeout = max(0.0, timeout)
        reply = self.client.call("wait_any", {"job_ids": job_ids, "timeout": timeout},
                                 timeout=timeout + CALL_TIMEOUT)
        return [_job(job) for job in reply["jobs"]]

    def kill(self, job_id: str, cause: str = "job_kill", evidence: str = "") -> SandboxJob:
        fields = {"job_id": job_id, "cause": cause, "evidence": evidence}
        return _job(self.client.call("kill", fields, timeout=KILL_TIMEOUT)["job"])

    def set_deadline(self, deadline: float) -> None:
        self.client.call("set_deadline", {"deadline": deadline})


def _job(data: dict[str, Any]) -> SandboxJob:
    return SandboxJob(**{**data, "state": JobState(data["state"])})
