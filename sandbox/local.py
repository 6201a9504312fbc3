"""The `local` backend: one supervisor per run, inside bubblewrap when it is installed.

Only what bubblewrap does is here; the supervisor's protocol, token and files are the shared
client's (`client.py`), as they are for every backend.

The supervisor is launched detached from the caller, in its own session and without
--die-with-parent, so a server killed outright leaves it and its jobs running; a later
`start()` with the same spec reattaches through the socket in `control_dir/sock/`. That socket
is bound here, outside the sandbox, and handed to the supervisor as an inherited descriptor: no
path inside the sandbox leads to it. The token that authenticates calls lives in
`control_dir/token` (0600), which the sandbox never sees.

Inside bubblewrap the supervisor is the pid namespace's init (`--as-pid-1`): jobs cannot signal
it, and killing it from the host ends every process of the run. When the server runs as root,
bubblewrap runs without a user namespace, the supervisor keeps only the capabilities to switch
user, signal and read its jobs' /proc, and every job runs as the sandbox user (`spec.uid`), who
owns the workspace's writable tree. As an ordinary user, jobs share the server's user (an
unprivileged user namespace maps no other) and the walls are the namespaces alone. Every
process of a run is also in the run's cgroup where one can be made (`cgroup.py`): the memory
and process limits (`LocalConfig`), and a second way to kill them all.

The host filesystem is not shown wholesale: only the system folders, a few files of /etc, the
Python prefixes, the workspace (read-write, with `readonly_paths` mounted read-only over it), the
job logs folder (read-only at /a2rl/joblogs, linked from workspace/logs/<job>.log; the
supervisor writes it through a descriptor) and the services folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from a2rl.sandbox.base import (
    BackendConfig,
    SandboxError,
    SandboxSpec,
    give_workspace,
    open_readonly_inputs,
)
from a2rl.sandbox.bwrap_features import bwrap_binds_fds, bwrap_help, open_seccomp
from a2rl.sandbox.cgroup import RunCgroup
from a2rl.sandbox.client import (
    LOGS_INSIDE,
    START_TIMEOUT,
    SUPERVISOR_INSIDE,
    SUPERVISOR_PATH,
    SupervisedSandbox,
    sandbox_env,
    supervisor_args,
    supervisor_caps,
)
from a2rl.sections import Section
from a2rl.settings import Settings, parse_size
from a2rl.units import Size

log = logging.getLogger(__name__)

SANDBOX_VAR = "A2RL_SANDBOX"  # the run's nonce in every job's environment (the unisolated sweep)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = (
    "passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
    "ssl/certs",  # not all of ssl/: ssl/private holds the host's keys
    "ssl/openssl.cnf", "alternatives", "ca-certificates", "ca-certificates.conf",
)


class LocalSettings(Section, place="sandbox.local"):
    """`[sandbox.local]`: the local backend (bubblewrap and a cgroup)."""

    unsafe: bool = Field(False, description="allow the local backend without bubblewrap for "
                         "non-toy tasks")
    memory: Size = Field("32g", description="memory limit of a local run's jobs (a cgroup; "
                         "where none is writable, not limited)")
    pids_limit: int = Field(4096, ge=0, description="process limit of a local run's jobs "
                            "(0: none)")


class LocalConfig(BackendConfig):
    """The local backend's settings: its jobs' limits, held by the run's cgroup. Read from the
    settings at every start (a local run fixes nothing when it is made)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalConfig:
        ours = settings.sandbox.section(LocalSettings)
        return cls(memory=ours.memory, pids_limit=ours.pids_limit)


def local_env(spec: SandboxSpec) -> dict[str, str]:
    """The supervisor's and its jobs' environment (`client.sandbox_env`): the workspace is seen
    at its host path, and the first Python prefix's bin/ leads PATH."""
    bins = [str(spec.python_prefixes[0] / "bin")] if spec.python_prefixes else []
    return sandbox_env(spec, home=str(spec.workspace),
                       path=":".join([*bins, "/usr/local/bin", "/usr/bin", "/bin"]))


def supervisor_python(spec: SandboxSpec) -> str:
    for prefix in spec.python_prefixes:
        for name in ("python3", "python"):
            candidate = prefix / "bin" / name
            if candidate.exists():
                return str(candidate)
    if Path("/usr/bin/python3").exists():
        return "/usr/bin/python3"
    raise SandboxError("no Python interpreter to run the sandbox supervisor")


