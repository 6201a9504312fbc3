"""submit_checkpoint and get_score: handing models to the grader and reading scores back.

A submission first reserves its row (counted against `--max-submissions` and inserted in one
transaction, so concurrent calls cannot exceed the limit), then its folder is copied once into
a grader-owned area outside the sandbox (see `checkpoint_copy`: no symlink, hard link or
special file, size caps), and only that copy is validated, hashed and graded; refusals are
immediate and recorded. The call returns with a submission id while grading goes on through
the run's `GradingHook` (the serving process's grading pump).

An identical resubmission (the copy's files, by their sha256, are those of an earlier
submission of the run that is queued, being graded or graded) is answered with that earlier
submission's id and status: it is not validated or graded again, and its reserved row is
dropped, so it does not count against `--max-submissions`; at the limit too (the folder is
then copied only to be compared, and anything else gets the limit's refusal). The hashes
compared are the copy's, never the workspace's: the agent may change the folder between
calls. An earlier submission that was refused is never matched (refused ones have no hashes,
and are free to retry), nor one whose grading failed (the failure may have been the
machine's: submitting the same files again grades them again, and counts).

Every call, refused or not, is first let through the run's rate of checks and then counted to
the run with the CPU its check took (`submission_checks`).
"""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from sqlmodel import select

from a2rl.layout import BASE_MODEL, OUTPUT
from a2rl.sandbox.workspace_fs import WalkCapped, WorkspaceError, show
from a2rl.store import (
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Run,
    Submission,
    SubmissionStatus,
    utcnow,
)
from a2rl.store.lineage import Lineage
from a2rl.store.lineage_query import Submitted, lineage_of
from a2rl.store.queries import best_submission
from a2rl.store.records import submissions

from . import access_record
from .checkpoint_copy import CopyCaps, CopyRefused, copy_checkpoint
from .runtime import RunRuntime, current, in_thread
from .submission_checks import Check, counted_check

#: What the agent is told while a submission is not graded yet (get_score waits on these).
PENDING = submissions.PENDING


def _grading() -> ModuleType:
    """`a2rl.grading`, imported by the first submission. What it runs in this process (the
    shape checks) needs neither torch nor transformers: everything that loads a checkpoint runs
    in a process of its own, so a server never pays their imports. (Python's import lock makes
    concurrent first submissions safe; transformers' lazy names, which needed a lock of ours,
    are no longer resolved here.)"""
    import a2rl.grading

    return a2rl.grading

MAX_SCORE_WAIT_S = 60.0


class SubmitResult(BaseModel):
    submission_id: str
    status: str
    split: str = Field(description="the split this submission is scored on")
    l2_distance: float | None = Field(None, description="relative L2 distance from the base")
    warning: str = ""
    hint: str
    resubmission: bool = Field(False, description=(
        "true when the files are byte for byte those of submission_id, submitted earlier: "
        "not graded again and not counted against the submission limit"))


class SubmissionScore(BaseModel):
    """What the agent is told about one submission's grading (the `score` tool's answer):
    status and aggregate only, never per-item results (those are the grader's `TaskScore`)."""

    submission_id: str | None
    status: str = Field(description="queued, grading, graded, failed, refused or none")
    split: str | None = None
    score: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    baseline: float | None = None
    improvement: float | None = None
    best_submission_id: str | None = None
    best_score: float | None = None
    error: str | None = None
    note: str = ""
    waited_s: float | None = Field(None, description=(
        "seconds given back to your clock when it was graded, for the time your submissions "
        "waited behind other runs' evaluations (a wait shared by two of them is given once, "
        "and all grading gives back is capped)"))


def _baseline(run: Run, split: str) -> float | None:
    return run.baseline_test if split == "test" else run.baseline_dev


def _new_submission_id() -> str:
    return "s-" + secrets.token_hex(4)


@dataclass(frozen=True)
class _Pending:
    """A submission asked for, before its row is reserved (a refusal at the limit never
    makes one)."""

    id: str
    run_id: str
    path: str
    note: str | None
    tool_call_id: int


class LimitReached(ToolError):
    """The run has used its submissions (an identical resubmission is still answered)."""


