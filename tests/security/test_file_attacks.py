"""Attacks on the file tools: symlinks, races, FIFOs, deep trees, long paths, huge edits.

Each test is a hostile agent on a real run (both backends): its jobs plant what the kernel must
refuse, and the test looks at the host (a canary folder outside the workspace) afterwards.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
import pytest

from a2rl.analysis.report import build_report
from a2rl.server import finish_run
from a2rl.store import RunStatus

from .conftest import Agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

#: Flips a folder with a symlink to the host canary (renameat2 RENAME_EXCHANGE: atomic), as
#: fast as it can, until code/stop appears; writes how many flips it made.
FLIPPER = """
import ctypes, os, sys
canary = sys.argv[1]
os.makedirs("code/flip", exist_ok=True)
open("code/flip/secret.txt", "w").write("safe\\n")
if os.path.lexists("code/other"):
    os.unlink("code/other")
os.symlink(canary, "code/other")
libc = ctypes.CDLL(None, use_errno=True)
n = 0
open("code/started", "w").write("1")
while not os.path.exists("code/stop") and n < 2_000_000:
    if libc.renameat2(-100, b"code/flip", -100, b"code/other", 2) != 0:
        raise SystemExit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    n += 1
open("code/flips", "w").write(str(n))
"""


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host folder outside every workspace: nothing may read, list or change it."""
    d = tmp_path / "canary"
    d.mkdir()
    (d / "secret.txt").write_text("CANARY-7f3a\n")
    (d / "canary_only.txt").write_text("CANARY-7f3a\n")
    return d


def _untouched(canary: Path) -> None:
    assert sorted(p.name for p in canary.iterdir()) == ["canary_only.txt", "secret.txt"]
    assert (canary / "secret.txt").read_text() == "CANARY-7f3a\n"


async def test_racing_folder_flip_never_reaches_the_host(agent: Agent, canary: Path) -> None:
    await agent.ok("edit_file", path="code/flipper.py", new_text=FLIPPER)
    job = await agent.sh(f"python code/flipper.py {canary}", wait_s=0)
    ws = Path(agent.run.workspace)
    for _ in range(100):
        if (ws / "code" / "started").exists():
            break
        await anyio.sleep(0.05)
    for _ in range(80):
        r = await agent.call("read_file", path="code/flip/secret.txt")
        assert "CANARY" not in str(r.content), "a host file was read"
        r = await agent.call("list_files", path="code/flip")
        assert "canary_only" not in str(r.content), "a host folder was listed"
        await agent.call("edit_file", path="code/flip/secret.txt", new_text="pwned\n")
        await agent.call("edit_file", path="code/flip/new.txt", new_text="pwned\n")
    await agent.ok("edit_file", path="code/stop", new_text="")
    await agent.ok("job_status", job_id=job["job_id"], wait_s=20)
    flips = int((ws / "code" / "flips").read_text())
    assert flips > 300, f"the race did not run ({flips} flips)"
    _untouched(canary)


async def test_symlink_planted_by_a_job_is_refused(agent: Agent, canary: Path) -> None:
    await agent.sh(f"ln -s {canary}/secret.txt code/leak && ln -s {canary} code/dir "
                   "&& ln -s ../code code/inside")
    for tool, args in [("read_file", {"path": "code/leak"}),
                       ("read_file", {"path": "code/dir/secret.txt"}),
                       ("list_files", {"path": "code/dir"}),
                       ("edit_file", {"path": "code/dir/x.txt", "new_text": "x"}),
                       ("edit_file", {"path": "code/leak", "old_text": "C", "new_text": "x"})]:
        err = await agent.refused(tool, **args)
        assert "symlink" in err and "\n" not in err.strip() and "CANARY" not in err
    listing = await agent.ok("list_files", path="code")
    kinds = {e["path"]: e["type"] for e in listing["entries"]}
    assert kinds["code/leak"] == kinds["code/dir"] == "symlink"
    _untouched(canary)


@pytest.mark.parametrize("path,expect", [
    ("../secret", "outside the workspace"), ("/etc/shadow", "absolute"),
    ("code/../../x", "outside the workspace"), ("code/" + "x" * 5000, "too long"),
    ("a/" * 3000, "too long"),
])
async def test_bad_paths_get_one_line(agent: Agent, path: str, expect: str) -> None:
    for tool in ("read_file", "list_files"):
        err = await agent.refused(tool, path=path)
        assert expect in err and len(err) < 300 and "\n" not in err.strip()
    err = await agent.refused("edit_file", path=path, new_text="x")
    assert expect in err


async def test_fifo_socket_and_devnull_are_refused_without_a_hang(agent: Agent) -> None:
    await agent.sh("mkfifo code/fifo && python -c \"import socket; s=socket.socket(socket.AF_UNIX)"
                   "; s.bind('code/sock')\" && ln -s /dev/zero code/zero")
    started = time.monotonic()
    assert "FIFO" in await agent.refused("read_file", path="code/fifo")
    assert "socket" in await agent.refused("read_file", path="code/sock")
    assert "symlink" in await agent.refused("read_file", path="code/zero")
    assert "FIFO" in await agent.refused("edit_file", path="code/fifo", new_text="x")
    listing = await agent.ok("list_files", path="code")
    assert {"code/fifo": "FIFO", "code/sock": "socket"}.items() <= {
        e["path"]: e["type"] for e in listing["entries"]}.items()
    assert time.monotonic() - started < 10
    assert (await agent.sh("echo alive"))["exit_code"] == 0  # the revision scan skipped them


