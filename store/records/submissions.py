"""`submission` rows: reserved, refused, dropped, accepted into the queue, graded.

A submission's states (`SubmissionStatus`):

    validating --refuse--> refused
    validating --drop----> (deleted: an identical resubmission, answered with the earlier one)
    validating --accept--> queued --start_grading--> grading --graded--> graded | failed
                                                     grading --requeue--> queued

`validating` is reserved (counted against the run's limit) while the grader-owned copy is
made and checked: `reserve` counts and inserts in one transaction with the run's row locked,
so two submits at once cannot both take the last place. The submit tool moves a row out of
`validating`, the grading queue (`records.grade_requests`, in its own transactions) moves it
after. A graded submission scored again (on test, at the end of a `heldout` run) goes
through `grading` again.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from ..db import Store
from ..models import Run, Submission
from ..status import SubmissionStatus
from .transition import WrongState

#: The states of a submission still waiting for its score.
PENDING = (SubmissionStatus.queued, SubmissionStatus.grading)


class SubmissionLimit(Exception):
    """The run has used its `limit` submissions (refused ones do not count)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"submission limit reached ({limit})")
        self.limit = limit


class TooManyPending(Exception):
    """`pending` of the run's submissions are being checked or wait for grading, the most
    it may have (`cap`)."""

    def __init__(self, pending: int, cap: int) -> None:
        super().__init__(f"{pending} submissions pending (at most {cap})")
        self.pending, self.cap = pending, cap


def reserve(store: Store, *, id: str, run_id: str, path: str, note: str | None,
            tool_call_id: int | None, max_submissions: int | None,
            max_pending: int) -> Submission:
    """Insert a `validating` submission if the run has one left (`SubmissionLimit`) and
    fewer than `max_pending` pending (`TooManyPending`: a cap on what one run has in the
    grading queue, so it cannot hold the grader, one machine-wide lock, for everyone else's
    turn; validating ones count, so two submits at once cannot both pass). Counted and
    inserted in one transaction with the run's row locked."""
    with store.session() as s:
        s.exec(select(Run.id).where(Run.id == run_id).with_for_update()).first()
        if max_submissions is not None:
            used = len(s.exec(select(Submission.id).where(
                Submission.run_id == run_id,
                Submission.status != SubmissionStatus.refused)).all())
            if used >= max_submissions:
                raise SubmissionLimit(max_submissions)
        pending = len(s.exec(select(Submission.id).where(
            Submission.run_id == run_id,
            Submission.status.in_((SubmissionStatus.validating, *PENDING)))  # type: ignore[attr-defined]
            ).all())
        if pending >= max_pending:
            raise TooManyPending(pending, max_pending)
        sub = Submission(id=id, run_id=run_id, path=path, note=note,
                         tool_call_id=tool_call_id, status=SubmissionStatus.validating)
        s.add(sub)
        return sub


def _validating(s: Session, submission_id: str, wanted: str) -> Submission:
    row = s.get(Submission, submission_id)
    if row is None:
        raise KeyError(f"no submission {submission_id!r}")
    if row.status != SubmissionStatus.validating:
        raise WrongState("submission", submission_id, row.status, wanted)
    return row


def refuse(store: Store, submission_id: str, error: str) -> None:
    """A reserved submission refused (`error` worded for the agent): no copy, no hashes."""
    with store.session() as s:
        row = _validating(s, submission_id, SubmissionStatus.refused)
        row.status, row.error, row.checkpoint_dir = SubmissionStatus.refused, error, None
        s.add(row)


def drop(store: Store, submission_id: str) -> None:
    """A reserved submission's row deleted: it was identical to an earlier one, which
    answers it, so it must not count against the limit (gone already: nothing to do)."""
    with store.session() as s:
        row = s.get(Submission, submission_id)
        if row is None:
            return
        if row.status != SubmissionStatus.validating:
            raise WrongState("submission", submission_id, row.status, "dropped")
        s.delete(row)


def accept(store: Store, submission_id: str, *, checkpoint_dir: str,
           file_hashes: dict[str, str], l2_distance: float | None, near_copy: bool,
           snapshot_id: int | None, lineage: dict[str, Any]) -> None:
    """A reserved submission checked and queued: its grader-owned copy and its files'
    sha256, its distance from the base, the code snapshot and its lineage."""
    with store.session() as s:
        row = _validating(s, submission_id, SubmissionStatus.queued)
        row.l2_distance, row.near_copy = l2_distance, near_copy
        row.checkpoint_dir, row.file_hashes = checkpoint_dir, file_hashes
        row.snapshot_id, row.status = snapshot_id, SubmissionStatus.queued
        row.lineage = lineage
        s.add(row)


def start_grading(s: Session, submission_id: str) -> Submission | None:
    """A grader takes the submission (in its transaction); the row, None if it is gone. From
    any state: a graded one is scored again on test at the end of a `heldout` run, and one
    never accepted has no copy, so its grading fails and says so (`graded`)."""
    row = s.get(Submission, submission_id)
    if row is None:
        return None
    row.status = SubmissionStatus.grading
    s.add(row)
    return row


def requeue(s: Session, submission_id: str) -> None:
    """Its grading was given back (the grading process stopped): queued again, if it was
    being graded."""
    row = s.get(Submission, submission_id)
    if row is not None and row.status == SubmissionStatus.grading:
        row.status = SubmissionStatus.queued
        s.add(row)


def graded(s: Session, submission_id: str, error: str | None) -> None:
    """Its evaluation is recorded (in the queue's transaction): `graded`, or `failed` with
    the evaluation's error."""
    row = s.get(Submission, submission_id)
    if row is not None:
        row.status = SubmissionStatus.failed if error else SubmissionStatus.graded
        row.error = error
        s.add(row)
