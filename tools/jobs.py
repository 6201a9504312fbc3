"""Job bookkeeping shared by the command tools, the server's start-up and finalization.

A job's row is settled once, when we first see it ended: its state and exit code, its log kept
as a blob (head and tail), and a rescan of the workspace for the code it changed.
"""

from __future__ import annotations

import contextlib
import secrets
from datetime import UTC, datetime
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError
from sqlmodel import col, select

from a2rl.layout import LOGS
from a2rl.store import Blob, Job, aware

from .output import log_size, read_head_tail
from .results import JobInfo
from .runtime import RunRuntime
from .sandbox.base import JobState, Sandbox, SandboxError, SandboxJob


def new_job_id() -> str:
    return "j-" + secrets.token_hex(4)


def job_info(row: Job) -> JobInfo:
    return JobInfo(
        job_id=row.id, command=row.command, state=row.state, exit_code=row.exit_code,
        started_at=aware(row.started_at).isoformat(),  # type: ignore[union-attr]
        ended_at=aware(row.ended_at).isoformat() if row.ended_at else None,
        log_path=row.log_path, log_bytes=row.log_bytes,
    )


def keep_log(rt: RunRuntime, log_path: str) -> tuple[str | None, int]:
    """Store the head and tail of a job's log (never read whole); its blob and size.

    A run's jobs together store at most `job_log_run_keep_bytes`: the log that reaches it keeps
    a shorter head and tail, later ones their size only (no blob; the file stays in the run's
    folder, where the agent reads it)."""
    with rt.log_lock:
        if rt.log_bytes_kept is None:
            rt.log_bytes_kept = _log_bytes_kept(rt)
        keep = rt.settings.job_log_keep_bytes
        cap = rt.settings.job_log_run_keep_bytes
        if cap > 0:  # room for the "[... bytes omitted ...]" line between head and tail too
            keep = min(keep, cap - rt.log_bytes_kept - _MARKER_ROOM)
        path = log_file_of(rt, log_path)
        if keep <= 0:
            return None, log_size(path)
        data, size = read_head_tail(path, keep // 2, keep - keep // 2)
        if size == 0:
            return None, 0
        rt.log_bytes_kept += len(data)
        return rt.store.put_blob(data), size


#: Bytes left for the marker `read_head_tail` puts between a log's head and tail.
_MARKER_ROOM = 64


def _log_bytes_kept(rt: RunRuntime) -> int:
    """Job log bytes the run's rows already hold (distinct blobs), from the store."""
    with rt.store.session() as s:
        rows = s.exec(select(Blob.size).where(Blob.sha256.in_(  # type: ignore[attr-defined]
            select(Job.log_blob_sha).where(Job.run_id == rt.run_id,
                                           col(Job.log_blob_sha).is_not(None))))).all()
    return sum(rows)


def settle(rt: RunRuntime, sj: SandboxJob | None, job_id: str, tool_call_id: int | None,
           lost: bool = False, lost_state: JobState = JobState.lost) -> Job:
    """Record a job's end once; a still-running job is returned unchanged."""
    with rt.store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        if row.state != JobState.running:
            return row
        if not lost and (sj is None or sj.state == JobState.running):
            return row
    blob, size = keep_log(rt, row.log_path)
    source = "job" if row.is_background else "command"
    rt.scanner.scan(source, tool_call_id=tool_call_id, job_id=job_id)
    with rt.store.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        if row.state == JobState.running:
            row.state = lost_state if lost or sj is None else sj.state
            row.exit_code = None if sj is None else sj.exit_code
            ended = sj.ended_at if sj is not None and sj.ended_at else None
            row.ended_at = datetime.fromtimestamp(ended, UTC) if ended else datetime.now(UTC)
            row.log_blob_sha, row.log_bytes = blob, size
            s.add(row)
            rt.log.info("job %s ended: %s (exit %s)", job_id, row.state, row.exit_code)
        return row


def _running(rt: RunRuntime) -> list[Job]:
    with rt.store.session() as s:
        return list(s.exec(select(Job).where(Job.run_id == rt.run_id,
                                             Job.state == JobState.running)).all())


def _attach(rt: RunRuntime) -> Sandbox | None:
    try:
        return rt.sandbox()
    except ToolError:  # the supervisor is gone and may not start again (deadline passed)
        return None


def stop_all(rt: RunRuntime, tool_call_id: int | None = None) -> None:
    """Kill every running job (recorded as killed) and end the run's supervisor."""
    sandbox = _attach(rt) if _running(rt) or rt.has_sandbox() else None
    if sandbox is not None:
        for row in _running(rt):
            with contextlib.suppress(SandboxError):
                settle(rt, sandbox.kill(row.id), row.id, tool_call_id)
        sandbox.stop()
    elif rt.has_sandbox():
        # its supervisor ended itself at the deadline and cannot start again: what it left
        # (an exited container, an empty cgroup) goes now, or the run would hold it for ever
        from .runtime import make_sandbox

        with contextlib.suppress(SandboxError, ToolError, OSError):
            make_sandbox(rt.backend, rt.sandbox_spec()).release()
    reconcile(rt, tool_call_id)


def reconcile(rt: RunRuntime, tool_call_id: int | None = None) -> list[Job]:
    """Settle every job that ended while nobody was looking.

    Jobs of a supervisor that is gone are `timeout` when the deadline has passed (the
    supervisor stops every job then), else `lost`.
    """
    running = _running(rt)
    if not running:
        return []
    sandbox = _attach(rt)
    if sandbox is None:
        deadline = rt.clock.deadline()
        state = (JobState.timeout if deadline and deadline <= datetime.now(UTC)
                 else JobState.lost)
        return [settle(rt, None, row.id, tool_call_id, lost=True, lost_state=state)
                for row in running]
    alive = sandbox.alive()
    settled = []
    for row in running:
        if not alive:
            settled.append(settle(rt, None, row.id, tool_call_id, lost=True))
            continue
        try:
            sj = sandbox.get(row.id)
        except SandboxError:
            settled.append(settle(rt, None, row.id, tool_call_id, lost=True))
            continue
        settled.append(settle(rt, sj, row.id, tool_call_id))
    return settled


def log_file_of(rt: RunRuntime, log_path: str) -> Path:
    """Where a job's log is on the host: `logs/<job>.log` names a file of the supervisor's
    folder (jobs cannot write it); any other path (rows of older versions) is not read."""
    folder, _, name = log_path.partition("/")
    if folder != LOGS or not name or "/" in name or name.startswith("."):
        return rt.job_logs_dir / ".none"
    return rt.job_logs_dir / name


def log_file(rt: RunRuntime, row: Job) -> Path:
    return log_file_of(rt, row.log_path)
