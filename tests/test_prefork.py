"""The grader's warm interpreter (`a2rl.grading.prefork`): a forked child is the process that
`python -I -m MODULE ARGS` would have been, and nothing it starts outlives its caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from a2rl.grading import prefork

VALIDATE = "a2rl.grading.validate"


def _stat(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _blocking_args(tmp_path: Path, cwd: Path) -> list[str]:
    """Validator arguments whose run blocks for good in `cwd`: an empty folder as the copy is
    refused at once, and the verdict is written through `verdict.tmp` there, a FIFO nobody
    reads (the relative `--out` also shows that the child stands in `cwd`)."""
    (tmp_path / "empty").mkdir()
    os.mkfifo(cwd / "verdict.tmp")
    return ["--copy", str(tmp_path / "empty"), "--base", str(tmp_path / "empty"), "--shown",
            "x", "--memory-bytes", str(8 << 30), "--out", "verdict.json"]


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if _stat(pid)[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


def test_a_warm_child_runs_the_module_with_its_arguments_and_exit_code(tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    proc = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, err)
    assert isinstance(proc, prefork._Forked)  # served warm, not started the plain way
    assert proc.wait(timeout=120) == 2  # argparse's usage error, as `python -m` exits
    text = err.read_text()
    assert "usage: python -m a2rl.grading.validate" in text and "are required" in text
    server = prefork._fork_server()
    assert server is not None and server.alive
    # a process that forks holds no other thread (the BLAS pools included)
    assert os.listdir(f"/proc/{server.proc.pid}/task") == [str(server.proc.pid)]


def test_a_warm_child_has_its_own_session_and_folder(tmp_path: Path) -> None:
    prefork._fork_server()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = prefork.start_python(VALIDATE, _blocking_args(tmp_path, cwd), cwd,
                                tmp_path / "stderr")
    assert isinstance(proc, prefork._Forked)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
    state, ppid, pgrp, session = _stat(proc.pid)[:4]
    assert int(pgrp) == int(session) == proc.pid  # leads its session: killpg reaches it all
    assert int(ppid) != os.getpid()  # a child of the fork server, not of this process
    assert os.readlink(f"/proc/{proc.pid}/cwd") == str(cwd)
    os.killpg(proc.pid, signal.SIGKILL)  # what a caller does at its timeout
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_the_child_takes_the_callers_environment_arguments_and_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_child` itself (forked here: /proc shows a forked child's environment as the fork
    server's exec left it, not as the child set it): the caller's variables replace the fork
    server's, `main(args)`'s return is the exit code, stderr goes to the caller's file."""
    probe = types.ModuleType("a2rl_prefork_probe")

    def main(argv: list[str]) -> int:  # fd 2: pytest captures this process's sys.stderr
        os.write(2, json.dumps({"mark": os.environ.get("A2RL_TEST_PREFORK_MARK"),
                                "home": os.environ.get("HOME"), "cwd": os.getcwd(),
                                "argv": argv, "sys.argv": sys.argv}).encode())
        return 7

    probe.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    err = tmp_path / "stderr"
    request = {"module": probe.__name__, "args": ["--flag", "value"], "cwd": str(tmp_path),
               "stderr": str(err), "env": {"A2RL_TEST_PREFORK_MARK": "at-the-call"}}
    started_r, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(started_r)
        prefork._child(request, started_w, ())  # never returns
    os.close(started_w)
    assert os.read(started_r, 1) == b""  # closed once the child led its session
    os.close(started_r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    seen = json.loads(err.read_text())
    assert seen == {"mark": "at-the-call", "home": None, "cwd": str(tmp_path),
                    "argv": ["--flag", "value"], "sys.argv": [probe.__name__, "--flag", "value"]}


def test_an_import_time_variable_changed_since_gets_a_new_server_once_the_old_is_idle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server imported under other variables never serves: while a child of it runs, a
    caller starts the plain way (ending the server would end that child); once it is idle it
    is replaced by one that imported under the caller's variables."""
    old = prefork._fork_server()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    busy = prefork.start_python(VALIDATE, _blocking_args(tmp_path, cwd), cwd, tmp_path / "e0")
    assert isinstance(busy, prefork._Forked)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "a-value-the-imports-did-not-see")
    proc = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e1")
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=120) == 2
    assert prefork._fork_server() is old  # kept: its child still runs
    os.killpg(busy.pid, signal.SIGKILL)
    assert busy.wait(timeout=30) == -signal.SIGKILL
    fresh = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e2")
    assert isinstance(fresh, prefork._Forked) and fresh.wait(timeout=120) == 2
    server = prefork._fork_server()
    assert server is not old and server is not None
    assert server.env["TRANSFORMERS_VERBOSITY"] == "a-value-the-imports-did-not-see"
    assert old is not None and old.proc.poll() is not None
    monkeypatch.undo()
    monkeypatch.setenv("A2RL_PREFORK", "0")  # and the switch that turns it off
    proc = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e3")
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=120) == 2