def host_system_binds() -> list[str]:
    """bubblewrap arguments showing the host's system folders and a few /etc files, read-only:
    enough to run programs, nothing of anyone's data. Shared with the agent's sandbox."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ETC_ENTRIES:
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def open_parents(paths: list[Path]) -> list[str]:
    """bubblewrap arguments making the folders above each mount point traversable.

    bubblewrap copies a missing parent's mode from the host (/root: 0700), which the sandbox
    user could then not cross; only these empty folders of the sandbox's own root are made."""
    args: list[str] = []
    seen: set[Path] = set()
    for path in paths:
        for parent in reversed(path.parents[:-1]):  # from the top down, "/" left out
            if parent in seen or str(parent) in SYSTEM_DIRS or parent == Path("/etc"):
                continue
            seen.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def mask_args(spec: SandboxSpec) -> list[str]:
    """bubblewrap arguments hiding `spec.masked_paths` that a mount above shows: an empty
    read-only tmpfs over a folder, /dev/null over a file. Applied last, so over every bind; a
    path nothing shows is left alone (masking it would only create its name inside)."""
    shown = [*(p.resolve() for p in spec.python_prefixes), spec.workspace.resolve(),
             *(Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d))]
    args: list[str] = []
    for path in spec.masked_paths:
        if not any(path.is_relative_to(root) for root in shown):
            continue
        if path.is_dir():
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    return args


def bwrap_command(bwrap: str, spec: SandboxSpec, nonce: str, inner: list[str],
                  info_fd: int, readonly_fds: dict[str, int] | None = None,
                  seccomp_fd: int | None = None) -> list[str]:
    """The bubblewrap command line; mounts are applied in order, later ones over earlier.

    `readonly_fds` (`base.open_readonly_inputs`) are the read-only inputs, checked and opened
    from a handle on the workspace; they are bound from those descriptors (passed to bwrap)
    where bubblewrap can, else by their checked names. An input not in it is not mounted.
    `seccomp_fd` (`open_seccomp`) holds the filter every process of the run lives under."""
    if os.geteuid() == 0:
        # Real root, no user namespace: the supervisor may then switch its jobs to the sandbox
        # user, and keeps nothing but what that and killing them need.
        args = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not spec.network:
            args.append("--unshare-net")
        args += ["--cap-drop", "ALL"]
        for cap in supervisor_caps():
            args += ["--cap-add", cap]
    else:
        args = [bwrap, "--unshare-all"]
        if spec.network:
            args.append("--share-net")
        if "--disable-userns" in bwrap_help(bwrap):
            # The user namespace bubblewrap makes is the last one: none can be made inside
            # (bubblewrap 0.8+; the seccomp filter refuses it too).
            args += ["--unshare-user", "--disable-userns"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    # The supervisor is pid 1: the kernel drops the signals jobs send it.
    args += ["--as-pid-1", "--info-fd", str(info_fd), "--new-session", "--clearenv"]
    for key, value in {**local_env(spec), SANDBOX_VAR: nonce}.items():
        args += ["--setenv", key, value]
    args += host_system_binds()
    # /dev/shm as on any Linux: multiprocessing's locks and torch's DataLoader workers share
    # memory there (bubblewrap's /dev gives an empty folder only root may write)
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp",
             "--perms", "1777", "--tmpfs", "/dev/shm"]
    mounted = [*spec.python_prefixes, spec.workspace, Path(SUPERVISOR_INSIDE)]
    if spec.services_dir is not None:
        mounted.append(spec.services_dir)
    args += open_parents([p for p in mounted if not str(p).startswith(SYSTEM_DIRS)])
    for prefix in spec.python_prefixes:
        if spec.control_dir.resolve().is_relative_to(prefix.resolve()):
            raise SandboxError(f"python prefix {prefix} would show the sandbox's token inside")
        if prefix.exists():
            args += ["--ro-bind", str(prefix), str(prefix)]
    args += ["--ro-bind", str(SUPERVISOR_PATH), SUPERVISOR_INSIDE]
    workspace = str(spec.workspace)
    args += ["--bind", workspace, workspace]
    by_fd = bwrap_binds_fds(bwrap)
    for rel, fd in (readonly_fds or {}).items():
        path = str(spec.workspace / rel)
        args += ["--ro-bind-fd", str(fd), path] if by_fd else ["--ro-bind", path, path]
    args += ["--ro-bind", str(spec.logs_dir), LOGS_INSIDE]
    if spec.services_dir is not None:
        args += ["--bind", str(spec.services_dir), str(spec.services_dir)]
    args += mask_args(spec)  # last: over the prefixes and the workspace
    args += ["--chdir", workspace, "--", *inner]
    return args




