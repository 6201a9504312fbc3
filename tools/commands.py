"""run_command, job_status and job_kill: shell commands in the run's sandbox.

Every command is a job of the run's sandbox supervisor. `run_command` waits a bounded time;
a command that is still running then keeps going as a background job, polled with
`job_status` and stopped with `job_kill`. No tool call is ever held open for long.
"""

from __future__ import annotations

import time
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from sqlmodel import select

from a2rl.sandbox.base import JobState, Sandbox, SandboxError, SandboxJob
from a2rl.store import Job
from a2rl.store.records import jobs as job_rows

from .gpu_usage import track
from .jobs import job_info, new_job_id, reconcile, settle, watch
from .output import log_size, read_bounded
from .results import CommandResult, JobStatusResult
from .runtime import current, in_thread

MAX_WAIT_S = 60.0


#: The longest one worker thread waits on a job: a long wait is a series of these, so that a
#: run's other calls (a job_kill behind its own job_status waits) get a thread between them.
WAIT_SLICE_S = 2.0


async def wait_for_job(sandbox: Sandbox, job_id: str, seconds: float) -> SandboxJob:
    """The job once it ended, or as it is after `seconds`; in slices of WAIT_SLICE_S."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        sj = await in_thread(sandbox.wait, job_id, max(0.0, min(left, WAIT_SLICE_S)),
                             waiting=True)
        if sj.state != JobState.running or left <= WAIT_SLICE_S:
            return sj


def _bound_wait(wait_s: float) -> float:
    limit = current().runtime.settings.server.max_wait_s
    return min(wait_s, limit, MAX_WAIT_S)


async def run_command(
    command: Annotated[str, Field(min_length=1, max_length=100_000,
                                  description="a bash command, run in the workspace root")],
    wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S, description=(
        "seconds to wait for the command to finish (at most 60); after that it keeps "
        "running as a background job"))] = 30,
) -> CommandResult:
    """Run a shell command in the run's sandbox (the workspace is the current directory).

    If it finishes within `wait_s` you get its exit code and output. Otherwise it keeps
    running as a background job: the result has `status: "running"` and a `job_id`; poll it
    with job_status(job_id=..., wait_s=...) and stop it with job_kill. Use this for training:
    start it, then poll. Output shows the head and tail only; the whole output is in
    `log_path` (read it with read_file). The sandbox has no network access.
    """
    call = current()
    rt = call.runtime
    if not command.strip():
        raise ToolError("command is empty")
    sandbox = await in_thread(rt.sandbox.get)
    await in_thread(sandbox.watch_access)  # a recorder that died is started again, first
    job_id = new_job_id()
    log_path = f"logs/{job_id}.log"  # the supervisor's name for it; see JobLogs.file_of
    # the code it runs with: the workspace's code now (the last snapshot when unchanged)
    snapshot_id = await in_thread(rt.scanner.code_snapshot, f"job {job_id}",
                                  call.tool_call_id)
    job_rows.open_job(rt.store, id=job_id, run_id=rt.run_id, command=command,
                      log_path=log_path, tool_call_id=call.tool_call_id,
                      snapshot_id=snapshot_id)
    try:
        await in_thread(sandbox.spawn, job_id, command)
        await in_thread(track, rt)  # its GPU use is sampled from now on, ended or not
        sj = await wait_for_job(sandbox, job_id, _bound_wait(wait_s))
    except SandboxError as exc:
        await in_thread(lambda: settle(rt, None, job_id, call.tool_call_id, True))
        raise ToolError(str(exc)) from exc
    s_ = rt.settings
    out = await in_thread(
        read_bounded, rt.job_logs.file_of(log_path), s_.recording.output_head_bytes,
        s_.recording.output_tail_bytes)
    if sj.state == JobState.running:
        job_rows.mark_background(rt.store, job_id)
        watch(rt)  # its end is recorded when it happens, polled or not
        return CommandResult(
            status="running", job_id=job_id, output=out.text, output_bytes=out.total_bytes,
            truncated=out.truncated, log_path=log_path,
            hint=f"still running as job {job_id}: poll with job_status(job_id='{job_id}', "
                 "wait_s=30) or stop it with job_kill")
    await in_thread(lambda: settle(rt, sj, job_id, call.tool_call_id))
    hint = ""
    if sj.reason:  # a limit ended it: the supervisor says which
        hint = sj.reason
    elif sj.state in (JobState.killed, JobState.timeout):
        hint = f"the command was {sj.state.value}" + (f": {sj.evidence}" if sj.evidence else "")
    elif sj.cause == "signal":  # the supervisor's evidence: which signal, and no OOM kill
        hint = f"the command was killed by a signal: {sj.evidence}"
    elif sj.exit_code is not None and (sj.exit_code < 0 or sj.exit_code >= 128) \
            and not sj.cause:  # an older supervisor, which says no more
        signum = -sj.exit_code if sj.exit_code < 0 else sj.exit_code - 128
        hint = f"the command was killed by signal {signum}"
    return CommandResult(
        status="exited", exit_code=sj.exit_code, job_id=job_id, output=out.text,
        output_bytes=out.total_bytes, truncated=out.truncated, log_path=log_path, hint=hint)


def _get_row(run_id: str, job_id: str) -> Job:
    rt = current().runtime
    with rt.store.session() as s:
        row = s.get(Job, job_id)
    if row is None or row.run_id != run_id:
        raise ToolError(f"no job {job_id!r} in this run; call job_status() to list the jobs")
    return row


async def job_status(
    job_id: Annotated[str | None, Field(description="the job to look at; omit to list all")] = None,
    wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S, description=(
        "wait up to this many seconds for the job to end before answering"))] = 0,
    offset: Annotated[int, Field(ge=0, description=(
        "byte offset in the job's log; pass the previous next_offset to get only new output"
        ))] = 0,
) -> JobStatusResult:
    """The state of one background job and its output since `offset`, or a list of all jobs.

    With `wait_s` > 0 the call returns as soon as the job ends, or after `wait_s` seconds.
    Long output is shown as its tail; the full log is at the job's `log_path`.
    """
    call = current()
    rt = call.runtime
    if job_id is None:
        await in_thread(lambda: reconcile(rt, call.tool_call_id))
        with rt.store.session() as s:
            rows = s.exec(select(Job).where(Job.run_id == rt.run_id)
                          .order_by(Job.started_at)).all()  # type: ignore[arg-type]
        return JobStatusResult(jobs=[job_info(r) for r in rows])
    row = _get_row(rt.run_id, job_id)
    if row.state == JobState.running:
        sandbox = await in_thread(rt.sandbox.get)
        watch(rt)  # a server restarted since the job began watches it from now on
        try:
            sj = await wait_for_job(sandbox, job_id, _bound_wait(wait_s))
            row = await in_thread(
                lambda: settle(rt, sj, job_id, call.tool_call_id))
        except SandboxError:
            row = await in_thread(
                lambda: settle(rt, None, job_id, call.tool_call_id, lost=True))
    path = rt.job_logs.file_of(row.log_path)
    size = await in_thread(log_size, path)
    offset = min(offset, size)
    tail = rt.settings.recording.output_head_bytes + rt.settings.recording.output_tail_bytes
    start = max(offset, size - tail)
    out = await in_thread(lambda: read_bounded(path, 0, tail, offset=start))
    return JobStatusResult(job=job_info(row), output=out.text, output_offset=start,
                           next_offset=size, truncated=start > offset)


async def job_kill(
    job_id: Annotated[str, Field(min_length=1, description="the job to stop")],
) -> JobStatusResult:
    """Stop a job and every process it started (its whole process tree)."""
    call = current()
    rt = call.runtime
    row = _get_row(rt.run_id, job_id)
    if row.state != JobState.running:
        raise ToolError(f"job {job_id} is not running (state: {row.state})")
    sandbox = await in_thread(rt.sandbox.get)
    try:
        sj = await in_thread(sandbox.kill, job_id, "job_kill",
                             f"job_kill by the agent (tool call #{call.tool_call_id})")
    except SandboxError as exc:
        raise ToolError(str(exc)) from exc
    row = await in_thread(lambda: settle(rt, sj, job_id, call.tool_call_id))
    out = await in_thread(
        read_bounded, rt.job_logs.file_of(row.log_path), 0, rt.settings.recording.output_tail_bytes)
    return JobStatusResult(job=job_info(row), output=out.text, next_offset=row.log_bytes)