CALLER = """
import json, sys
from pathlib import Path
from a2rl.grading import prefork
tmp = Path(sys.argv[1])
proc = prefork.start_python("a2rl.grading.validate", json.loads(sys.argv[2]), tmp,
                            tmp / "stderr")
print(json.dumps({"server": prefork._fork_server().proc.pid, "child": proc.pid}), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["killed", "exits"])
def test_the_fork_server_and_its_children_end_with_their_caller(tmp_path: Path,
                                                                 how: str) -> None:
    args = json.dumps(_blocking_args(tmp_path, tmp_path))
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path), args],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert caller.stdout is not None and caller.stdin is not None
    pids = json.loads(caller.stdout.readline())
    time.sleep(1)
    assert not _gone(pids["server"], 0.1) and not _gone(pids["child"], 0.1)
    if how == "killed":
        caller.kill()  # no atexit: the kernel closes its pipe
    else:
        caller.stdin.close()  # a normal exit, with its child still loading
    caller.wait(timeout=60)
    assert _gone(pids["server"]) and _gone(pids["child"])


def test_a_killed_fork_server_takes_its_children_and_the_next_call_starts_a_new_one(
        tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = prefork.start_python(VALIDATE, _blocking_args(tmp_path, cwd), cwd, tmp_path / "err")
    server = prefork._fork_server()
    assert isinstance(proc, prefork._Forked) and server is not None
    server.proc.kill()  # the helper dies mid-request
    assert proc.wait(timeout=30) == -signal.SIGKILL  # the waiting caller is answered
    assert _gone(proc.pid)  # and its child died with it
    again = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "err2")
    assert isinstance(again, prefork._Forked) and again.wait(timeout=120) == 2
    assert prefork._fork_server() is not server


def test_run_to_end_kills_what_a_process_left_in_its_session(tmp_path: Path) -> None:
    """A grader's process that exits normally but left a descendant behind, and one that runs
    past its time: both leave nothing running once `run_to_end` returns."""
    pid_file = tmp_path / "left"
    proc = subprocess.Popen(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; exit 0"],
                            start_new_session=True)
    assert prefork.run_to_end(proc, timeout_s=30) is False and proc.returncode == 0
    assert _gone(int(pid_file.read_text()))  # the descendant went with the group
    slow = subprocess.Popen(["sleep", "300"], start_new_session=True)
    began = time.monotonic()
    assert prefork.run_to_end(slow, timeout_s=0.2) is True
    assert slow.returncode == -signal.SIGKILL and time.monotonic() - began < 10


def test_a_stopped_fork_server_is_ended_and_replaced(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server that no longer forks (SIGSTOP) costs one caller one wait: that call starts
    its process the plain way and ends the stopped server; the next call gets a new one."""
    first = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e1")
    assert isinstance(first, prefork._Forked) and first.wait(timeout=120) == 2
    server = prefork._fork_server()
    assert server is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    monkeypatch.setattr(prefork, "FORK_TIMEOUT_S", 1.0)
    began = time.monotonic()
    plain = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e2")
    assert isinstance(plain, subprocess.Popen) and plain.wait(timeout=120) == 2
    assert time.monotonic() - began < 60
    assert server.proc.poll() is not None and _gone(server.proc.pid)  # ended, not left stopped
    again = prefork.start_python(VALIDATE, ["--no-such-flag"], tmp_path, tmp_path / "e3")
    assert isinstance(again, prefork._Forked) and again.wait(timeout=120) == 2
    assert prefork._fork_server() is not server
