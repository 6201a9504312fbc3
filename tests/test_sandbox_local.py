"""The local sandbox backend, exercised for real: bubblewrap, a detached supervisor, /proc."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from a2rl.sandbox import seccomp
from a2rl.sandbox.base import JobState, Sandbox, SandboxError, SandboxSpec
from a2rl.sandbox.local import LocalConfig, LocalSandbox

from .conftest import require, require_bwrap
from .helpers import wait_for

pytestmark = pytest.mark.timeout(120)

MakeSandbox = Callable[..., LocalSandbox]


def make_spec(tmp_path: Path, **overrides: object) -> SandboxSpec:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    fields: dict[str, object] = {
        "run_id": f"test-{random.randrange(1 << 40):x}",  # one cgroup per sandbox
        "workspace": workspace,
        "control_dir": tmp_path / "control",
        "deadline": time.time() + 300,
        "python_prefixes": [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()],
    }
    fields.update(overrides)
    return SandboxSpec.model_validate(fields)


@pytest.fixture(params=["bwrap", "unisolated"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    if request.param == "bwrap":
        require_bwrap()
    else:
        # A PATH without bwrap on it is how the backend sees a machine without bubblewrap.
        empty = tmp_path / "no-bwrap"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
    return str(request.param)


@pytest.fixture
def make_sandbox(tmp_path: Path, mode: str) -> Iterator[MakeSandbox]:
    started: list[LocalSandbox] = []

    def make(**overrides: object) -> LocalSandbox:
        overrides.setdefault("require_isolation", mode == "bwrap")
        sandbox = LocalSandbox(make_spec(tmp_path, **overrides))
        sandbox.start()
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in started:
        sandbox.stop()


@pytest.fixture
def bwrap_sandbox(tmp_path: Path) -> Iterator[MakeSandbox]:
    require_bwrap()
    started: list[LocalSandbox] = []

    def make(config: LocalConfig | None = None, **overrides: object) -> LocalSandbox:
        sandbox = LocalSandbox(make_spec(tmp_path, **overrides), config)
        sandbox.start()
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in started:
        sandbox.stop()


def run(sandbox: LocalSandbox, command: str, timeout: float = 30) -> tuple[int | None, str]:
    """Run one command to its end; return its exit code and its log."""
    job_id = f"j{random.randrange(1 << 30)}"
    sandbox.spawn(job_id, command)
    job = sandbox.wait(job_id, timeout)
    assert job.state == JobState.exited, job
    assert job.log_path == f"logs/{job_id}.log"
    log = (sandbox.spec.logs_dir / f"{job_id}.log").read_bytes().decode("utf-8", "replace")
    return job.exit_code, log


def host_pids(tag: str) -> list[int]:
    """Host pids of live `sleep` processes whose argument holds `tag` (pids differ in a pid ns;
    matching the job's own shell, whose command line holds the tag too, is avoided)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE or len(cmdline) != 2:
                continue
            if os.path.basename(cmdline[0]) == "sleep" and tag in cmdline[1]:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found



# -- jobs (both modes) -------------------------------------------------------------------------


def test_satisfies_protocol(tmp_path: Path) -> None:
    assert isinstance(LocalSandbox(make_spec(tmp_path)), Sandbox)


def test_spawn_wait_and_exit_codes(make_sandbox: MakeSandbox, mode: str) -> None:
    sandbox = make_sandbox()
    assert sandbox.isolated is (mode == "bwrap")
    assert run(sandbox, "true")[0] == 0
    code, log = run(sandbox, "echo out; echo err >&2; exit 3")
    assert code == 3
    assert log == "out\nerr\n"
    # Killed by a signal it sent itself: it still ended by itself, and the code is -signal.
    assert run(sandbox, "kill -9 $$")[0] == -9
    code, log = run(sandbox, 'pwd; echo "$HOME"; read line; echo "read=$?"; ls /proc/$$/fd; true')
    # stdin is /dev/null and nothing of the supervisor (socket, pipes, other logs) leaks in.
    assert log.splitlines() == [str(sandbox.spec.workspace)] * 2 + ["read=1", "0", "1", "2"]

    job = sandbox.spawn("slow", "sleep 30")
    assert job.state == JobState.running and job.log_path == "logs/slow.log"
    assert sandbox.wait("slow", 0.2).state == JobState.running
    assert [j.job_id for j in sandbox.list()].count("slow") == 1
    killed = sandbox.kill("slow")
    assert killed.state == JobState.killed and killed.exit_code == -9
    assert killed.ended_at is not None

    with pytest.raises(SandboxError, match="no job"):
        sandbox.get("missing")
    with pytest.raises(SandboxError, match="already exists"):
        sandbox.spawn("slow", "true")
    with pytest.raises(SandboxError, match="bad job id"):
        sandbox.spawn("../escape", "true")


def test_log_takes_invalid_utf8_and_large_output(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    sandbox.spawn("bin", r"printf 'a\xff\xfeb\n'; head -c 10000000 /dev/zero | tr '\0' x")
    job = sandbox.wait("bin", 60)
    assert job.exit_code == 0
    data = (sandbox.spec.logs_dir / "bin.log").read_bytes()
    assert data.startswith(b"a\xff\xfeb\n")
    assert len(data) == 5 + 10_000_000


def test_kill_leaves_no_descendant(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    tag = f"{random.randrange(10**6, 10**7)}"
    # A plain background child, a setsid'd shell, and a double-forked daemon that also drops
    # the job's marker variable: every one must die with the job.
    command = textwrap.dedent(
        f"""
        sleep 1000.{tag}1 &
        setsid sh -c 'sleep 1000.{tag}2; true' &
        ( ( env -u A2RL_JOB setsid sleep 1000.{tag}3 & ) & )
        sleep 1000.{tag}4
        """
    )
    sandbox.spawn("tree", command)
    assert wait_for(lambda: len(host_pids(f"1000.{tag}")) == 4), host_pids(f"1000.{tag}")
    job = sandbox.kill("tree")
    assert job.state == JobState.killed
    assert wait_for(lambda: not host_pids(f"1000.{tag}"), 5), host_pids(f"1000.{tag}")


def test_kill_after_exit_sweeps_leftovers(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    tag = f"{random.randrange(10**6, 10**7)}"
    sandbox.spawn("bg", f"setsid sleep 1000.{tag} > /dev/null 2>&1 &")
    assert sandbox.wait("bg", 10).state == JobState.exited
    assert wait_for(lambda: len(host_pids(f"1000.{tag}")) == 1)
    assert sandbox.kill("bg").state == JobState.exited  # it had ended by itself
    assert wait_for(lambda: not host_pids(f"1000.{tag}"), 5)


def test_deadline_stops_jobs_and_supervisor(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    tag = f"{random.randrange(10**6, 10**7)}"
    sandbox.spawn("long", f"sleep 1000.{tag}")
    assert wait_for(lambda: len(host_pids(f"1000.{tag}")) == 1)
    sandbox.set_deadline(time.time() + 1.0)
    job = sandbox.wait("long", 20)
    assert job.state == JobState.timeout
    assert job.exit_code == -9
    assert wait_for(lambda: not sandbox.alive(), 10)
    assert not host_pids(f"1000.{tag}")
    with pytest.raises(SandboxError, match="supervisor is not running"):
        sandbox.get("long")


def test_reattaching_hands_over_the_specs_deadline(make_sandbox: MakeSandbox) -> None:
    """A sandbox built again (another process, a later call) holds the run's clock as it is
    now: reattaching gives the running supervisor that deadline, which a paused grading clock
    may have moved while nobody was attached. `attach` never starts a supervisor."""
    first = make_sandbox()
    pid = first.client.call("ping")["pid"]
    later = first.spec.deadline + 100
    assert LocalSandbox(first.spec.model_copy(update={"deadline": later})).attach()
    assert first.client.call("ping")["deadline"] == later
    again = LocalSandbox(first.spec.model_copy(update={"deadline": later + 50}))
    again.start()  # reattached: the same supervisor, told the new deadline
    pong = again.client.call("ping")
    assert (pong["ok"], pong["pid"], pong["deadline"]) == (True, pid, later + 50)
    first.stop()
    assert not LocalSandbox(first.spec).attach()
    assert not first.alive()


def test_stop_is_idempotent(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    tag = f"{random.randrange(10**6, 10**7)}"
    sandbox.spawn("long", f"sleep 1000.{tag}")
    assert wait_for(lambda: len(host_pids(f"1000.{tag}")) == 1)
    sandbox.stop()
    sandbox.stop()
    assert not sandbox.alive()
    assert not host_pids(f"1000.{tag}")
    with pytest.raises(SandboxError, match="supervisor is not running"):
        sandbox.list()


def test_reattach_after_the_caller_is_killed(tmp_path: Path, mode: str) -> None:
    spec = make_spec(tmp_path, require_isolation=mode == "bwrap")
    tag = f"{random.randrange(10**6, 10**7)}"
    # A separate "server" process starts the sandbox and a job, then dies by SIGKILL.
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from a2rl.sandbox.base import SandboxSpec
        from a2rl.sandbox.local import LocalSandbox
        sandbox = LocalSandbox(SandboxSpec.model_validate_json(sys.argv[1]))
        sandbox.start()
        sandbox.spawn("survivor", "echo started; sleep 1000.{tag}")
        print("spawned", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    server = subprocess.run(
        [sys.executable, "-c", script, spec.model_dump_json()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert server.returncode == -signal.SIGKILL, server.stderr
    assert "spawned" in server.stdout

    sandbox = LocalSandbox(spec)
    try:
        sandbox.start()
        assert sandbox.isolated is (mode == "bwrap")
        job = sandbox.get("survivor")
        assert job.state == JobState.running
        assert sandbox.wait("survivor", 0.3).state == JobState.running
        assert wait_for(lambda: (spec.logs_dir / "survivor.log").read_text() == "started\n")
        assert host_pids(f"1000.{tag}")
        assert sandbox.kill("survivor").state == JobState.killed
        assert wait_for(lambda: not host_pids(f"1000.{tag}"), 5)
    finally:
        sandbox.stop()


def test_long_control_dir_path(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    deep = tmp_path / ("c" * 60) / ("d" * 60)
    sandbox = make_sandbox(control_dir=deep)
    assert len(str(deep / "sock" / "supervisor.sock")) > 108
    assert run(sandbox, "true")[0] == 0


def test_requests_need_the_token(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    sock_path = sandbox.spec.control_dir / "sock" / "supervisor.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(sock_path))
        sock.sendall(json.dumps({"token": "guess", "op": "list"}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    assert reply == {"ok": False, "error": "bad token"}
    assert (sandbox.spec.control_dir / "token").stat().st_mode & 0o777 == 0o600
    # with the token: an operation the dispatch table lacks is refused by name, and one line
    # that is not a request object gets its error, on the same connection
    with pytest.raises(SandboxError, match="unknown op 'format_disk'"):
        sandbox.client.call("format_disk")
    with pytest.raises(SandboxError, match="unknown op \\['ping'\\]"):
        sandbox.client.call(["ping"])  # type: ignore[arg-type]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(sock_path))
        reader = sock.makefile()
        sock.sendall(b"[1, 2]\n")
        assert "a request is a JSON object" in json.loads(reader.readline())["error"]
        sock.sendall(json.dumps({"token": sandbox.client.token, "op": "ping"}).encode() + b"\n")
        assert json.loads(reader.readline())["ok"] is True


def test_every_documented_operation_is_dispatched() -> None:
    """The protocol the supervisor's docstring lists is its dispatch table, in order."""
    from a2rl.sandbox import supervisor
    from a2rl.sandbox.supervisor.dispatch import Dispatcher

    documented = re.findall(r"^    (\w+) .*->", supervisor.__doc__ or "", re.MULTILINE)
    assert documented == list(Dispatcher.OPS)


def test_environment_is_scrubbed(
    make_sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "sk-secret")
    sandbox = make_sandbox(env={"TASK_VAR": "allowed"})
    code, log = run(sandbox, 'echo "${FAKE_API_KEY-absent} $TASK_VAR $HF_HUB_OFFLINE"; python -V')
    assert code == 0
    assert log.splitlines()[0] == "absent allowed 1"
    assert log.splitlines()[1].startswith("Python 3")


def test_written_files_belong_to_the_jobs_user(make_sandbox: MakeSandbox, mode: str) -> None:
    sandbox = make_sandbox()
    assert run(sandbox, "mkdir -p out && echo x > out/f")[0] == 0
    # Isolated as root, jobs run as the sandbox user; otherwise as the server's own user.
    uid, gid = sandbox.spec.job_user() if mode == "bwrap" else (os.getuid(), os.getgid())
    for path in (sandbox.spec.workspace / "out", sandbox.spec.workspace / "out" / "f"):
        assert path.stat().st_uid == uid
        assert path.stat().st_gid == gid


def test_refuses_to_run_unisolated_when_isolation_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox = LocalSandbox(make_spec(tmp_path, require_isolation=True))
    with pytest.raises(SandboxError, match="bubblewrap is required.*--unsafe-local"):
        sandbox.start()


def test_start_after_the_deadline_fails(tmp_path: Path) -> None:
    sandbox = LocalSandbox(make_spec(tmp_path, deadline=time.time() - 1, require_isolation=False))
    with pytest.raises(SandboxError, match="deadline"):
        sandbox.start()


# -- isolation (bubblewrap only) ---------------------------------------------------------------


def test_sandbox_hides_the_host(bwrap_sandbox: MakeSandbox, tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "hidden.jsonl").write_text("answers\n")
    sandbox = bwrap_sandbox()
    ws = sandbox.spec.workspace
    assert run(sandbox, f"cat {store}/hidden.jsonl")[0] != 0
    assert run(sandbox, "cat ../store/hidden.jsonl")[0] != 0
    assert run(sandbox, f"cat {sandbox.spec.control_dir}/token")[0] != 0
    assert run(sandbox, f"ls {tmp_path}")[1].split() == ["ws"]  # not even the socket
    assert run(sandbox, f"test -e {ws} && test -w {ws}")[0] == 0
    if os.access("/root", os.W_OK):
        with tempfile.NamedTemporaryFile(dir="/root", prefix="a2rl-secret-") as secret:
            secret.write(b"secret")
            secret.flush()
            assert run(sandbox, f"cat {secret.name}")[0] != 0
    # The home folder only shows the Python prefixes under it, not its other files.
    assert "a2rl-secret" not in run(sandbox, "ls -a /root 2>&1")[1]


def test_readonly_paths_cannot_be_written(bwrap_sandbox: MakeSandbox, tmp_path: Path) -> None:
    data = tmp_path / "ws" / "data"
    data.mkdir(parents=True)
    (data / "input.txt").write_text("given\n")
    sandbox = bwrap_sandbox(readonly_paths=["data"])
    assert run(sandbox, "cat data/input.txt")[1] == "given\n"
    assert run(sandbox, "echo changed > data/input.txt")[0] != 0
    assert run(sandbox, "touch data/new")[0] != 0
    assert run(sandbox, "rm data/input.txt")[0] != 0
    assert (data / "input.txt").read_text() == "given\n"
    assert run(sandbox, "echo fine > elsewhere.txt")[0] == 0


def test_no_network(bwrap_sandbox: MakeSandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        sandbox = bwrap_sandbox()
        code, log = run(sandbox, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
        assert code != 0 and "connected" not in log
        # A task that allows the network shares the host's.
        online = bwrap_sandbox(control_dir=sandbox.spec.control_dir.with_name("c2"), network=True)
        assert run(online, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")[1] == (
            "connected\n"
        )
        code, log = run(online, "python -c 'import ssl; ssl.create_default_context()'")
        assert code == 0, log


def test_private_tmp(bwrap_sandbox: MakeSandbox) -> None:
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="a2rl-host-") as host_file:
        sandbox = bwrap_sandbox()
        assert run(sandbox, f"test -e {host_file.name}")[0] != 0
        name = f"a2rl-inside-{random.randrange(1 << 30)}"
        assert run(sandbox, f"echo x > /tmp/{name} && cat /tmp/{name}")[0] == 0
        assert not Path("/tmp", name).exists()


def test_supervisor_log_is_shown_when_start_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor's own words reach the caller, and the failed start leaves nothing: the
    run's cgroup made for it goes (it stayed, one empty folder per failed start)."""
    require_bwrap()
    from a2rl.sandbox import local

    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit('supervisor broke on purpose')\n")
    monkeypatch.setattr(local, "SUPERVISOR_PATH", broken)
    sandbox = LocalSandbox(make_spec(tmp_path))
    made: list[bool] = []  # what each cgroup creation returned
    create = local.RunCgroup.create

    def recorded_create(self: local.RunCgroup, *args: int) -> bool:
        made.append(create(self, *args))
        return made[-1]

    monkeypatch.setattr(local.RunCgroup, "create", recorded_create)
    with pytest.raises(SandboxError, match="(?s)exited at start.*broke on purpose"):
        sandbox.start()
    assert not sandbox.client.socket_path.exists()
    require(made == [True], "no run cgroup can be made here (not root, or no writable cgroup)")
    assert not sandbox.cgroup.exists


def test_shared_memory_works(bwrap_sandbox: MakeSandbox) -> None:
    """multiprocessing's locks and torch's DataLoader workers need a writable /dev/shm."""
    code, log = run(bwrap_sandbox(), "python3 -c 'import multiprocessing as m; l = m.Lock(); "
                                     "print(l.acquire())'")
    assert (code, log.strip()) == (0, "True"), log


# -- the seccomp filter ------------------------------------------------------------------------


def test_the_filter_compiles_for_both_architectures() -> None:
    """Each architecture gets its own syscall numbers, and its other ABIs (i386, x32, arm)
    end the process instead of reaching the kernel under numbers no rule names."""
    try:
        seccomp.program()
    except seccomp.SeccompUnavailable as exc:
        require(False, str(exc))
    for arch, unshare, clone3 in (("x86_64", 272, 435), ("aarch64", 97, 435)):
        program = seccomp.program(arch)
        assert program and len(program) % 8 == 0  # whole struct sock_filter entries
        text = seccomp.describe(arch)
        assert f"# filter for arch {arch} " in text and text.count("# filter for arch") == 1
        assert f'"unshare" ({unshare})' in text and f'"clone3" ({clone3})' in text
        assert "# invalid architecture action\naction KILL_PROCESS;" in text
        assert "# default action\n  action ALLOW;" in text


def test_a_host_without_libseccomp_gets_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_bwrap()

    def missing() -> None:
        raise seccomp.SeccompUnavailable("the sandbox's seccomp filter needs libseccomp: "
                                         "install the `libseccomp2` package")

    seccomp.program.cache_clear()
    monkeypatch.setattr(seccomp, "_library", missing)
    try:
        sandbox = LocalSandbox(make_spec(tmp_path))
        with pytest.raises(SandboxError) as info:
            sandbox.start()
        assert "libseccomp2" in str(info.value) and "\n" not in str(info.value)
        assert not (tmp_path / "control" / "supervisor.json").exists()  # nothing was started
    finally:
        seccomp.program.cache_clear()


# -- a killed job's processes ------------------------------------------------------------------


FORK_BOMB = "python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass'"
#: forks 50 children at once, with no retry: it fails where the process limit is still full
FORK_50 = ("sleep 0.5; python3 -c 'import os\nfailed = 0\nfor i in range(50):\n    try:\n"
           "        if os.fork() == 0: os._exit(0)\n    except OSError: failed += 1\n"
           "print(\"failed\", failed)'")


def test_a_killed_jobs_processes_are_reaped_before_the_next_job_starts(
        bwrap_sandbox: MakeSandbox) -> None:
    """A fork bomb ended at the process limit leaves a hundred dying processes, which count
    against the jobs' limit until they are reaped: the next job starts only once they are
    gone, so it has the whole limit (once, on a loaded machine, `echo alive` could not fork
    and ended with 127 and no output)."""
    require(os.geteuid() == 0, "a pids cgroup needs root on this machine")
    sandbox = bwrap_sandbox(LocalConfig(pids_limit=64))
    cgroup = sandbox.cgroup
    group = cgroup.paths.get("pids") or cgroup.paths.get("")
    require(group is not None and (group / "jobs" / "pids.current").exists(),
            "no writable pids cgroup on this machine")
    assert group is not None
    for round_ in range(8):  # the race is lost in about half the rounds without the wait
        sandbox.spawn(f"bomb{round_}", FORK_BOMB)
        bomb = sandbox.wait(f"bomb{round_}", 60)
        assert bomb.state == JobState.killed and "process limit 64" in bomb.reason, bomb
        sandbox.spawn(f"next{round_}", FORK_50)
        # the supervisor's forker thread, the new job's shim and its shell
        current = int((group / "jobs" / "pids.current").read_text())
        assert current <= 8, (round_, current)
        job = sandbox.wait(f"next{round_}", 60)
        log = (sandbox.spec.logs_dir / f"next{round_}.log").read_text()
        assert (job.exit_code, log.strip()) == (0, "failed 0"), log
