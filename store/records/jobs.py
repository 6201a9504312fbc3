"""`job` rows: a command opened, marked background once it outlived its wait, settled once.

    running --settle--> exited | killed | timeout | lost

A job's end is written once, whole, by `settle`: its state and exit code, when it ended and
why (the cause and its evidence), its log's blob and size, what its processes used, and
whether the kernel's record of its files covers it. Whoever sees the end first settles it
(the tool that waited on it, the watcher thread, a reconcile after a restart); a later
`settle` finds the row settled and leaves it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..db import Store
from ..models import Job
from ..status import JobState


@dataclass(frozen=True)
class JobEnd:
    """How a job ended, as its row records it (`Job`'s columns of the same names)."""

    state: str  # a JobState other than running
    exit_code: int | None
    ended_at: datetime
    end_cause: str | None
    end_evidence: str | None
    log_blob_sha: str | None
    log_bytes: int
    files_recorded: str | None
    cpu_s: float | None = None
    memory_peak_bytes: int | None = None
    gpu_s: float | None = None
    gpu_memory_peak_bytes: int | None = None


def open_job(store: Store, *, id: str, run_id: str, command: str, log_path: str,
             tool_call_id: int | None, snapshot_id: int | None) -> None:
    """A command's job, running from now, with the code snapshot it started with."""
    with store.session() as s:
        s.add(Job(id=id, run_id=run_id, command=command, log_path=log_path,
                  tool_call_id=tool_call_id, snapshot_id=snapshot_id))


def mark_background(store: Store, job_id: str) -> None:
    """The job outlived `run_command`'s wait: a background job from now on."""
    with store.session() as s:
        row = s.get(Job, job_id)
        if row is None:
            raise KeyError(f"no job {job_id!r}")
        row.is_background = True
        s.add(row)


def settle(store: Store, job_id: str, end: JobEnd) -> tuple[Job, bool]:
    """Record the job's end, once: the row, and whether this call wrote it (False: it was
    settled already, and is returned as it is)."""
    if end.state == JobState.running:
        raise ValueError(f"job {job_id}: a running job has no end to settle")
    with store.session() as s:
        row = s.get(Job, job_id)
        if row is None:
            raise KeyError(f"no job {job_id!r}")
        if row.state != JobState.running:
            return row, False
        row.state, row.exit_code, row.ended_at = end.state, end.exit_code, end.ended_at
        row.end_cause, row.end_evidence = end.end_cause, end.end_evidence
        row.log_blob_sha, row.log_bytes = end.log_blob_sha, end.log_bytes
        row.files_recorded = end.files_recorded
        row.cpu_s, row.memory_peak_bytes = end.cpu_s, end.memory_peak_bytes
        row.gpu_s, row.gpu_memory_peak_bytes = end.gpu_s, end.gpu_memory_peak_bytes
        s.add(row)
        return row, True
