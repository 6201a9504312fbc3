"""Running a program isolated from the grader: the candidate's side of HumanEval grading
(`grader.py`), and `run_program`, the one-process runner kept as the reference.

Every program runs in a fresh interpreter (`python -I -B`, the base interpreter, stdlib only)
in its own session and process group, never in the grader's process:
- a launcher (`_LAUNCHER`, run in the child before `exec`) sets resource limits: RLIMIT_AS
  (memory), RLIMIT_CPU, RLIMIT_FSIZE (output files), RLIMIT_NPROC (processes; not enforced for
  root), RLIMIT_CORE 0, and joins a per-program `pids` cgroup with `pids.max` when this machine
  lets us make one (cgroup v1 `/sys/fs/cgroup/pids` or v2 with the pids controller), which bounds
  a fork bomb even for root;
- when `bwrap` is installed the program runs under `bwrap --unshare-all` (no network, own PID
  namespace, `--die-with-parent`) seeing only the system directories and the interpreter
  read-only, a private /tmp, and a fresh empty working directory; otherwise a plain subprocess
  in a temporary cwd with a minimal environment;
- a wall-clock limit: on timeout the whole process group is killed (SIGKILL), then anything left
  in the cgroup;
- stdout/stderr go to files (bounded by RLIMIT_FSIZE), not pipes.
`run_program` passes a program that exits 0 and, when asked, printed a sentinel. That is no
verdict for model code, which can read and print the sentinel itself: grading runs the tests
in a process of their own (`grader.py`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 1024
DEFAULT_MAX_PROCS = 32
OUTPUT_LIMIT_BYTES = 1 << 20

_LAUNCHER = """
import os, resource, sys
cg, mem, cpu, fsize, nproc = sys.argv[1:6]
if cg:
    try:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass
for lim, val in ((resource.RLIMIT_AS, int(mem)), (resource.RLIMIT_CPU, int(cpu)),
                 (resource.RLIMIT_FSIZE, int(fsize)), (resource.RLIMIT_NPROC, int(nproc)),
                 (resource.RLIMIT_CORE, 0)):
    try:
        resource.setrlimit(lim, (val, val))
    except (ValueError, OSError):
        pass
os.execv(sys.argv[6], sys.argv[6:])
"""


@dataclass
class ExecResult:
    passed: bool
    #: run_program: passed | failed | timeout | no-sentinel;
    #: grader.py: passed | wrong | candidate-error | failed | timeout
    status: str
    returncode: int | None
    duration_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""


def _base_python() -> str:
    exe = getattr(sys, "_base_executable", "") or sys.executable
    return os.path.realpath(exe)


#: The candidate's uid under bubblewrap when the grader is root (the kernel's overflow uid).
NOBODY = 65534


@functools.cache
def _bwrap_can_disable_userns(bwrap: str) -> bool:
    """Whether this bubblewrap has `--disable-userns` (0.8+)."""
    try:
        p = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in p.stdout + p.stderr


def _bwrap_prefix(workdir: Path, python: str) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return []
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # bubblewrap run by root keeps every capability unless told otherwise: the model's code
    # could then make device nodes and mount the host's disk, where the tests' files lie. So it
    # always gets a user namespace of its own, an unprivileged uid and no capability.
    args += ["--unshare-user", "--cap-drop", "ALL"]
    if os.geteuid() == 0:
        args += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    if _bwrap_can_disable_userns(bwrap):
        args.append("--disable-userns")  # no namespace of its own to be root in
    for top in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    prefix = Path(sys.base_prefix).resolve()
    roots = {str(prefix), str(Path(python).parent.parent)}
    for root in sorted(roots):
        if not root.startswith("/usr"):
            args += ["--ro-bind", root, root]
    args += ["--bind", str(workdir), "/work", "--chdir", "/work"]
    return args


def _make_pids_cgroup(max_procs: int) -> Path | None:
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if not (base / "cgroup.procs").exists():
            continue
        if base == Path("/sys/fs/cgroup") and "pids" not in _read(base / "cgroup.controllers"):
            continue
        cg = base / f"a2rl-he-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            cg.mkdir()
            (cg / "pids.max").write_text(str(max_procs))
            return cg
        except OSError:
            with contextlib.suppress(OSError):
                cg.rmdir()
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kill_cgroup(cg: Path | None) -> None:
    if cg is None:
        return
    for _ in range(50):
        pids = [int(p) for p in _read(cg / "cgroup.procs").split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    for _ in range(50):
        try:
            cg.rmdir()
            return
        except OSError:
            time.sleep(0.02)


def tail(path: Path, n: int = 2000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@contextlib.contextmanager
def limited_process(
    work: Path, script: str, args: Sequence[str], *, out_path: Path, err_path: Path,
    timeout_s: float, memory_mb: int = DEFAULT_MEMORY_MB, max_procs: int | None = None,
    sandbox: bool = True, pass_fds: Sequence[int] = (), site: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `python -I -B <work>/<script> <args>` under the limits of the module docstring,
    in `work` (bound to /work under bwrap when `sandbox`), output to the two files; the
    descriptors in `pass_fds` stay open in it. `max_procs` None: no process limit (the tests'
    side, which runs dataset code only). On leaving, the process, its group and its cgroup are
    killed, whatever it left running. `site` False: `python -S`, for stdlib-only code (the
    site module's .pth files cost this interpreter about 25 ms a start)."""
    python = _base_python()
    prefix = _bwrap_prefix(work, python) if sandbox else []
    script_path = f"/work/{script}" if prefix else str(work / script)
    inner = [python, "-I", "-B", *([] if site else ["-S"]), script_path, *args]
    cg = _make_pids_cgroup(max_procs) if max_procs else None
    cmd = [python, "-I", "-S", "-c", _LAUNCHER, str(cg or ""), str(memory_mb << 20),
           str(int(timeout_s) + 1), str(OUTPUT_LIMIT_BYTES), str(max_procs or 4096)]
    cmd += prefix + inner if prefix else inner
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=work, env=env, start_new_session=True,
                                pass_fds=tuple(pass_fds))
    try:
        yield proc
    finally:
        # Anything the program left behind in its group or cgroup dies with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _kill_cgroup(cg)


def run_program(
    program: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_procs: int = DEFAULT_MAX_PROCS,
    sentinel: str | None = None,
    sandbox: bool = True,
) -> ExecResult:
    """Run `program` isolated (see the module docstring). When `sentinel` is given, passing
    also requires it on stdout."""
    with tempfile.TemporaryDirectory(prefix="a2rl-he-") as tmp:
        root = Path(tmp)
        work, io_dir = root / "work", root / "io"
        work.mkdir()
        io_dir.mkdir()
        (work / "program.py").write_text(program)
        out_path, err_path = io_dir / "stdout", io_dir / "stderr"
        started = time.monotonic()
        timed_out = False
        with limited_process(work, "program.py", [], out_path=out_path, err_path=err_path,
                             timeout_s=timeout_s, memory_mb=memory_mb, max_procs=max_procs,
                             sandbox=sandbox) as proc:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
        duration = time.monotonic() - started
        stdout, stderr = tail(out_path), tail(err_path)
    if timed_out:
        return ExecResult(False, "timeout", None, duration, stdout, stderr)
    if proc.returncode != 0:
        return ExecResult(False, "failed", proc.returncode, duration, stdout, stderr)
    if sentinel is not None and sentinel not in stdout:
        return ExecResult(False, "no-sentinel", proc.returncode, duration, stdout, stderr)
    return ExecResult(True, "passed", proc.returncode, duration, stdout, stderr)
