"""Why each job ended, from evidence, and its end recorded when it happens: real runs on each
backend (bubblewrap, docker), driven through the real MCP tools.

Every way a job ends is provoked for real (its own exit, a signal it sends itself, the memory
cgroup's OOM killer, a file size limit, the agent's job_kill, the run's deadline, a run
finalized because it was interrupted or out of budget) and the test reads the store: the cause
the supervisor decided, the evidence kept, and what the failure analysis makes of it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from a2rl.analysis.data import load_run
from a2rl.analysis.failures import find_failures, refusal_rule
from a2rl.analysis.timeline import build_timeline
from a2rl.server import build_server, create_run, finish_run
from a2rl.server.run import build_runtime
from a2rl.settings import Settings
from a2rl.store import Job, JobEndCause, Run, Store
from a2rl.tools.jobs import stop_cause

from .conftest import backend_settings, require

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

LIMITS = {"sandbox.local.memory": "256m", "sandbox.docker.memory": "256m",
          "sandbox.file_size": "32m"}


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    return backend_settings(settings, request.param).updated(LIMITS)


@asynccontextmanager
async def opened(settings: Settings, store: Store,
                 reason: str = "finished") -> AsyncIterator[tuple[Client, Run]]:
    run = create_run(settings, store, task_id="arith", budget="30m", baseline=False).run
    assert run.backend == settings.sandbox.backend
    server = build_server(settings, store, run_id=run.id, transport="memory")
    try:
        async with Client(server, mode="legacy") as client:
            yield client, run
    finally:
        finish_run(settings, store, run.id, reason=reason)


async def sh(c: Client, command: str, wait_s: float = 30) -> dict[str, Any]:
    r = await c.call_tool("run_command", {"command": command, "wait_s": wait_s})
    assert not r.is_error, r
    return dict(r.structured_content or {})


def job(store: Store, job_id: str) -> Job:
    with store.session() as s:
        row = s.get(Job, job_id)
    assert row is not None
    return row


async def ended(store: Store, job_id: str, timeout: float) -> Job:
    """The job's row once the store says it ended, asking nothing of the tools."""
    end = time.monotonic() + timeout
    while (row := job(store, job_id)).state == "running" and time.monotonic() < end:
        await anyio.sleep(0.05)
    return row


async def test_each_cause_from_its_evidence(backend: Settings, store: Store) -> None:
    if backend.sandbox.backend != "docker":
        import os
        require(os.geteuid() == 0, "a memory cgroup needs root on this machine")
    async with opened(backend, store) as (c, run):
        ex = await sh(c, "echo hi; exit 3")
        term = await sh(c, "kill -TERM $$")
        kill9 = await sh(c, "kill -KILL $$")
        hog = await sh(c, "python3 -c 'x = bytearray(1024**3); print(len(x))'", wait_s=60)
        big = await sh(c, "head -c 40M /dev/zero > code/big.bin")
        bg = await sh(c, "sleep 100", wait_s=0)
        assert bg["status"] == "running"
        r = await c.call_tool("job_kill", {"job_id": bg["job_id"]})
        assert not r.is_error, r
        assert (r.structured_content or {})["job"]["end_cause"] == "job_kill", r

        rows = {k: job(store, v["job_id"]) for k, v in
                [("ex", ex), ("term", term), ("kill9", kill9), ("hog", hog), ("big", big),
                 ("bg", bg)]}
        causes = {k: row.end_cause for k, row in rows.items()}
        assert causes == {"ex": "exited", "term": "signal", "kill9": "signal",
                          "hog": "out_of_memory", "big": "limit", "bg": "job_kill"}, causes
        assert rows["ex"].exit_code == 3 and rows["ex"].end_evidence == "exit code 3"
        assert "SIGTERM" in (rows["term"].end_evidence or "")
        # a SIGKILL the job sent itself is no OOM: the kernel counted none
        assert "SIGKILL" in (rows["kill9"].end_evidence or "")
        assert "no OOM kill was counted" in (rows["kill9"].end_evidence or "")
        assert "oom_kill count rose" in (rows["hog"].end_evidence or ""), rows["hog"]
        assert "file size limit 32m" in (rows["big"].end_evidence or "")
        assert "job_kill by the agent" in (rows["bg"].end_evidence or "")
        assert rows["bg"].state == "killed" and rows["bg"].exit_code == -9
        # what the agent reads: the signal, not a guess at memory
        assert "SIGKILL" in kill9["hint"] and "memory" not in kill9["hint"], kill9
        assert "memory limit 256m reached" in hog["hint"], hog

        # the failure analysis reads the causes: one kind each, OOM only where the kernel said
        failures = {f.job_id: f.type for f in find_failures(load_run(store, run.id))}
        assert failures == {rows["term"].id: "killed_by_signal",
                            rows["kill9"].id: "killed_by_signal",
                            rows["hog"].id: "out_of_memory",
                            rows["big"].id: "resource_limit",
                            rows["bg"].id: "job_killed"}, failures


