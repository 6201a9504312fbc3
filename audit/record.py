"""What every check reads: one run's record, loaded once from the store.

Why one loaded record: an audit runs six checks over the same rows; loading them once keeps the
audit's cost one pass over the store, and a check written against `RunRecord` is a pure function
of its input (tests build a record from real rows and call the check directly). Large texts
(revisions' contents, job logs) are not loaded here: `texts` streams them one at a time, so a run
with a gigabyte of generated data is read in bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from a2rl.store import (
    BudgetEvent,
    Evaluation,
    Job,
    JobFile,
    Revision,
    Run,
    Store,
    Submission,
    ToolCall,
)
from a2rl.store.status import BudgetEventKind

from .model import Flag


@dataclass(frozen=True)
class RunRecord:
    """A run's rows, ordered by time. `home` is the run's folder on the host (its workspace
    image and logs), None when the record came from an archive without files."""

    store: Store
    run: Run
    tool_calls: list[ToolCall]
    revisions: list[Revision]
    jobs: list[Job]
    submissions: list[Submission]
    evaluations: list[Evaluation]
    home: Path | None = None
    #: the workspace files the jobs opened, as the kernel reported them (schema v8); empty
    #: where the run had no access record (the audit then walks the whole workspace)
    job_files: list[JobFile] = field(default_factory=list)
    #: the revision scans that stopped before seeing the whole workspace (their events)
    scan_stops: list[BudgetEvent] = field(default_factory=list)

    def blob(self, sha: str) -> bytes:
        """A stored blob's bytes (a revision's content, a job's log)."""
        return self.store.get_blob(sha)


@dataclass(frozen=True)
class CheckResult:
    """What one check found (`flags`) and what it looked at (`summary`: counts a reader uses to
    judge how much a clean result says, stored as `AuditReport.checks[name]`)."""

    flags: list[Flag] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


#: A check: a function of the record (and of the audit's inputs that live off the record, such as
#: the task's hidden items, passed by keyword by `audit_run`) to its result.
Check = Callable[..., CheckResult]


def load_record(store: Store, run_id: str) -> RunRecord:
    """The record of `run_id`; KeyError if the store has no such run."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise KeyError(run_id)

        def rows(model: Any, order: Any) -> list[Any]:
            return list(s.exec(select(model).where(model.run_id == run_id).order_by(order)).all())

        record = RunRecord(
            store=store, run=run,
            tool_calls=rows(ToolCall, col(ToolCall.id)),
            revisions=rows(Revision, col(Revision.id)),
            jobs=rows(Job, col(Job.started_at)),
            submissions=rows(Submission, col(Submission.created_at)),
            evaluations=rows(Evaluation, col(Evaluation.id)),
            home=Path(run.workspace).parent if run.workspace else None,
            job_files=rows(JobFile, col(JobFile.id)),
            scan_stops=list(s.exec(select(BudgetEvent).where(
                BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.scan_stopped)
                .order_by(col(BudgetEvent.id))).all()),
        )
        for r in [run, *record.tool_calls, *record.revisions, *record.jobs,
                  *record.submissions, *record.evaluations, *record.job_files,
                  *record.scan_stops]:
            s.expunge(r)
    return record


def revision_texts(record: RunRecord) -> Iterator[tuple[Revision, bytes]]:
    """Each revision whose content is stored, with that content, one at a time."""
    for rev in record.revisions:
        if rev.blob_sha and rev.content_stored:
            yield rev, record.blob(rev.blob_sha)
