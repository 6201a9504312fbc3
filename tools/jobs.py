"""Job bookkeeping shared by the command tools, the server's start-up and finalization.

A job's row is settled once, when we first see it ended: its state, exit code and cause (with
its evidence, from the supervisor), its log kept as a blob (head and tail), and a rescan of the
workspace for the code it changed. "When we first see it" is when it ends: a watcher thread
(`watch`) waits on the supervisor for the run's background jobs, so the store, `budget_status`,
`show` and the live page know a job ended without the agent polling it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from datetime import UTC, datetime

from mcp.server.mcpserver.exceptions import ToolError
from sqlmodel import select

from a2rl.sandbox.base import JobState, Sandbox, SandboxError, SandboxJob
from a2rl.store import Job, JobEndCause, aware
from a2rl.store.records import jobs as job_rows
from a2rl.store.records.jobs import JobEnd

from .access_record import job_files
from .gpu_usage import track
from .results import JobInfo
from .runtime import RunRuntime


def new_job_id() -> str:
    return "j-" + secrets.token_hex(4)


def job_info(row: Job) -> JobInfo:
    return JobInfo(
        job_id=row.id, command=row.command, state=row.state, exit_code=row.exit_code,
        started_at=aware(row.started_at).isoformat(),  # type: ignore[union-attr]
        ended_at=aware(row.ended_at).isoformat() if row.ended_at else None,
        log_path=row.log_path, log_bytes=row.log_bytes,
        end_cause=row.end_cause, end_evidence=row.end_evidence,
    )


def settle(rt: RunRuntime, sj: SandboxJob | None, job_id: str, tool_call_id: int | None,
           lost: bool = False, lost_state: JobState = JobState.lost,
           gone: tuple[str, str] | None = None) -> Job:
    """Record a job's end once; a still-running job is returned unchanged. `gone`: the cause
    and evidence of a lost job, where the backend knows why its supervisor went.

    One at a time per run: the watcher and a tool call may see the same end together, and the
    log's blob and the rescan must happen once."""
    with rt.settle_lock:
        return _settle(rt, sj, job_id, tool_call_id, lost, lost_state, gone)


def _settle(rt: RunRuntime, sj: SandboxJob | None, job_id: str, tool_call_id: int | None,
            lost: bool, lost_state: JobState, gone: tuple[str, str] | None) -> Job:
    with rt.store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        if row.state != JobState.running:
            return row
        if not lost and (sj is None or sj.state == JobState.running):
            return row
    blob, size = rt.job_logs.keep(row.log_path)
    source = "job" if row.is_background else "command"
    rt.scanner.scan(source, tool_call_id=tool_call_id, job_id=job_id)
    ended = sj.ended_at if sj is not None and sj.ended_at else None
    ended_at = datetime.fromtimestamp(ended, UTC) if ended else datetime.now(UTC)
    # the files its ended processes opened, in the store before its row says it ended
    files = job_files(rt.store, rt.run_id, rt.dir, row.started_at, ended_at)
    state = lost_state if lost or sj is None else sj.state
    cause, evidence = gone or _cause(state, sj)
    gpu_s, gpu_peak = rt.gpu.figures(job_id)
    row, settled = job_rows.settle(rt.store, job_id, JobEnd(
        state=state, exit_code=None if sj is None else sj.exit_code, ended_at=ended_at,
        end_cause=cause, end_evidence=evidence, log_blob_sha=blob, log_bytes=size,
        files_recorded=files, cpu_s=None if sj is None else sj.cpu_s,
        memory_peak_bytes=None if sj is None else sj.memory_peak_bytes,
        gpu_s=gpu_s, gpu_memory_peak_bytes=gpu_peak))
    if settled:
        rt.log.info("job %s ended: %s (exit %s; %s: %s)", job_id, row.state, row.exit_code,
                    row.end_cause, row.end_evidence)
    return row


def _cause(state: str, sj: SandboxJob | None) -> tuple[str | None, str | None]:
    """The stored cause of an end: the supervisor's; for a job whose supervisor is gone, what
    the state says (`reconcile` decided it); None where an older supervisor said nothing."""
    if sj is not None and sj.cause:
        return sj.cause, sj.evidence or None
    if state == JobState.timeout:
        return JobEndCause.deadline, "the supervisor is gone and the run's deadline has passed"
    if state == JobState.lost or sj is None:
        return JobEndCause.lost, "the sandbox supervisor is gone: nobody saw how the job ended"
    return None, None


def running_ids(rt: RunRuntime) -> list[str]:
    return [row.id for row in _running(rt)]


def _running(rt: RunRuntime) -> list[Job]:
    with rt.store.session() as s:
        return list(s.exec(select(Job).where(Job.run_id == rt.run_id,
                                             Job.state == JobState.running)).all())