async def test_a_background_job_is_recorded_when_it_ends(backend: Settings,
                                                         store: Store) -> None:
    """Nobody polls the job: the store has its end (state, exit code, the time within 2 s of
    the job's own clock), and budget_status counts no job running."""
    async with opened(backend, store) as (c, run):
        bg = await sh(c, "sleep 3; date +%s.%N; exit 4", wait_s=0)
        assert bg["status"] == "running"
        assert job(store, bg["job_id"]).state == "running"
        row = await ended(store, bg["job_id"], timeout=15)
        assert (row.state, row.exit_code, row.end_cause) == ("exited", 4, "exited"), row
        log = Path(run.workspace).parent / "control" / "joblogs" / f"{bg['job_id']}.log"
        real_end = float(log.read_text().split()[-1])
        assert row.ended_at is not None
        recorded = row.ended_at.replace(tzinfo=UTC).timestamp()
        assert abs(recorded - real_end) < 2.0, (recorded, real_end)
        status = await c.call_tool("budget_status", {})
        assert (status.structured_content or {})["jobs_running"] == 0, status
        timeline = build_timeline(load_run(store, run.id))
        event = next(e for e in timeline.jobs if e.id == bg["job_id"])
        assert (event.state, event.cause) == ("exited", "exited") and event.end_s is not None

        # the run's deadline: the supervisor stops the job (the time limit), and the watcher
        # records it at once, with the deadline as its cause
        sleeper = await sh(c, "sleep 100", wait_s=0)
        rt = build_runtime(backend, store, run)
        assert rt.sandbox.push_deadline(time.time() + 1.0)
        row = await ended(store, sleeper["job_id"], timeout=15)
        assert row.state == "timeout" and row.end_cause == "deadline", row
        assert "deadline" in (row.end_evidence or "")
        failures = [f for f in find_failures(load_run(store, run.id))
                    if f.job_id == sleeper["job_id"]]
        assert [f.type for f in failures] == ["budget_kill"], failures


BURN = ("python3 -c 'import time\nx = bytearray(120 << 20)\nt = time.process_time()\n"
        "while time.process_time() - t < 1.0: pass'")


#: burns 0.6 CPU-seconds, says so, then spins until it is killed
SPIN = ("python3 -c 'import time\nt = time.process_time()\n"
        "while time.process_time() - t < 0.6: pass\nprint(\"burnt\", flush=True)\n"
        "while True: pass'")


async def test_a_jobs_cpu_seconds_and_peak_memory(backend: Settings, store: Store) -> None:
    """The kernel's account of a job's whole tree reaches its row: a child of bash that burns
    a CPU second holding 120 MiB, a job that does nothing, and one killed while it burns."""
    async with opened(backend, store) as (c, _):
        burn = await sh(c, f"{BURN}; echo done", wait_s=60)
        idle = await sh(c, "true")
        bg = await sh(c, SPIN, wait_s=0)
        # killed once it has burnt its 0.6 s (it says so), however long a loaded machine
        # takes to give it that: a fixed sleep measured the machine's load, not the account
        end = time.monotonic() + 60
        while time.monotonic() < end:
            r = await c.call_tool("job_status", {"job_id": bg["job_id"], "wait_s": 0})
            if "burnt" in (r.structured_content or {}).get("output", ""):
                break
            await anyio.sleep(0.2)
        r = await c.call_tool("job_kill", {"job_id": bg["job_id"]})
        assert not r.is_error, r
        rows = {k: job(store, v["job_id"]) for k, v in
                [("burn", burn), ("idle", idle), ("bg", bg)]}
    assert rows["burn"].exit_code == 0, rows["burn"]
    used = {k: (row.cpu_s, row.memory_peak_bytes) for k, row in rows.items()}
    assert all(cpu is not None and peak is not None for cpu, peak in used.values()), used
    cpu, peak = used["burn"]
    assert 0.95 <= cpu < 5 and peak >= 120 << 20, used  # type: ignore[operator]
    # the floor is the supervisor's size: the kernel carries a process's peak across exec
    assert used["idle"][0] < 0.5 and used["idle"][1] < 64 << 20, used  # type: ignore[operator]
    assert used["bg"][0] >= 0.5, used  # type: ignore[operator]


@pytest.mark.parametrize("reason,cause", [("interrupted", "interrupted"),
                                          ("budget exhausted", "budget")])
async def test_jobs_a_finalization_stops(backend: Settings, store: Store, reason: str,
                                         cause: str) -> None:
    """The orchestrator's end reasons (Ctrl-C, the budget) become the stopped jobs' cause."""
    async with opened(backend, store, reason=reason) as (c, run):
        bg = await sh(c, "sleep 100", wait_s=0)
    row = job(store, bg["job_id"])
    assert row.state == "killed" and row.end_cause == cause, row
    assert reason in (row.end_evidence or "")
    if cause == "interrupted":
        assert (row.end_evidence or "").startswith("interrupted by the operator")
    types = [f.type for f in find_failures(load_run(store, run.id)) if f.job_id == row.id]
    assert types == ["interrupted" if cause == "interrupted" else "budget_kill"], types