def _reserve(rt: RunRuntime, run: Run, pending: _Pending) -> Submission:
    """The submission's `validating` row, if the run has a submission left and room in the
    grading queue (`a2rl.store.records.submissions.reserve`: counted and inserted in one
    transaction with the run's row locked)."""
    try:
        return submissions.reserve(
            rt.store, id=pending.id, run_id=run.id, path=pending.path, note=pending.note,
            tool_call_id=pending.tool_call_id, max_submissions=run.max_submissions,
            max_pending=rt.grading_settings.max_pending_grades)
    except submissions.SubmissionLimit as exc:
        raise LimitReached(f"submission limit reached ({exc.limit}); "
                           "the best submission so far counts") from None
    except submissions.TooManyPending as exc:
        raise ToolError(f"{exc.pending} submission(s) of this run are pending grading (queued "
                        f"or being graded) and at most {exc.cap} may be: wait for get_score on "
                        "one, then submit again") from None


def _refuse(rt: RunRuntime, sub: Submission, error: str, dest: object) -> ToolError:
    submissions.refuse(rt.store, sub.id, error)
    if dest is not None:
        shutil.rmtree(str(dest), ignore_errors=True)
    rt.log.info("submission %s refused: %s", sub.id, error)
    return ToolError(f"submission refused: {error}")


#: The earlier submissions an identical resubmission is answered with (see the module doc).
MATCHED = (SubmissionStatus.queued, SubmissionStatus.grading, SubmissionStatus.graded)


def _identical(rt: RunRuntime, sub: _Pending | Submission,
               hashes: dict[str, str]) -> Submission | None:
    """The run's earliest other submission with exactly these file hashes, if it is one an
    identical resubmission is answered with."""
    with rt.store.session() as s:
        rows = s.exec(select(Submission).where(
            Submission.run_id == sub.run_id, Submission.id != sub.id,
            Submission.status.in_(MATCHED))  # type: ignore[attr-defined]
            .order_by(Submission.created_at)).all()  # type: ignore[arg-type]
    return next((row for row in rows if row.file_hashes and row.file_hashes == hashes), None)


def _drop(rt: RunRuntime, sub: Submission, dest: object) -> None:
    """An identical resubmission's reserved row and copy: gone, so that it is not counted."""
    submissions.drop(rt.store, sub.id)
    shutil.rmtree(str(dest), ignore_errors=True)


def _base_bytes(rt: RunRuntime) -> int:
    try:
        return sum(e.st.st_size for e in rt.workspace.fs().walk((BASE_MODEL,), max_depth=4))
    except (WorkspaceError, WalkCapped):
        return 0


class _Refused(Exception):
    """Why a submission is refused, worded for the agent."""


def _checkpoint_parts(rt: RunRuntime, path: str) -> tuple[tuple[str, ...], str]:
    try:
        parts = rt.workspace.parts(path)
    except WorkspaceError as exc:
        raise _Refused(str(exc)) from None
    shown = show(parts)
    if parts[:1] != (OUTPUT,) or len(parts) < 2:
        raise _Refused(f"{shown} is not under output/: checkpoints must be directories "
                       "under output/, for example output/sft")
    return parts, shown


def _copy(rt: RunRuntime, parts: tuple[str, ...], shown: str, dest: Path) -> dict[str, str]:
    """The checkpoint copied to `dest` (grader-owned); its files' sha256 by relative path."""
    base = _base_bytes(rt)
    caps = CopyCaps(max_file_bytes=max(3 * base, 2**30),
                    max_total_bytes=max(3 * base, 2**30) + 2**28)
    try:
        return copy_checkpoint(rt.workspace.root, dest, parts=parts, caps=caps, shown=shown)
    except CopyRefused as exc:
        error = str(exc)
        if "does not exist" in error:
            error = (f"{shown} does not exist; save the checkpoint under output/ with "
                     "save_pretrained and pass its path")
        elif "not a directory" in error:
            error = (f"{shown} is a file; pass the checkpoint directory that holds config.json "
                     "and the weights")
        raise _Refused(error) from None


def _answered_with(rt: RunRuntime, earlier: Submission, shown: str, split: str) -> SubmitResult:
    rt.log.info("submission of %s is identical to %s: answered with it", shown, earlier.id)
    return SubmitResult(
        submission_id=earlier.id, status=earlier.status, split=split,
        l2_distance=earlier.l2_distance, resubmission=True,
        warning=f"{shown} holds the same files as submission {earlier.id}: not graded again "
                "and not counted against the submission limit",
        hint=f"get_score(submission_id='{earlier.id}', wait_s=60)")