async def test_deep_folder_tower_does_not_break_the_run(agent: Agent) -> None:
    """1,500 nested folders (deeper than Python's recursion limit): every later command, the
    file tools, and `a2rl finish` with its closing scan and report still work."""
    await agent.sh("python -c \"import os\nfor _ in range(1500):\n os.mkdir('d'); os.chdir('d')"
                   "\nopen('f.py','w').write('x')\"", wait_s=60)
    assert (await agent.sh("echo still-working"))["output"].strip() == "still-working"
    listing = await agent.ok("list_files", path=".", depth=6)
    assert "d/d/d/d/d/" in {e["path"] for e in listing["entries"]}
    await agent.ok("edit_file", path="code/after.py", new_text="y = 1\n")
    ws = Path(agent.run.workspace)
    assert (ws / "d" / "d").is_dir()
    # The closing scan walks the tower; then (as root) the workspace volume is detached, its
    # files kept in workspace.img, so the tower is no longer looked at through `ws`.
    run = finish_run(agent.settings, agent.store, agent.run.id)
    assert run.status == RunStatus.finished and run.ended_at is not None
    report = build_report(agent.store, agent.run.id)
    assert report.summary.run_id == agent.run.id and report.metrics.revisions >= 1
    # pytest's own clean-up recurses (shutil.rmtree on 3.11): rm walks iteratively. A frozen
    # volume refuses (read-only) and its files go with it when the session unmounts it.
    subprocess.run(["rm", "-rf", str(ws / "d")], capture_output=True, timeout=120)


async def test_huge_edit_does_not_freeze_the_server(agent: Agent) -> None:
    """A file difflib would take minutes on (100,000 lines of 150 repeated values, every one
    changed): the edit returns a bounded diff and the event loop keeps ticking meanwhile."""
    await agent.sh("python -c \"open('code/big.txt','w').write(''.join(f'{i % 150}\\n' "
                   "for i in range(100_000)))\"")
    worst = 0.0

    async def ticker(stop: anyio.Event) -> None:
        nonlocal worst
        while not stop.is_set():
            t = time.monotonic()
            await anyio.sleep(0.01)
            worst = max(worst, time.monotonic() - t)

    stop = anyio.Event()
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker, stop)
        r = await agent.ok("edit_file", path="code/big.txt", old_text="7\n", new_text="8\n",
                           replace_all=True)
        stop.set()
    assert r["replacements"] > 600 and "+8" in r["diff"] and len(r["diff"]) < 5000
    assert time.monotonic() - started < 5
    assert worst < 0.5, f"the event loop stalled for {worst:.2f}s"


async def test_edit_of_a_file_without_final_newline_shows_separate_lines(agent: Agent) -> None:
    await agent.ok("edit_file", path="code/n.py", new_text="x = 1\ny = 2")
    r = await agent.ok("edit_file", path="code/n.py", old_text="y = 2", new_text="y = 3")
    lines = r["diff"].splitlines()
    assert "-y = 2" in lines and "+y = 3" in lines


@pytest.mark.cheats("reaches for hidden data through a task's resource")
async def test_task_resource_never_follows_a_symlink_or_hangs_on_a_fifo(agent: Agent) -> None:
    """TASK.md sits in the workspace root, which the agent owns: a job replaces it by a link to
    a host secret, then by a FIFO. The `a2rl://task` resource returns neither the host file nor
    hangs; it says why in one line, and the real TASK.md reads again once it is back."""
    original = (await agent.client.read_resource("a2rl://task")).contents[0].text
    assert "arith" in original.lower()
    secret = agent.settings.home_dir / "secrets" / "probe-task-resource.seed"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("SECRET-SEED-51c9\n")
    try:
        for target in (secret, "/etc/shadow", "/proc/self/environ"):
            await agent.sh(f"cp -n TASK.md code/TASK.keep; rm -f TASK.md; ln -s {target} TASK.md")
            text = (await agent.client.read_resource("a2rl://task")).contents[0].text
            assert "SECRET-SEED" not in text and "root:" not in text and "PATH=" not in text
            assert "symlink" in text and len(text.splitlines()) == 1, text
        await agent.sh("rm -f TASK.md; mkfifo TASK.md")
        started = time.monotonic()
        with anyio.fail_after(10):
            text = (await agent.client.read_resource("a2rl://task")).contents[0].text
        assert "FIFO" in text and time.monotonic() - started < 5, text
        await agent.sh("rm -f TASK.md; mv code/TASK.keep TASK.md")
        assert (await agent.client.read_resource("a2rl://task")).contents[0].text == original
    finally:
        secret.unlink()
