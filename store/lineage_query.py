"""Checkpoint lineage from the store: the rows `build_lineage` (store/lineage.py) reads, for
one submission of a run. Called by `submit_checkpoint` when the submission is made (after the
run's access journal is read in), and by whoever wants it again later (`a2rl replay`, stage
attribution)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlmodel import select

from .db import Store
from .lineage import Access, Edit, JobInfo, Lineage, LineageInputs, build_lineage, normalize
from .models import Job, JobFile, SnapshotFile, Submission, ToolCall

MAX_CODE_BYTES = 1 << 20  # a code file read for the checkpoints it names, at most


@dataclass(frozen=True)
class Submitted:
    """What a lineage is built from of a submission whose row does not hold it yet (the
    submit tool builds it before the row is accepted): the run, the path, the copy's hashes
    and when it was made."""

    run_id: str
    path: str
    created_at: datetime
    file_hashes: dict[str, str] = field(default_factory=dict)


def _ts(when: datetime | None) -> float | None:
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def lineage_inputs(store: Store, submission: Submission | Submitted,
                   submitted_at: datetime | None = None) -> LineageInputs:
    """What `build_lineage` needs for `submission` (its file hashes, the run's jobs, file
    accesses and edit_file calls), as of `submitted_at` (default: when it was made)."""
    run_id = submission.run_id
    with store.session() as s:
        jobs = s.exec(select(Job).where(Job.run_id == run_id)).all()
        files = s.exec(select(JobFile.job_id, JobFile.path, JobFile.read, JobFile.written,
                              JobFile.first_at, JobFile.last_at, JobFile.size, JobFile.sha256)
                       .where(JobFile.run_id == run_id)).all()
        calls = s.exec(select(ToolCall).where(ToolCall.run_id == run_id,
                                              ToolCall.tool == "edit_file",
                                              ToolCall.is_error == False)).all()  # noqa: E712
    job_infos = {j.id: JobInfo(id=j.id, command=j.command, snapshot_id=j.snapshot_id,
                               started_at=_ts(j.started_at) or 0.0, ended_at=_ts(j.ended_at),
                               files_recorded=j.files_recorded) for j in jobs}
    accesses = [Access(job_id=job, path=path, read=read, written=written,
                       first_at=_ts(first) or 0.0, last_at=_ts(last) or 0.0, size=size,
                       sha256=sha) for job, path, read, written, first, last, size, sha in files]
    edits = [Edit(seq=c.seq, path=normalize(str(c.arguments.get("path") or "")),
                  at=(_ts(c.started_at) or 0.0) + c.duration_ms / 1000.0)
             for c in calls if isinstance(c.arguments, dict)]
    when = submitted_at or submission.created_at
    return LineageInputs(checkpoint=submission.path, file_hashes=dict(submission.file_hashes or {}),
                         submitted_at=_ts(when) or 0.0, jobs=job_infos, accesses=accesses,
                         edits=edits, code_text=lambda snap, path: code_text(store, snap, path))


def code_text(store: Store, snapshot_id: int, path: str) -> str | None:
    """A file of a code snapshot as text (None: not in it, too large, or gone)."""
    with store.session() as s:
        row = s.get(SnapshotFile, (snapshot_id, path))
    if row is None:
        return None
    try:
        data = store.get_blob(row.blob_sha)
    except Exception:  # noqa: BLE001 - a missing blob is a file not read
        return None
    return data[:MAX_CODE_BYTES].decode("utf-8", "replace")


def lineage_of(store: Store, submission: Submission | Submitted,
               submitted_at: datetime | None = None) -> Lineage:
    """The lineage of `submission` built from the store now."""
    return build_lineage(lineage_inputs(store, submission, submitted_at))


def stored_lineage(submission: Submission) -> Lineage | None:
    """`Submission.lineage` as stored, typed; None for rows without one (older versions, a
    refused submission)."""
    data: Any = submission.lineage
    if not data:
        return None
    try:
        return Lineage.model_validate(data)
    except ValueError:
        return None