def open_jobs_cgroup(cgroup: RunCgroup) -> tuple[list[int], str]:
    """Descriptors on the files through which jobs enter the jobs' group (the sandbox mounts
    no cgroup folder; the kernel checks the opener's rights), and the supervisor's option for
    them (`RunCgroup.jobs_entry`); none where there is no group."""
    paths, per_thread = cgroup.jobs_entry()
    fds = []
    for path in paths:
        try:
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError as exc:
            log.warning("jobs cannot enter their cgroup %s: %s", path, exc)
    return fds, "--jobs-cgroup-thread-fd" if per_thread else "--jobs-cgroup-fd"


def bind_socket(path: Path) -> socket.socket:
    """A listening unix socket at `path`, reachable only by our user (the folder is 0700)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    old = os.umask(0o077)
    try:
        # Through the folder's descriptor: unix socket paths are limited to 108 bytes.
        sock.bind(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.umask(old)
        os.close(fd)
    sock.listen(512)
    return sock


class LocalSandbox(SupervisedSandbox):
    """Jobs run by a detached supervisor, isolated with bubblewrap when it is installed."""

    config_type = LocalConfig
    settings_section = LocalSettings

    def __init__(self, spec: SandboxSpec, config: BackendConfig | None = None) -> None:
        super().__init__(spec, config)
        self._isolated: bool | None = None
        self._proc: subprocess.Popen[bytes] | None = None  # only when this object launched it

    @property
    def isolated(self) -> bool:
        if self._isolated is None:
            return shutil.which("bwrap") is not None
        return self._isolated

    @property
    def cgroup(self) -> RunCgroup:
        return RunCgroup(self.spec.run_id)

    def _reattached(self, meta: dict[str, Any]) -> None:
        self._isolated = bool(meta.get("isolated", False))

    @classmethod
    def clean_up(cls, live_runs: set[str], store_id: str) -> dict[str, list[str]]:
        """Nothing at server start: a live run's supervisor is found again through its socket
        when first needed, and a finished run's cgroup goes with its finish. The host's run
        cgroups are named by run alone, not by store, so a sweep here could kill the runs of
        another store's server on this machine."""
        del live_runs, store_id
        return {}

    def _launch(self) -> None:
        spec, client = self.spec, self.client
        self._check_deadline()
        if not spec.workspace.is_dir():
            raise SandboxError(f"workspace {spec.workspace} does not exist")
        bwrap = shutil.which("bwrap")
        if bwrap is None and spec.require_isolation:
            raise SandboxError(
                "bubblewrap is required to isolate the sandbox: install `bubblewrap` "
                "or pass --unsafe-local to run commands unisolated"
            )
        # Compiled before anything is made, so that a host without libseccomp gets its one
        # line and no half-started run.
        seccomp_fd = open_seccomp(bwrap) if bwrap else None
        self._force_stop()  # whatever is left of an earlier supervisor of this run
        token = client.new_token()
        nonce = secrets.token_hex(8)
        if bwrap:
            give_workspace(spec)
        cgroup = self.cgroup
        cgroup.create(parse_size(self.config.memory), self.config.pids_limit)
        oom_file = cgroup.oom_file()

        listener = bind_socket(client.socket_path)
        logs_fd = os.open(spec.logs_dir, os.O_RDONLY | os.O_DIRECTORY)
        oom_fd = os.open(oom_file, os.O_RDONLY) if oom_file is not None else None
        readonly_fds = open_readonly_inputs(spec) if bwrap else {}
        jobs_fds, jobs_option = open_jobs_cgroup(cgroup)
        info_read, info_write = os.pipe()
        fds = [listener.fileno(), logs_fd, info_write, *readonly_fds.values(), *jobs_fds] + (
            [oom_fd] if oom_fd is not None else []) + (
            [seccomp_fd] if seccomp_fd is not None else [])
        inner = [
            supervisor_python(spec),
            "-I",
            SUPERVISOR_INSIDE if bwrap else str(SUPERVISOR_PATH),
            "--listen-fd", str(listener.fileno()),
            "--logs-fd", str(logs_fd),
            *supervisor_args(spec, self.config, isolated=bwrap is not None),
            "--logs-view", LOGS_INSIDE if bwrap else str(spec.logs_dir),
        ]
        if oom_fd is not None:
            inner += ["--oom-fd", str(oom_fd)]
        for fd in jobs_fds:
            inner += [jobs_option, str(fd)]
        if bwrap:
            command = bwrap_command(bwrap, spec, nonce, inner, info_write, readonly_fds,
                                    seccomp_fd)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            log.warning(
                "bubblewrap is not installed: run %s executes commands UNISOLATED, with the "
                "whole host filesystem visible",
                spec.run_id,
            )
            inner[0] = sys.executable  # seen as is: no mounts to satisfy
            command = inner
            env = {**local_env(spec), SANDBOX_VAR: nonce}

        try:
            with open(client.log_path, "ab") as out:
                proc = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=spec.workspace,
                    env=env,
                    pass_fds=fds,
                    start_new_session=True,  # survives the caller; no --die-with-parent either
                )
        finally:
            for fd in fds:
                os.close(fd)
            listener.detach()
        supervisor_pid = self._supervisor_pid(proc, info_read) if bwrap else proc.pid
        if supervisor_pid is not None:
            cgroup.add(supervisor_pid)  # before any job exists: every job is born inside
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(token.encode() + b"\n")
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        self._proc = proc
        self._isolated = bwrap is not None
        meta = {
            "pid": proc.pid,
            "pid_start": _start_time(proc.pid),
            "supervisor_pid": supervisor_pid,
            "supervisor_start": _start_time(supervisor_pid) if supervisor_pid else None,
            "nonce": nonce,
            "isolated": self._isolated,
        }
        client.write_meta(meta)

        end = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise SandboxError(
                    f"the sandbox supervisor exited at start (code {proc.returncode}):\n"
                    + client.log_tail()
                )
            try:
                client.call("ping", timeout=1.0)
                return
            except SandboxError:
                if time.monotonic() > end:
                    self._force_stop()
                    raise SandboxError(
                        f"the sandbox supervisor did not answer within {START_TIMEOUT:.0f} s:\n"
                        + client.log_tail()
                    ) from None
            time.sleep(0.02)

    @staticmethod
    def _supervisor_pid(proc: subprocess.Popen[bytes], info_read: int) -> int | None:
        """The host pid of bubblewrap's child, the supervisor, from bwrap's --info-fd."""
        data = b""
        end = time.monotonic() + START_TIMEOUT
        try:
            while time.monotonic() < end:
                ready, _, _ = select.select([info_read], [], [], 0.1)
                if ready:
                    chunk = os.read(info_read, 4096)
                    if not chunk:
                        break
                    data += chunk
                    with contextlib.suppress(ValueError):
                        return int(json.loads(data)["child-pid"])
                elif proc.poll() is not None:
                    break
        finally:
            os.close(info_read)
        return None

    def supervisor_host_pid(self) -> int | None:
        """From the launcher's note, checked by start time (a long-dead pid may be reused)."""
        meta = self.client.read_meta()
        sup = meta.get("supervisor_pid")
        if isinstance(sup, int) and _start_time(sup) == meta.get("supervisor_start"):
            return sup
        return None

    def alive(self) -> bool:
        if self._proc is not None:
            self._proc.poll()  # reap it if it has ended, so no zombie lingers
        return super().alive()

    def _force_stop(self) -> None:
        """Make sure no process of this run is left: the supervisor (the pid namespace's init:
        killing it ends every process in the namespace, a kernel guarantee), the launcher, the
        run's cgroup, and, unisolated without a cgroup, every process carrying its marker."""
        meta = self.client.read_meta()
        sup = meta.get("supervisor_pid")
        # The start time guards against killing a stranger that reused a long-dead pid.
        if isinstance(sup, int) and _start_time(sup) == meta.get("supervisor_start"):
            with contextlib.suppress(OSError):
                os.kill(sup, signal.SIGKILL)
        pid = meta.get("pid")
        ours = isinstance(pid, int) and _start_time(pid) == meta.get("pid_start")
        if ours and self._wait_gone(pid, 5.0):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            self._wait_gone(pid, 2.0)
        cgroup = self.cgroup
        cgroup.kill_all()
        cgroup.remove()
        nonce = meta.get("nonce")
        if not meta.get("isolated") and isinstance(nonce, str) and nonce:
            _kill_marked(nonce)
        with contextlib.suppress(FileNotFoundError):
            self.client.socket_path.unlink()

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        """Wait for pid to end; True when it is still running after `timeout`."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return False
            elif not _pid_running(pid):
                return False
            time.sleep(0.02)
        return True

    # -- jobs ----------------------------------------------------------------------------------



def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[19])


def _pid_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _kill_marked(nonce: str) -> None:
    """SIGKILL host processes carrying this run's marker: the unisolated fallback sweep."""
    marker = f"{SANDBOX_VAR}={nonce}".encode()
    for _ in range(20):
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
        if not found:
            return
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