def _attach(rt: RunRuntime) -> Sandbox | None:
    try:
        return rt.sandbox.get()
    except ToolError:  # the supervisor is gone and may not start again (deadline passed)
        return None


def stop_all(rt: RunRuntime, tool_call_id: int | None = None,
             cause: JobEndCause = JobEndCause.run_finished, evidence: str = "") -> None:
    """Kill every running job (recorded as killed, blamed on `cause`) and end the run's
    supervisor."""
    sandbox = _attach(rt) if _running(rt) or rt.sandbox.ever_started() else None
    if sandbox is not None:
        for row in _running(rt):
            with contextlib.suppress(SandboxError):
                settle(rt, sandbox.kill(row.id, cause, evidence), row.id, tool_call_id)
        sandbox.stop()
    elif rt.sandbox.ever_started():
        # its supervisor ended itself at the deadline and cannot start again: what it left
        # (an exited container, an empty cgroup) goes now, or the run would hold it for ever
        with contextlib.suppress(SandboxError, ToolError, OSError):
            rt.sandbox.build().release()
    reconcile(rt, tool_call_id)


def stop_cause(reason: str) -> tuple[JobEndCause, str]:
    """The cause of the jobs a run's finalization stops, from its end reason (the
    orchestrator's words: "interrupted", "budget exhausted", "agent finished", ...)."""
    said = f"the run was finalized ({reason})"
    if reason.startswith("interrupted"):
        return JobEndCause.interrupted, f"interrupted by the operator: {said}"
    if reason.startswith("budget"):
        return JobEndCause.budget, f"the budget ran out: {said}"
    return JobEndCause.run_finished, said


#: The longest one watcher's request waits on the supervisor (it returns early at an end).
WATCH_SLICE_S = 10.0
#: Pause before trying again when the supervisor cannot be asked.
WATCH_RETRY_S = 1.0


def watch(rt: RunRuntime) -> None:
    """Make sure a thread of this process settles the run's running jobs when they end (and
    one samples their GPU use)."""
    track(rt)
    rt.watcher.ensure(lambda: _watch(rt))


def _watching(rt: RunRuntime) -> tuple[list[str], Sandbox] | None:
    """The running jobs to wait on and the sandbox to ask, or None: nothing to watch."""
    running = [row.id for row in _running(rt)]
    sandbox = rt.sandbox.started()
    return (running, sandbox) if running and sandbox is not None else None


def _watch(rt: RunRuntime) -> None:
    """Wait on the supervisor for any running job to end and settle it; ends once no job runs
    (a later background job starts it again), or when this process has no sandbox started."""
    while True:
        watching = rt.watcher.unless_idle(lambda: _watching(rt))
        if watching is None:
            return
        running, sandbox = watching
        try:
            ended = [sj for sj in sandbox.wait_any(running, WATCH_SLICE_S)
                     if sj.state != JobState.running]
        except SandboxError as exc:
            if "unknown op" in str(exc):  # a supervisor of an older version: ask each job
                ended = []
                for job_id in running:
                    with contextlib.suppress(SandboxError):
                        ended += [sj for sj in [sandbox.get(job_id)]
                                  if sj.state != JobState.running]
                time.sleep(WATCH_RETRY_S)
            else:
                try:
                    reconcile(rt)  # a supervisor that is gone: its jobs are settled as such
                except Exception as exc2:  # the watcher must never die of one bad look
                    rt.log.warning("job watcher: %s", exc2)
                time.sleep(WATCH_RETRY_S)
                continue
        for sj in ended:
            try:
                settle(rt, sj, sj.job_id, None)
            except Exception as exc:
                rt.log.warning("job watcher could not record %s: %s", sj.job_id, exc)


def reconcile(rt: RunRuntime, tool_call_id: int | None = None) -> list[Job]:
    """Settle every job that ended while nobody was looking.

    Jobs of a supervisor that is gone are `timeout` when the deadline has passed (the
    supervisor stops every job then), else `lost`.
    """
    running = _running(rt)
    if not running:
        return []
    sandbox = _attach(rt)
    deadline = rt.clock.deadline()
    gone_state = (JobState.timeout if deadline and deadline <= datetime.now(UTC)
                  else JobState.lost)
    if sandbox is None:
        return [settle(rt, None, row.id, tool_call_id, lost=True, lost_state=gone_state)
                for row in running]
    alive = sandbox.alive()
    why = None if alive else sandbox.gone_cause()
    settled = []
    for row in running:
        if not alive:
            settled.append(settle(rt, None, row.id, tool_call_id, lost=True, lost_state=gone_state,
                                  gone=why))
            continue
        try:
            sj = sandbox.get(row.id)
        except SandboxError:
            settled.append(settle(rt, None, row.id, tool_call_id, lost=True))
            continue
        settled.append(settle(rt, sj, row.id, tool_call_id))
    return settled

