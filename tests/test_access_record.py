"""The kernel's record of which workspace files each job opened, read and wrote, through a real
run on each backend, and the checkpoint lineage built on it.

One run per backend (the fixture task: no model), driven through a real MCP client; the jobs
read the task's files and a `.cache/` file, "train" with stand-ins that read the checkpoint they
start from and write another (no torch: a few bytes each), copy one with `cp -r`, and then try
the tricks that would make a name lie (a rename swap, a hard link written through, a symlink,
a FIFO, a folder deeper than PATH_MAX). The record must tie each access to the job whose
processes made it, by content where a name moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from sqlmodel import select

from a2rl.sandbox import access
from a2rl.server import build_server, create_run, finish_run
from a2rl.store import Job, JobFile, Run, SnapshotFile, Store, Submission
from a2rl.store.lineage_query import lineage_of

from .conftest import backend_settings
from .helpers import text_of

pytestmark = [pytest.mark.timeout(240), pytest.mark.anyio]

TRAIN = """\
import argparse, hashlib, os
p = argparse.ArgumentParser()
p.add_argument("--init", default="output/sft")
p.add_argument("--out", required=True)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
for name in ("config.json", "model.bin"):
    data = open(os.path.join(a.init, name), "rb").read()
    if name == "model.bin":
        data = hashlib.sha256(data + a.out.encode()).digest() * 64  # "trained" weights
    open(os.path.join(a.out, name), "wb").write(data)