def _at_limit(rt: RunRuntime, sub: _Pending, split: str, limit: LimitReached) -> SubmitResult:
    """At the submission limit, an identical resubmission is still answered with the earlier
    submission (it would not count); anything else gets the limit's refusal. The folder is
    copied to be compared, as every submission is (no row is made: a refusal at the limit
    never made one)."""
    dest = rt.settings.home_dir / "checkpoints" / sub.run_id / f".compare-{sub.id}"
    try:
        parts, shown = _checkpoint_parts(rt, sub.path)
        earlier = _identical(rt, sub, _copy(rt, parts, shown, dest))
    except _Refused:
        earlier = None
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    if earlier is None:
        raise limit
    return _answered_with(rt, earlier, shown, split)


@dataclass
class _Accepted:
    """A submission that passed its check: the verdict (a `CheckpointCheck`), the path as
    the agent gave it, the grader's copy and its files' sha256."""

    check: Any
    shown: str
    dest: Path
    hashes: dict[str, str]


def _checked(rt: RunRuntime, run: Run, pending: _Pending, counted: Check
             ) -> SubmitResult | tuple[Submission, _Accepted]:
    """Reserve, copy, compare and validate the submission (all of it counted to the run:
    `counted`): the answer when it is an identical resubmission, else its row and what was
    accepted. A refusal raises."""
    split = run.config.feedback_split
    try:
        sub = _reserve(rt, run, pending)
    except LimitReached as limit:
        answer = _at_limit(rt, pending, split, limit)
        counted.outcome = "identical"
        return answer
    try:
        parts, shown = _checkpoint_parts(rt, sub.path)
    except _Refused as exc:
        raise _refuse(rt, sub, str(exc), None) from None
    dest = rt.settings.home_dir / "checkpoints" / run.id / sub.id
    try:
        hashes = _copy(rt, parts, shown, dest)
    except _Refused as exc:
        raise _refuse(rt, sub, str(exc), dest) from None
    earlier = _identical(rt, sub, hashes)
    if earlier is not None:
        _drop(rt, sub, dest)
        counted.outcome = "identical"
        return _answered_with(rt, earlier, shown, split)
    ours = rt.grading_settings  # the run's limits, whichever process serves it
    grading = _grading()
    limits = grading.ValidationLimits(
        memory_bytes=int(ours.checkpoint_check_memory_gib * 2**30),
        timeout_s=ours.checkpoint_check_timeout_s)
    check = grading.validate_copy(dest, rt.workspace.root / BASE_MODEL, shown, limits)
    counted.validator_cpu_s = check.cpu_s
    if not check.ok:
        raise _refuse(rt, sub, check.error or "invalid checkpoint", dest)
    counted.outcome = "queued"
    return sub, _Accepted(check, shown, dest, hashes)


def _submit(rt: RunRuntime, path: str, note: str | None, tool_call_id: int) -> SubmitResult:
    _grading()  # its first import is the server's, not a check's
    run = rt.run()
    split = run.config.feedback_split
    pending = _Pending(id=_new_submission_id(), run_id=run.id, path=path, note=note,
                       tool_call_id=tool_call_id)
    with counted_check(rt, run, pending.id) as counted:
        checked = _checked(rt, run, pending, counted)
    if isinstance(checked, SubmitResult):
        return checked
    sub, accepted = checked
    check, dest, hashes = accepted.check, accepted.dest, accepted.hashes
    snapshot_id = rt.scanner.snapshot(f"submission {sub.id}", tool_call_id)
    lineage = _lineage(rt, Submitted(run_id=sub.run_id, path=sub.path, file_hashes=hashes,
                                     created_at=sub.created_at), sub.id)
    submissions.accept(rt.store, sub.id, checkpoint_dir=str(dest), file_hashes=hashes,
                       l2_distance=check.l2_relative, near_copy=check.near_copy,
                       snapshot_id=snapshot_id, lineage=lineage)
    rt.grading.request(run.id, sub.id, split)
    rt.log.info("submission %s queued (%s)", sub.id, path)
    warning = ("the weights are very close to the base model's (near copy)"
               if check.near_copy else "")
    return SubmitResult(submission_id=sub.id, status=SubmissionStatus.queued, split=split,
                        l2_distance=check.l2_relative, warning=warning,
                        hint=f"graded in the background: get_score(submission_id='{sub.id}', "
                             "wait_s=60)")