def test_stop_causes_and_refusal_rules() -> None:
    assert stop_cause("interrupted")[0] == JobEndCause.interrupted
    assert stop_cause("interrupted (SIGTERM)")[0] == JobEndCause.interrupted
    assert stop_cause("budget exhausted")[0] == JobEndCause.budget
    assert stop_cause("agent finished")[0] == JobEndCause.run_finished
    assert stop_cause("finished by a2rl finish")[0] == JobEndCause.run_finished
    # the refusal of a folder that does not exist, as tools/submissions.py words it
    missing = ("output/nope does not exist; save the checkpoint under output/ with "
               "save_pretrained and pass its path")
    assert refusal_rule(missing) == "no such folder"
    assert refusal_rule("code/x is not under output/: checkpoints must be directories under "
                        "output/, for example output/sft") == "outside output/"
    assert refusal_rule("no such directory: output/x. Save the checkpoint under output/") \
        == "no such folder"


def test_failures_from_stored_causes_not_exit_codes() -> None:
    """Hand-made rows: every SIGKILL (-9) with a cause other than the OOM killer's is not
    "out of memory", and a deadline stop is one budget kill, not also an OOM."""
    from a2rl.analysis.data import RunData

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    run = Run(id="r", task_id="arith", workspace="/w", budget_s=600, started_at=t0,
              deadline=t0 + timedelta(seconds=600), ended_at=t0 + timedelta(seconds=600),
              status="finished")
    spec = [("kill", "killed", -9, "job_kill", 30), ("dl", "timeout", -9, "deadline", 600),
            ("int", "killed", -9, "interrupted", 100), ("oom", "exited", -9, "out_of_memory", 50),
            ("raised", "exited", 1, "exited", 40), ("fine", "exited", 0, "exited", 20),
            ("leftover", "killed", -9, "run_finished", 590)]
    jobs = [Job(id=k, run_id="r", command="python x.py", log_path=f"logs/{k}.log",
                log_blob_sha=k, state=state, exit_code=code, end_cause=cause,
                end_evidence=f"evidence of {k}", started_at=t0,
                ended_at=t0 + timedelta(seconds=end))
            for k, state, code, cause, end in spec]
    logs = {k: b"step 1\nKilled\n" for k, *_ in spec}
    logs["raised"] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate\n"
    d = RunData(run=run, calls=[], jobs=jobs, submissions=[], evaluations=[], snapshots={},
                budget_events=[], revisions=0, baseline_test_n=None, blobs=logs)
    got = {(f.type, f.job_id) for f in find_failures(d) if f.job_id}
    assert got == {("job_killed", "kill"), ("budget_kill", "dl"), ("interrupted", "int"),
                   ("out_of_memory", "oom"), ("out_of_memory", "raised")}, got
    oom = next(f for f in find_failures(d) if f.job_id == "oom")
    assert "evidence of oom" in oom.message


def test_a_container_killed_by_the_oom_killer_says_so() -> None:
    """docker's `State.OOMKilled`, the evidence for jobs whose container died of memory: a
    real container whose init outgrows its limit, and one that exits by itself."""
    from .conftest import require_docker

    image = require_docker()
    from a2rl.sandbox.docker import container_oom_evidence, docker_client

    client = docker_client()
    hog = client.containers.run(image, ["python3", "-c", "x = bytearray(1 << 30)"],
                                mem_limit="64m", memswap_limit="64m", detach=True,
                                network_mode="none")
    fine = client.containers.run(image, ["sh", "-c", "kill -KILL $$"], detach=True,
                                 network_mode="none")
    try:
        for c in (hog, fine):
            c.wait(timeout=60)
        evidence = container_oom_evidence(hog)
        assert evidence is not None and "OOMKilled is true" in evidence, evidence
        assert container_oom_evidence(fine) is None  # a SIGKILL of its own is no OOM
    finally:
        for c in (hog, fine):
            c.remove(force=True)


async def test_a_job_whose_supervisor_dies_is_recorded_lost(settings: Settings,
                                                            store: Store) -> None:
    """The watcher sees the supervisor go (killed from outside) and records its jobs as lost,
    without the agent asking."""
    import json
    import os
    import signal

    local = backend_settings(settings, "local")
    async with opened(local, store) as (c, run):
        bg = await sh(c, "sleep 100", wait_s=0)
        meta = json.loads((Path(run.workspace).parent / "control" / "supervisor.json")
                          .read_text())
        os.kill(meta["supervisor_pid"], signal.SIGKILL)
        row = await ended(store, bg["job_id"], timeout=15)
        assert row.state == "lost" and row.end_cause == "lost", row
        types = [f.type for f in find_failures(load_run(store, run.id)) if f.job_id == row.id]
        assert types == ["job_lost"], types
