"""Shared fixtures. A missing dependency skips a test on a user's machine but fails it in CI."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Files side by side (pytest-xdist, one worker per core): numeric libraries get one thread each,
# before anything imports torch. Two trainings whose OpenMP threads spin on the same two cores
# ran 8x slower than with a thread each. Graders and agents inherit this; sandbox jobs get it
# through `sandbox.base.THREAD_VARS`.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

from a2rl.settings import Settings  # noqa: E402
from a2rl.store import Store

from .audit_guard import expect_cheating, sqlite_findings

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(condition: bool, reason: str) -> None:
    """Skip when `condition` is false, except in CI where the missing piece is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and a required dependency is missing: {reason}")
    pytest.skip(reason)


def require_bwrap() -> None:
    require(shutil.which("bwrap") is not None,
            "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")


# PostgreSQL on loopback (`postgres`) and a store URL per dialect (`db_url`); after `require`,
# which tests/pg.py imports.
from .pg import db_url, postgres  # noqa: E402, F401


@pytest.fixture(scope="session")
def a2rl_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home per test session, so that the tiny base model is built once."""
    return tmp_path_factory.mktemp("a2rl-home")


@pytest.fixture
def settings(a2rl_home: Path, tmp_path: Path) -> Settings:
    return Settings(home=a2rl_home, db_url=f"sqlite:///{tmp_path / 'a2rl.db'}")


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store(settings.database_url)
    yield s
    s.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with an end-to-end training run (marked slow) first, in their order: with files
    side by side (pytest-xdist, a file per worker, `--no-loadscope-reorder` so that this order
    is the order files are handed out) the long ones then overlap the many short ones instead
    of ending the session alone on one core."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: order within a file kept


@pytest.fixture(autouse=True, scope="session")
def _fixture_task() -> None:
    from . import fixture_task  # noqa: F401  (registers the task)


def _kernel_leftovers(base: Path) -> list[str]:
    """The mounts, loop devices and run cgroups of this session's runs (everything under its
    own temporary folder `base`, and the cgroups named after the runs made there: another
    session on the machine has its own folder and run ids)."""
    from a2rl.sandbox import volume
    from a2rl.sandbox.cgroup import RunCgroup

    prefix = str(base) + "/"
    with open("/proc/self/mountinfo") as f:
        found = [f"mount {p}" for p in (line.split()[4] for line in f) if p.startswith(prefix)]
    found += [f"loop device {d['name']} on {d.get('back-file')}" for d in volume._loop_devices()
              if str(d.get("back-file") or "").startswith(prefix)]
    run_ids = {p.name for pattern in ("*/runs/r-*", "*/*/runs/r-*") for p in base.glob(pattern)}
    found += [f"cgroup of run {rid}" for rid in sorted(run_ids) if RunCgroup(rid).exists]
    found += [f"access recorder {pid}" for pid in _recorders(base)]
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _recorders(base: Path) -> list[int]:
    """The access recorders (sandbox/recorder/) of this session's runs that outlived
    their run's supervisor: each must end with it (a run a test left unfinished keeps its
    sandbox, and its recorder with it, as a user's open run does)."""
    from a2rl.sandbox.access import RECORDER_PATH

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (str(RECORDER_PATH).encode() not in argv or not _running(int(name))
                or not any(a.startswith(str(base).encode() + b"/") for a in argv)):
            continue
        supervisor = argv[argv.index(b"--supervisor-pid") + 1] if (
            b"--supervisor-pid" in argv[:-1]) else b""
        if not supervisor.isdigit() or not _running(int(supervisor)):
            found.append(int(name))
    return found


@pytest.fixture(autouse=True, scope="session")
def _leave_no_kernel_resource(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Leave nothing behind: at the end of the session no mount, loop device or cgroup of the
    suite's runs may remain, or the session fails (after removing them, so one failure does
    not leak into the next session). Runs a test made and never finished keep their workspace
    volume mounted, as a user's open run does: those are unmounted first, as `finish_run`
    would; what is left after that (a loop device something still holds, a run's cgroup whose
    sandbox was never stopped) is a leak."""
    yield
    base = tmp_path_factory.getbasetemp().resolve()
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(str(base) + "/")), reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=60)
    deadline = time.monotonic() + 10  # a loop device goes a moment after its last unmount
    while (leaks := _kernel_leftovers(base)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not leaks:
        return
    from a2rl.sandbox import volume
    from a2rl.sandbox.cgroup import RunCgroup

    for d in volume._loop_devices():
        if str(d.get("back-file") or "").startswith(str(base) + "/"):
            subprocess.run(["losetup", "--detach", d["name"]], capture_output=True, timeout=60)
    for pid in _recorders(base):  # this session's own, by their ids
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for leak in leaks:
        if leak.startswith("cgroup of run "):
            cgroup = RunCgroup(leak.removeprefix("cgroup of run "))
            cgroup.kill_all()
            cgroup.remove()
    pytest.fail("the test session left kernel resources behind: " + "; ".join(leaks))


@pytest.fixture(autouse=True)
def _mark_cheating_stores(request: pytest.FixtureRequest) -> None:
    """A test marked `cheats` leaves the mark in its temporary folder: the session's audit
    check (tests/audit_guard.py) then expects its runs' high flags."""
    if request.node.get_closest_marker("cheats") and "tmp_path" in request.fixturenames:
        expect_cheating(request.getfixturevalue("tmp_path"))


@pytest.fixture(autouse=True, scope="session")
def _no_honest_run_is_flagged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every run the session made and audited raises no high flag, unless its test cheats on
    purpose (issue 25: the audit is quiet where it should be, on every run, not a corpus)."""
    yield
    found = sqlite_findings(tmp_path_factory.getbasetemp().resolve())
    if found:
        pytest.fail(f"{len(found)} honest runs raised a high audit flag (mark a test that "
                    "cheats on purpose with @pytest.mark.cheats): " + " | ".join(found[:20]))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"



def require_docker() -> str:
    """A running Docker engine and the offline sandbox image; returns the image tag."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:
        require(False, f"no Docker engine answers ({exc}): run scripts/docker-engine.sh")
    from a2rl.sandbox.docker import TEST_IMAGE

    try:
        client.images.get(TEST_IMAGE)
    except Exception:
        require(False, f"the sandbox test image {TEST_IMAGE} is missing: run "
                       "docker/build-test-image.sh")
    return TEST_IMAGE


def backend_settings(settings: Settings, backend: str) -> Settings:
    """The settings for a parametrized backend, skipping (or failing in CI) when it is missing."""
    if backend == "docker":
        image = require_docker()
        return settings.updated({"sandbox.backend": "docker", "sandbox.docker.image": image})
    require_bwrap()
    return settings


@pytest.fixture(scope="session")
def agent_clis() -> Path:
    """Install the pinned CLIs once (the script is idempotent); their bin folder."""
    require(shutil.which("npm") is not None, "npm is not installed (Node >= 20 is needed)")
    script = Path(__file__).resolve().parents[1] / "scripts" / "agent-clis.sh"
    p = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return Path(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def openhands_cli() -> Path:
    """Install the pinned OpenHands CLI once into its own environment (Python 3.12, found by
    the script); its bin folder."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "openhands.sh"
    p = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    require(p.returncode == 0 or "needs Python 3.12" not in p.stderr,
            "no Python 3.12 for the OpenHands CLI (see scripts/openhands.sh)")
    assert p.returncode == 0, p.stderr[-3000:]
    return Path(p.stdout.strip().splitlines()[-1])