"""

SFT = ("mkdir -p output/sft && cat base_model/config.json > output/sft/config.json && "
       "head -c 4096 /dev/urandom > output/sft/model.bin")


@pytest.fixture(params=["local", "docker"])
def backend(request, settings):  # type: ignore[no-untyped-def]
    return backend_settings(settings, request.param)


async def _run_command(c: Client, command: str) -> str:
    r = await c.call_tool("run_command", {"command": command, "wait_s": 60})
    assert not r.is_error, text_of(r)
    assert r.structured_content["exit_code"] == 0, r.structured_content["output"]
    return str(r.structured_content["job_id"])


def _files(store: Store, run_id: str) -> list[JobFile]:
    with store.session() as s:
        return list(s.exec(select(JobFile).where(JobFile.run_id == run_id)).all())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): _sha(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _lineage(store: Store, run: Run, folder: str) -> dict[str, Any]:
    sub = Submission(id="s-test", run_id=run.id, path=folder,
                     file_hashes=_hashes(Path(run.workspace) / folder))
    return lineage_of(store, sub, submitted_at=sub.created_at).model_dump()


async def test_a_runs_record_and_lineage(backend, store) -> None:  # type: ignore[no-untyped-def]
    """One run whose jobs made the chain and tried the tricks; its record once it finished."""
    run = create_run(backend, store, task_id="fixture", budget="30m", baseline=False).run
    assert run.config.setup.disk_volume, "the run needs its own volume (root, loop devices)"
    try:
        recorded = await _drive(backend, store, run)
    finally:
        finish_run(backend, store, run.id)
    _each_access_is_its_jobs(recorded)
    _the_recorder_ended_with_the_run(recorded)
    _lineage_walks_back_to_the_base_model(recorded)


async def _drive(backend, store: Store, run: Run) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    ws = Path(run.workspace)
    jobs: dict[str, str] = {}
    async with Client(build_server(backend, store, run_id=run.id, transport="memory"),
                      mode="legacy") as c:
        await c.call_tool("edit_file", {"path": ".cache/notes/he.txt", "new_text": "hidden\n"})
        await c.call_tool("edit_file", {"path": "code/train.py", "new_text": TRAIN})
        jobs["cache"] = await _run_command(c, "cat .cache/notes/he.txt > /dev/null")
        jobs["sft"] = await _run_command(c, SFT)
        jobs["grpo"] = await _run_command(c, "python3 code/train.py --init output/sft "
                                             "--out output/grpo")
        jobs["copy"] = await _run_command(c, "cp -r output/grpo output/b")
        # a rename swap: output/x ends up holding what y's job wrote, by rename alone
        jobs["x"] = await _run_command(c, "mkdir -p output/x && echo X > output/x/w")
        jobs["y"] = await _run_command(c, "mkdir -p output/y && echo Y > output/y/w")
        jobs["swap"] = await _run_command(
            c, "mv output/x output/t && mv output/y output/x && mv output/t output/y")
        # a hard link written through: output/sft's weights change under another name
        jobs["link"] = await _run_command(
            c, "mkdir -p output/h && ln output/sft/model.bin output/h/model.bin && "
               "echo tampered >> output/h/model.bin")
        # a symlink read: the kernel names the file it leads to
        jobs["symlink"] = await _run_command(
            c, "ln -s b/config.json output/s.json && cat output/s.json > /dev/null")
        # a FIFO opened both ways (the kernel reports no open of it) and a folder chain
        # deeper than PATH_MAX, written and read from inside it
        jobs["odd"] = await _run_command(c, (
            "mkfifo output/p && (cat output/p > /dev/null &) && echo hi > output/p && "
            "python3 -c \"import os\nos.chdir('output')\nfor _ in range(2100):\n"
            "    os.mkdir('dd'); os.chdir('dd')\nopen('deep.txt', 'w').write('deep')\n"
            "open('deep.txt').read()\""))
        with store.session() as s:
            rows = {j.id: j for j in s.exec(select(Job).where(Job.run_id == run.id)).all()}
            code = {f.path: f.blob_sha for f in s.exec(select(SnapshotFile).where(
                SnapshotFile.snapshot_id == rows[jobs["grpo"]].snapshot_id)).all()
                if f.path.startswith("code/")}
        lineage = {name: _lineage(store, run, f"output/{name}") for name in ("grpo", "b", "x")}
        recorder = json.loads((ws.parent / "control" / access.FOLDER / access.META).read_text())
    finish_run(backend, store, run.id)
    return {"run": run, "jobs": jobs, "rows": rows, "files": _files(store, run.id),
            "lineage": lineage, "recorder": recorder, "code": code}


def _each_access_is_its_jobs(recorded: dict[str, Any]) -> None:
    jobs, files = recorded["jobs"], recorded["files"]
    by = {(f.job_id, f.path): f for f in files}
    # a job that read a file in .cache/ is recorded as reading it (edit_file's write, the
    # server's, is not a job's)
    cache = by[(jobs["cache"], ".cache/notes/he.txt")]
    assert cache.read and not cache.written
    assert not [f for f in files if f.path == ".cache/notes/he.txt" and f.written]
    # the cp -r job read every file of output/grpo and wrote output/b's, hashed at the close
    for name in ("config.json", "model.bin"):
        assert by[(jobs["copy"], f"output/grpo/{name}")].read
        wrote = by[(jobs["copy"], f"output/b/{name}")]
        assert wrote.written and wrote.sha256 == by[(jobs["grpo"], f"output/grpo/{name}")].sha256
    assert by[(jobs["sft"], "base_model/config.json")].read  # a read-only input, bound apart
    # a symlink is read as the file it leads to; the link itself is never "the file"
    assert by[(jobs["symlink"], "output/b/config.json")].read
    assert (jobs["symlink"], "output/s.json") not in by
    # renames open nothing: the swap job has no row, and no row names a file it moved
    assert not [f for f in files if f.job_id == jobs["swap"]]
    # the hard link written through is recorded under the name the job wrote it by
    assert by[(jobs["link"], "output/h/model.bin")].written
    # the deep file is named whole, from the job's folder (longer than PATH_MAX)
    deep = [f for f in files if f.job_id == jobs["odd"] and f.path.endswith("/deep.txt")]
    assert len(deep) == 1 and deep[0].read and deep[0].written
    assert deep[0].path.startswith("output/dd/dd/") and len(deep[0].path) > 4096
    assert not [f for f in files if f.path.startswith("output/p")]  # the FIFO: nothing
    # every access was tied to a job: nothing of this run is unattributed
    assert [f.path for f in files if f.job_id is None] == []
    assert set(jobs.values()) - {jobs["swap"]} <= {f.job_id for f in files}
    # every job was watched whole and knows its code
    for job_id in jobs.values():
        row = recorded["rows"][job_id]
        assert row.files_recorded == "complete", (job_id, row.files_recorded)
        assert row.snapshot_id is not None
    # the code did not change between the jobs: they share one snapshot, which holds it
    assert len({recorded["rows"][j].snapshot_id for j in jobs.values()}) == 1
    assert recorded["code"] == {"code/train.py": hashlib.sha256(TRAIN.encode()).hexdigest()}


def _the_recorder_ended_with_the_run(recorded: dict[str, Any]) -> None:
    pid = recorded["recorder"]["pid"]
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def _lineage_walks_back_to_the_base_model(recorded: dict[str, Any]) -> None:
    jobs, lineage = recorded["jobs"], recorded["lineage"]
    grpo = lineage["grpo"]
    assert [(s["checkpoint"], s["how"], s["job_id"]) for s in grpo["stages"]] == [
        ("output/grpo", "trained", jobs["grpo"]), ("output/sft", "trained", jobs["sft"]),
        ("base_model", "base", None)]
    first = grpo["stages"][0]
    assert first["command"] == "python3 code/train.py --init output/sft --out output/grpo"
    assert first["snapshot_id"] == recorded["rows"][jobs["grpo"]].snapshot_id
    assert first["source"]["evidence"] == "read"  # the kernel saw it read output/sft
    assert first["source"]["named_by_command"] == ["output/sft"]
    assert first["source"]["named_by_code"] == ["code/train.py: output/sft"]
    assert grpo["stages"][1]["source"]["checkpoint"] == "base_model"
    # model.bin of output/sft changed under output/h since: output/grpo's files are grpo's
    assert {f["job_id"] for f in grpo["files"]} == {jobs["grpo"]}
    # the copy is shown as a copy of output/grpo, and the chain goes on from there
    b = lineage["b"]
    assert [(s["checkpoint"], s["how"], s["job_id"]) for s in b["stages"]] == [
        ("output/b", "copied", jobs["copy"]), ("output/grpo", "trained", jobs["grpo"]),
        ("output/sft", "trained", jobs["sft"]), ("base_model", "base", None)]
    assert b["complete"] and b["stages"][0]["source"]["evidence"] == "copied"
    assert {f["copied_from"] for f in b["files"]} == {"output/grpo/config.json",
                                                      "output/grpo/model.bin"}
    # after the rename swap output/x holds what y's job wrote: its writer is y's job
    x = lineage["x"]
    assert [(f["path"], f["job_id"], f["written_as"]) for f in x["files"]] == [
        ("w", jobs["y"], "output/y/w")]


async def test_without_a_volume_the_record_says_so(settings, store) -> None:  # type: ignore[no-untyped-def]
    local = backend_settings(settings, "local").updated({"sandbox.disk_volume": "off"})
    run = create_run(local, store, task_id="fixture", budget="30m", baseline=False).run
    async with Client(build_server(local, store, run_id=run.id, transport="memory"),
                      mode="legacy") as c:
        job = await _run_command(c, "cat base_model/config.json")
    finish_run(local, store, run.id)
    with store.session() as s:
        row = s.get(Job, job)
    assert row is not None and row.files_recorded == (
        "none: the workspace is not a filesystem of its own (no volume: sandbox_disk_volume is "
        "off, or this machine cannot mount one)")
    assert _files(store, run.id) == []


async def test_a_dead_recorder_never_blocks_a_job(settings, store) -> None:  # type: ignore[no-untyped-def]
    """A recorder killed outright: the jobs go on (the kernel lets every pending open through
    when its group closes) and the record says it stopped."""
    local = backend_settings(settings, "local")
    run = create_run(local, store, task_id="fixture", budget="30m", baseline=False).run
    folder = Path(run.workspace).parent / "control" / access.FOLDER
    async with Client(build_server(local, store, run_id=run.id, transport="memory"),
                      mode="legacy") as c:
        before = await _run_command(c, "cat base_model/config.json")
        r = await c.call_tool("run_command", {"command": (
            "cat base_model/config.json > /dev/null; sleep 2; "
            "cat base_model/config.json > /dev/null"), "wait_s": 0})
        during = r.structured_content["job_id"]
        os.kill(json.loads((folder / access.META).read_text())["pid"], signal.SIGKILL)
        started = time.monotonic()
        r = await c.call_tool("job_status", {"job_id": during, "wait_s": 60})
        assert r.structured_content["job"]["state"] == "exited"
        assert time.monotonic() - started < 30
        after = await _run_command(c, "cat base_model/config.json")  # watched again
    finish_run(local, store, run.id)
    with store.session() as s:
        rows = {j: s.get(Job, j) for j in (before, during, after)}
    assert rows[before].files_recorded == "complete"  # type: ignore[union-attr]
    # killed mid-job: it was last heard of (its last journal line) before or during the job
    assert rows[during].files_recorded in (  # type: ignore[union-attr]
        "partial: the access recorder ended during the job (it stopped without a word)",
        "none: the access recorder ended before the job (it stopped without a word)")
    assert rows[after].files_recorded == "complete"  # type: ignore[union-attr]
    files = {(f.job_id, f.path) for f in _files(store, run.id)}
    assert {(before, "base_model/config.json"), (after, "base_model/config.json")} <= files
