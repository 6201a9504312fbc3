"""A warm interpreter for the grader's one-shot processes: `start_python(module, args, ...)`.

Why: every validation and every evaluation runs in a process of its own (it loads untrusted
weights), and almost all of such a process's time was its imports. Measured on the tiny model: a
validation took 4.8 s, of which the same work in a warm interpreter took 0.2 s; the rest was
importing python, torch and transformers, and the modules transformers imports lazily on the
first `from_pretrained`. A fork server (`python -I -m a2rl.grading.prefork`, one per process
that grades, started by its first such process: a server that never grades never pays its
imports) imports all that once; each request forks a child that then is the process
`python -I -m MODULE ARGS` would have been: in a session of its own (the caller kills its
process group at a timeout, as before), in the caller's working folder, with the caller's
environment, stdout on /dev/null and stderr in the caller's file, and its exit status
reported back as the process's return code, with the CPU seconds the kernel counted for it
(`wait4`'s rusage: what a submission's validation cost its run, `Process.cpu_s`). The bounds
stay the child's own: the validator sets its RLIMIT_AS first thing, as it did.

Why forking it is safe: the fork server has one thread (its imports start none, BLAS pools
included, `ForkServer`) and runs no tensor operation (no thread pool, no CUDA context exists to
be copied), and holds nothing of the server (it is
started with a closed set of descriptors and never reads the store). A child dies with the fork
server (PR_SET_PDEATHSIG), and the fork server ends its children and itself when the process
that started it closes the pipe, which the kernel does when that process dies in any way.

Where the fork server cannot serve (it did not start, died, or the caller's environment differs
from the one it started with in what its imports may have read), `start_python` starts the process
the plain way, with the same interface. A caller's environment reaches the child as it is at
the call; only variables the warm imports may have read (`IMPORT_TIME_ENV`) must match. A fork
server whose variables no longer match is replaced by a new one once nothing it started still
runs. `A2RL_PREFORK=0` turns the fork server off (every process started the plain way).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import logging
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Protocol

#: imported once by the fork server: what the grader's processes spend their start on
WARM_MODULES = ("torch", "safetensors.torch", "transformers", "a2rl.grading.validate",
                "a2rl.grading.worker", "a2rl.grading.evaluate", "a2rl.grading.engine",
                "a2rl.grading.engine_select", "a2rl.grading.engine_static")
#: transformers' names resolved lazily on first use (each imports its module); the model
#: families of the built-in base models
WARM_TRANSFORMERS = ("AutoModelForCausalLM", "AutoTokenizer", "PreTrainedTokenizerFast",
                     "GenerationConfig", "LlamaForCausalLM", "Qwen2ForCausalLM",
                     "Qwen3ForCausalLM")
#: environment variables that the warm imports may have read (the rest reach the child as the
#: caller has them now): where one differs from the fork server's, it cannot serve
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE", "TRANSFORMERS_", "TORCH", "PYTORCH_", "CUDA_",
                   "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "TOKENIZERS_", "LD_", "PYTHON")
#: how long a caller waits for the fork server's imports, then for the pid of its child; past
#: either the fork server is taken for broken (stopped, or stuck): it is ended, the process is
#: started the plain way, and the next call starts a new fork server
READY_TIMEOUT_S = 120.0
FORK_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1
log = logging.getLogger(__name__)


def _import_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(IMPORT_TIME_ENV)}


class Process(Protocol):
    """What the callers use of a started process (a `subprocess.Popen` has it too), and the
    CPU seconds the kernel counted for it once it was reaped (`cpu_s`: user plus system time
    from its rusage, its waited-for descendants included; None until then)."""

    pid: int
    returncode: int | None
    cpu_s: float | None

    def wait(self, timeout: float | None = None) -> int: ...


def _cpu_s(usage: resource.struct_rusage) -> float:
    return round(usage.ru_utime + usage.ru_stime, 3)


# -- the fork server's side --------------------------------------------------------------------

def _warm(extra: list[str]) -> None:
    for name in (*WARM_MODULES, *extra):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        import transformers

        for name in WARM_TRANSFORMERS:
            with contextlib.suppress(Exception):
                getattr(transformers, name)


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child(request: dict[str, Any], started: int, inherited: tuple[int, ...]) -> None:
    """In the forked child: become the requested process, run its module's `main`, exit.
    `started` is closed once the child leads its own session: only then does the caller learn
    its pid, so a kill of its process group can never come before the group exists."""
    code = 1
    try:
        os.setsid()
        os.close(started)
        _die_with_parent()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        for fd in inherited:  # the fork server's own pipes: nothing of the child's
            os.close(fd)
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                      0o600)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        module = request["module"]
        sys.argv = [module, *request["args"]]
        result = importlib.import_module(module).main(request["args"])
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # as an interpreter does: the traceback on stderr, exit 1
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(warm: list[str]) -> int:
    """The fork server's loop: requests on stdin, `{"id", "pid"}` and `{"pid", "status"}` lines
    on stdout; ends (killing what it started) when stdin closes. `warm`: more modules to import
    first (the task loader's, which grading knows only by name)."""
    _warm(warm)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return 1  # a CUDA context cannot be forked: the callers start their processes plain
    rd, wr = os.pipe()
    os.set_blocking(wr, False)
    signal.set_wakeup_fd(wr)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the caller's to act on
    out = os.fdopen(os.dup(1), "w", buffering=1)
    children: set[int] = set()
    pending = b""

    def reap() -> None:
        while children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            out.write(json.dumps({"pid": pid, "status": os.waitstatus_to_exitcode(status),
                                  "cpu_s": _cpu_s(usage)}) + "\n")

    out.write(json.dumps({"ready": True}) + "\n")
    while True:
        try:
            readable, _, _ = select.select([0, rd], [], [])
        except InterruptedError:
            readable = []
        if rd in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(rd, 4096)
        reap()
        if 0 not in readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the caller is gone: so is everything it asked for
            for pid in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            started_r, started_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(started_r)
                _child(request, started_w, (rd, wr, out.fileno()))
            os.close(started_w)
            os.read(started_r, 1)  # end of file: the child leads its session, or is gone
            os.close(started_r)
            children.add(pid)
            out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")


# -- the caller's side -------------------------------------------------------------------------

class _Forked:
    """A child of the fork server, waited for like a `Popen`."""

    def __init__(self, pid: int) -> None:
        self.pid: int = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        self._done = threading.Event()

    def _exited(self, status: int, cpu_s: float | None = None) -> None:
        self.returncode, self.cpu_s = status, cpu_s
        self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One fork server process and the thread that reads its reports."""

    def __init__(self) -> None:
        self.env = _import_env()
        # One BLAS thread while importing: numpy's and scipy's OpenBLAS would otherwise each
        # start a pool, and a process that forks should hold no thread but the forking one.
        # The child's own environment is the caller's (`_child`).
        from .seam import task_loader

        try:
            warm = [task_loader().split(":")[0]]
        except RuntimeError:  # no task registry imported here: the children import it
            warm = []
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "a2rl.grading.prefork", *warm], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/",
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        self._lock = threading.Lock()
        self._next = 0
        self._spawned: dict[int, tuple[threading.Event, list[int]]] = {}
        self._children: dict[int, _Forked] = {}
        self.alive, self._closing = True, False
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="a2rl-prefork", daemon=True).start()

    def _read(self) -> None:
        for raw in self._stdout:
            msg = json.loads(raw)
            with self._lock:
                if "ready" in msg:
                    self._ready.set()
                elif "id" in msg:
                    waiting = self._spawned.pop(msg["id"], None)
                    if waiting is None:  # its caller gave up waiting and started it plain
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(msg["pid"], signal.SIGKILL)
                        continue
                    event, slot = waiting
                    slot.append(msg["pid"])
                    self._children[msg["pid"]] = _Forked(msg["pid"])
                    event.set()
                elif msg["pid"] in self._children:  # its pid line always comes first
                    self._children.pop(msg["pid"])._exited(msg["status"], msg.get("cpu_s"))
        with self._lock:  # the fork server ended: its children died with it (PDEATHSIG)
            if not self._closing:
                log.warning("the grader's fork server ended (exit code %s): processes start "
                            "the plain way", self.proc.poll())
            self.alive = False
            self._ready.set()
            for event, _slot in self._spawned.values():
                event.set()
            for child in self._children.values():
                child._exited(-signal.SIGKILL)
            self._children.clear()

    def start(self, module: str, args: list[str], cwd: Path, stderr_path: Path,
              ) -> _Forked | None:
        """A forked child running `module`, or None where this server cannot serve."""
        if not self._ready.wait(timeout=READY_TIMEOUT_S):
            self._give_up("did not finish its imports")
            return None
        with self._lock:
            if not self.alive or _import_env() != self.env:
                return None
            self._next += 1
            event, slot = threading.Event(), []
            self._spawned[self._next] = (event, slot)
            request = {"id": self._next, "module": module, "args": args, "cwd": str(cwd),
                       "stderr": str(stderr_path), "env": dict(os.environ)}
            try:
                self._stdin.write((json.dumps(request) + "\n").encode())
                self._stdin.flush()
            except (BrokenPipeError, OSError):
                self._spawned.pop(self._next, None)
                return None
        event.wait(timeout=FORK_TIMEOUT_S)
        with self._lock:
            if slot:
                return self._children.get(slot[0])
            self._spawned.pop(request["id"], None)
            dead = not self.alive
        if not dead:  # alive but not forking: every later call would wait as long
            self._give_up("did not fork")
        return None

    def idle(self) -> bool:
        """Nothing started by this server is still running or being started."""
        with self._lock:
            return not self._children and not self._spawned

    def _give_up(self, why: str) -> None:
        """Mark this fork server unusable and end it (and, with it, its children)."""
        log.warning("the grader's fork server %s in time (stopped or stuck?): ended; this "
                    "process starts the plain way", why)
        with self._lock:
            self.alive = False
        self.close()

    def close(self) -> None:
        """End the fork server and what it started. Its end of file does both, once its
        imports are done; one still importing (a server ended within seconds of its start) is
        killed, and its children's groups with it."""
        self._closing = True
        with self._lock:
            pids = list(self._children)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_server: ForkServer | None = None
_server_lock = threading.Lock()


def _fork_server() -> ForkServer | None:
    global _server
    with _server_lock:
        # A server imported under other variables (a caller changed HF_HOME, say) would
        # never serve this caller: replaced once nothing it started still runs (ending it
        # ends its children), until then the caller starts the plain way.
        stale = _server is not None and _server.alive and _server.env != _import_env()
        if _server is not None and (not _server.alive or (stale and _server.idle())):
            _server.close()
            _server = None
        if _server is None:
            try:
                _server = ForkServer()
            except OSError:
                return None
        return _server


class _Measured(subprocess.Popen):  # type: ignore[type-arg]
    """A plain process whose reaping keeps its rusage: `Popen.wait` reaps through
    `_try_wait`, which here calls `wait4` instead of `waitpid` (the same status, plus the
    kernel's count of the CPU it used, which is gone once another call reaps it)."""

    cpu_s: float | None = None

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:  # as Popen's own: reaped elsewhere, its status unknown
            return self.pid, 0
        if pid == self.pid:
            self.cpu_s = _cpu_s(usage)
        return pid, status


def start_python(module: str, args: list[str], cwd: Path, stderr_path: Path) -> Process:
    """`python -I -m module args` in a session of its own, stdout on /dev/null and stderr to
    `stderr_path`: a child of the fork server where it can serve, else a plain process."""
    stderr_path.touch(mode=0o600)  # there, even when the process dies before writing to it
    server = _fork_server() if os.environ.get("A2RL_PREFORK", "1") != "0" else None
    child = server.start(module, args, cwd, stderr_path) if server is not None else None
    if child is not None:
        return child
    with stderr_path.open("wb") as err:
        return _Measured([sys.executable, "-I", "-m", module, *args],
                         stdout=subprocess.DEVNULL, stderr=err, cwd=cwd,
                         start_new_session=True)


def run_to_end(proc: Process, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `proc`, then kill its process group whatever ended the wait
    (a timeout, an interrupt, or an exit that left a descendant behind in its session) and reap
    it. Returns whether it timed out. The one ending of every process `start_python` starts."""
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # gone already, or (not root) its number reused by another user's group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return timed_out


@atexit.register
def _shutdown() -> None:
    # at exit, maybe with a second signal arriving (Ctrl-C twice): never a traceback then
    with contextlib.suppress(Exception, KeyboardInterrupt):
        if _server is not None:
            _server.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