def _lineage(rt: RunRuntime, sub: Submitted, submission_id: str) -> dict[str, object]:
    """Where the checkpoint came from (`a2rl.store.lineage`), from the access record as it is
    now (the recorder synced first: every ended process's writes are in); never fails a
    submission: a lineage that cannot be built says why."""
    folder = access_record.folder_of(rt.dir)
    try:
        access_record.sync(folder)
        access_record.ingest(rt.store, rt.run_id, folder)
        lineage = lineage_of(rt.store, sub, submitted_at=utcnow())
    except Exception as exc:  # noqa: BLE001 - the submission goes on without it
        rt.log.warning("submission %s: lineage not built: %s", submission_id, exc)
        lineage = Lineage(checkpoint=sub.path, complete=False,
                          note=f"the lineage could not be built: {exc}")
    return lineage.model_dump(mode="json")


async def submit_checkpoint(
    path: Annotated[str, Field(description=(
        "a model directory under output/ (full weights saved with save_pretrained, plus "
        "the tokenizer)"))],
    note: Annotated[str | None, Field(
        max_length=2000, description="what this checkpoint is, for the record")] = None,
) -> SubmitResult:
    """Submit a trained checkpoint for grading; returns a submission id at once.

    The directory must be under output/ and load with transformers' AutoModelForCausalLM and
    AutoTokenizer (full weights: merge LoRA adapters first, and leave no adapter files
    beside them). An unchanged copy of the base model is refused; so are symlinks, hard
    links and special files in it. The checkpoint is copied when you submit, so you may keep
    training into the same folder. Grading uses the base model's tokenizer and chat template
    and the task's generation settings (your generation_config.json is ignored). Scores come
    from get_score. Submissions are checked at a bounded rate per minute, refused ones
    included: one over it is refused with the seconds to wait.
    """
    call = current()
    return await in_thread(_submit, call.runtime, path, note, call.tool_call_id)


def _score_of(rt: RunRuntime, sub: Submission, split: str) -> Evaluation | None:
    with rt.store.session() as s:
        return s.exec(select(Evaluation).where(
            Evaluation.submission_id == sub.id, Evaluation.split == split,
            Evaluation.kind == EvaluationKind.submission).order_by(Evaluation.id.desc())  # type: ignore[union-attr]
        ).first()


def score_result(rt: RunRuntime, submission_id: str | None) -> SubmissionScore:
    run = rt.run()
    split = run.config.feedback_split
    baseline = _baseline(run, split)
    best = best_submission(rt.store, run.id, split)
    common = dict(split=split, baseline=baseline,
                  best_submission_id=best[0].id if best else None,
                  best_score=best[1].score if best else None)
    if submission_id is None:
        if best is None:
            return SubmissionScore(submission_id=None, status="none", **common,  # type: ignore[arg-type]
                               note="no graded submission yet")
        sub, ev = best
    else:
        with rt.store.session() as s:
            sub = s.get(Submission, submission_id)
        if sub is None or sub.run_id != run.id:
            raise ToolError(f"no submission {submission_id!r} in this run")
        ev = _score_of(rt, sub, split)
    if ev is None or sub.status in (*PENDING, SubmissionStatus.refused,
                                    SubmissionStatus.validating):
        return SubmissionScore(submission_id=sub.id, status=sub.status, error=sub.error,
                           **common)  # type: ignore[arg-type]
    common["waited_s"] = round(rt.clock.credits(sub.id).wait_s, 3)
    if ev.status != EvaluationStatus.done:
        return SubmissionScore(submission_id=sub.id, status=SubmissionStatus.failed,
                               error=ev.error, **common)  # type: ignore[arg-type]
    improvement = None if ev.score is None or baseline is None else ev.score - baseline
    return SubmissionScore(submission_id=sub.id, status=SubmissionStatus.graded, score=ev.score,
                           ci_low=ev.ci_low,
                       ci_high=ev.ci_high, improvement=improvement, **common)  # type: ignore[arg-type]


async def get_score(
    submission_id: Annotated[str | None, Field(
        description="the submission to look at; omit for the best so far")] = None,
    wait_s: Annotated[float, Field(ge=0, le=MAX_SCORE_WAIT_S, description=(
        "wait up to this many seconds for grading to finish"))] = 0,
) -> SubmissionScore:
    """A submission's score with the baseline and the improvement, or the best so far.

    Under the default `heldout` protocol scores are on a hidden dev split; the final score
    of the run is the best-dev submission scored once on a hidden test split at the end.
    Only aggregate scores are shown, never per-item results.
    """
    rt = current().runtime
    deadline = time.monotonic() + wait_s
    while True:
        result = await in_thread(score_result, rt, submission_id)
        if result.status not in PENDING or time.monotonic() >= deadline:
            return result
        await anyio.sleep(0.25)
