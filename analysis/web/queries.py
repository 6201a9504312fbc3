"""The viewer's reads: aggregates in SQL, pages with LIMIT/OFFSET, blobs fetched one at a time.

Every function takes a store and returns plain values (pydantic models or dicts) for the
templates; nothing here writes. The pages stay fast on runs of 10,000 calls because nothing
here loads a run's calls, logs or evaluations wholesale except where a page shows them all.
"""

from __future__ import annotations

import difflib
import zlib
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func
from sqlmodel import col, select

from a2rl.store import (
    Blob,
    BudgetEvent,
    Evaluation,
    Job,
    Regrade,
    Revision,
    Run,
    Store,
    Submission,
    ToolCall,
    aware,
)
from a2rl.store.outcome import end_kind, is_result, shown_final
from a2rl.store.queries import current_final_evaluation, evaluation_config, match_baseline

from ..fmt import evaluation_config as config_line
from ..fmt import regrade_text
from ..improvement import Scored, paired_improvement
from ..schema import Interval, RegradeNote

LOG_HEAD, LOG_TAIL = 40, 60
MAX_DIFF_LINES = 600


class RunRow(BaseModel):
    """One line of the runs table."""

    run_id: str
    task: str
    agent: str | None
    driver_model: str | None
    status: str
    end_kind: str | None = None  # an EndKind (store.outcome), None while it runs
    result: bool = False  # counted as a result by compare and fleet summaries
    profile: str | None
    fleet_id: str | None
    baseline: float | None
    best_dev: float | None
    final_test: float | None
    final_note: str | None = None  # why final_test is None (no submission...)
    improvement: Interval | None
    submissions: int
    tool_calls: int
    started_at: datetime | None
    duration_s: float | None


def _duration(run: Run) -> float | None:
    start = aware(run.started_at or run.created_at)
    end = aware(run.ended_at)
    return (end - start).total_seconds() if start and end else None


def list_runs(store: Store, fleet: str | None = None, run_id: str | None = None
              ) -> list[RunRow]:
    """Every run (or one fleet's, or one), newest first, with its counts and scores in five
    queries."""
    with store.session() as s:
        q = select(Run).order_by(col(Run.created_at).desc())
        if fleet:
            q = q.where(Run.fleet_id == fleet)
        if run_id:
            q = q.where(Run.id == run_id)
        runs = list(s.exec(q).all())
        subs = dict(s.exec(select(Submission.run_id, func.count())
                           .group_by(Submission.run_id)).all())
        calls = dict(s.exec(select(ToolCall.run_id, func.count())
                            .group_by(ToolCall.run_id)).all())
        best = dict(s.exec(select(Evaluation.run_id, func.max(Evaluation.score)).where(
            Evaluation.kind == "submission", Evaluation.split == "dev",
            Evaluation.status == "done").group_by(Evaluation.run_id)).all())
        finals = {e.submission_id: e for e in s.exec(select(Evaluation).where(
            Evaluation.split == "test", Evaluation.status == "done",
            Evaluation.kind == "submission", col(Evaluation.superseded_by).is_(None),
            col(Evaluation.submission_id).in_(
                [r.final_submission_id for r in runs if r.final_submission_id]))).all()}
        # Each run's baseline test evaluation: the one it recorded, or for older runs the one
        # its score and provenance match (store.queries.match_baseline)
        base_list = list(s.exec(select(Evaluation).where(
            Evaluation.kind == "baseline", Evaluation.split == "test")
            .order_by(col(Evaluation.id))).all())
        base_by_id = {e.id: e for e in base_list if e.id is not None}
    out = []
    for r in runs:
        imp = None
        base = match_baseline(r, "test", base_by_id, base_list)
        final_test, final_note = shown_final(r, subs.get(r.id, 0))
        if final_test is not None and base is not None:
            # the paired interval of the run page (analysis.report.build_summary)
            final = finals.get(r.final_submission_id) if r.final_submission_id else None
            if final is not None:
                imp = paired_improvement(
                    Scored(final_test, final.items, final.metrics, final.provenance),
                    Scored(base.score, base.items, base.metrics, base.provenance),
                    r.task_id)[0]
        out.append(RunRow(
            run_id=r.id, task=r.task_id, agent=r.agent, driver_model=r.driver_model,
            status=r.status, profile=getattr(r, "profile", None), fleet_id=r.fleet_id,
            end_kind=str(kind) if (kind := end_kind(r)) else None, result=is_result(r),
            final_note=final_note,
            baseline=r.baseline_test, best_dev=best.get(r.id), final_test=final_test,
            improvement=imp, submissions=subs.get(r.id, 0), tool_calls=calls.get(r.id, 0),
            started_at=aware(r.started_at or r.created_at), duration_s=_duration(r)))
    return out


def get_run(store: Store, run_id: str) -> Run | None:
    with store.session() as s:
        return s.get(Run, run_id)


def reproducibility(store: Store, run: Run) -> tuple[str, list[str]]:
    """The run's evaluation config in one line, and each regrade as one line (the run page's
    summary)."""

    with store.session() as s:
        config = evaluation_config(s, run)
        regrades = list(s.exec(select(Regrade).where(Regrade.run_id == run.id)
                               .order_by(col(Regrade.id))).all())
    notes = [("regraded: " if r.current else "second reading: ") + regrade_text(RegradeNote(
        id=r.id or 0, at=r.created_at.isoformat(), reason=r.reason, profile=r.profile,
        current=r.current, grader_version=r.grader_version, old_final=r.old_final,
        new_final=r.new_final, old_baseline=r.old_baseline, new_baseline=r.new_baseline,
        changed_items=len(r.changed), error=r.error)) for r in regrades]
    return config_line(config.model_dump(mode="json") if config else None), notes


def blob(store: Store, sha: str | None) -> bytes | None:
    if not sha:
        return None
    with store.session() as s:
        b = s.get(Blob, sha)
    if b is None:
        return None
    return zlib.decompress(b.data) if b.encoding == "zlib" else b.data


def calls(store: Store, run_id: str, after_id: int = 0, limit: int | None = None,
          offset: int = 0) -> list[ToolCall]:
    with store.session() as s:
        q = select(ToolCall).where(ToolCall.run_id == run_id, col(ToolCall.id) > after_id) \
            .order_by(col(ToolCall.id)).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        return list(s.exec(q).all())


def count_calls(store: Store, run_id: str) -> int:
    with store.session() as s:
        return s.exec(select(func.count()).select_from(ToolCall)
                      .where(ToolCall.run_id == run_id)).one()


def call(store: Store, run_id: str, call_id: int) -> ToolCall | None:
    with store.session() as s:
        c = s.get(ToolCall, call_id)
    return c if c is not None and c.run_id == run_id else None


class JobView(BaseModel):
    id: str
    command: str
    state: str
    exit_code: int | None
    start_s: float | None
    end_s: float | None
    log_bytes: int
    head: str
    tail: str  # empty when the head is the whole log
    cause: str | None = None  # why it ended (job.end_cause), with its evidence
    cause_evidence: str | None = None
    cut: int  # lines between head and tail


def split_log(text: str) -> tuple[str, str, int]:
    lines = text.splitlines()
    if len(lines) <= LOG_HEAD + LOG_TAIL:
        return text, "", 0
    return ("\n".join(lines[:LOG_HEAD]), "\n".join(lines[-LOG_TAIL:]),
            len(lines) - LOG_HEAD - LOG_TAIL)


def jobs(store: Store, run: Run, limit: int, offset: int = 0) -> list[JobView]:
    origin = aware(run.started_at or run.created_at)
    assert origin is not None
    with store.session() as s:
        rows = list(s.exec(select(Job).where(Job.run_id == run.id)
                           .order_by(col(Job.started_at)).offset(offset).limit(limit)).all())
    logs = blobs(store, {j.log_blob_sha for j in rows if j.log_blob_sha})
    out = []
    for j in rows:
        log = logs.get(j.log_blob_sha or "", b"").decode("utf-8", errors="replace")
        head, tail, cut = split_log(log)
        out.append(JobView(
            id=j.id, command=j.command, state=j.state, exit_code=j.exit_code,
            start_s=(aware(j.started_at) - origin).total_seconds(),  # type: ignore[operator]
            end_s=(aware(j.ended_at) - origin).total_seconds() if j.ended_at else None,  # type: ignore[operator]
            log_bytes=j.log_bytes, head=head, tail=tail, cut=cut, cause=j.end_cause,
            cause_evidence=j.end_evidence))
    return out


def blobs(store: Store, shas: set[str]) -> dict[str, bytes]:
    """Many blobs in a few queries."""
    wanted, data = sorted(shas), {}
    with store.session() as s:
        for i in range(0, len(wanted), 500):
            for b in s.exec(select(Blob).where(col(Blob.sha256).in_(wanted[i:i + 500]))).all():
                data[b.sha256] = zlib.decompress(b.data) if b.encoding == "zlib" else b.data
    return data


def job(store: Store, run_id: str, job_id: str) -> Job | None:
    with store.session() as s:
        j = s.get(Job, job_id)
    return j if j is not None and j.run_id == run_id else None


def count_jobs(store: Store, run_id: str) -> int:
    with store.session() as s:
        return s.exec(select(func.count()).select_from(Job).where(Job.run_id == run_id)).one()


class RevisionView(BaseModel):
    id: int
    path: str
    source: str
    tool_call_id: int | None
    tool_call_seq: int | None = None  # that call's number within the run, as shown
    job_id: str | None
    at_s: float
    change: str  # added|changed|deleted


def revisions(store: Store, run: Run, limit: int, offset: int = 0) -> list[RevisionView]:
    origin = aware(run.started_at or run.created_at)
    assert origin is not None
    with store.session() as s:
        rows = list(s.exec(select(Revision, ToolCall.seq)
                           .join(ToolCall, col(ToolCall.id) == Revision.tool_call_id,
                                 isouter=True)
                           .where(Revision.run_id == run.id)
                           .order_by(col(Revision.id)).offset(offset).limit(limit)).all())
    return [RevisionView(id=r.id or 0, path=r.path, source=r.source, tool_call_id=r.tool_call_id,
                         tool_call_seq=seq or r.tool_call_id, job_id=r.job_id,
                         at_s=(aware(r.created_at) - origin).total_seconds(),  # type: ignore[operator]
                         change="deleted" if r.blob_sha is None else
                         "added" if r.prev_blob_sha is None else "changed") for r, seq in rows]


def count_revisions(store: Store, run_id: str) -> int:
    with store.session() as s:
        return s.exec(select(func.count()).select_from(Revision)
                      .where(Revision.run_id == run_id)).one()


def call_seq(store: Store, call_id: int | None) -> int | None:
    """The number within its run of the call with store id `call_id`, as shown."""
    if call_id is None:
        return None
    with store.session() as s:
        c = s.get(ToolCall, call_id)
    return (c.seq if c is not None else None) or call_id


def revision_diff(store: Store, run_id: str, rev_id: int) -> tuple[Revision, str] | None:
    with store.session() as s:
        r = s.get(Revision, rev_id)
    if r is None or r.run_id != run_id:
        return None
    if not r.content_stored:
        return r, (f"(content not stored: the run's revision bytes were used up; the file was "
                   f"{r.size} bytes, sha256 {r.blob_sha})")
    before, after = blob(store, r.prev_blob_sha), blob(store, r.blob_sha)
    if b"\0" in (before or b"")[:8192] + (after or b"")[:8192]:
        return r, "(binary file)"
    lines = list(difflib.unified_diff(
        (before or b"").decode("utf-8", "replace").splitlines(),
        (after or b"").decode("utf-8", "replace").splitlines(),
        fromfile=f"a/{r.path}", tofile=f"b/{r.path}", lineterm=""))
    text = "\n".join(lines[:MAX_DIFF_LINES])
    if len(lines) > MAX_DIFF_LINES:
        text += f"\n... {len(lines) - MAX_DIFF_LINES} more lines"
    return r, text or "(no change)"


class ItemDelta(BaseModel):
    """Per-item results of one evaluation against the baseline's on the same split."""

    compared: int
    gained: list[str]  # right now, wrong in the baseline
    lost: list[str]  # wrong now, right in the baseline


class EvalView(BaseModel):
    id: int
    kind: str
    split: str
    status: str
    score: float | None
    ci_low: float | None
    ci_high: float | None
    n_items: int
    error: str | None
    delta: ItemDelta | None


class SubmissionView(BaseModel):
    id: str
    path: str
    note: str | None
    status: str
    error: str | None
    near_copy: bool
    l2_distance: float | None
    tool_call_id: int | None
    at_s: float
    evaluations: list[EvalView]


def correct_by_id(items: list[dict[str, Any]]) -> dict[str, bool]:
    return {str(i.get("id")): bool(i.get("correct")) for i in items if isinstance(i, dict)}


def item_delta(items: list[dict[str, Any]], b: dict[str, bool]) -> ItemDelta | None:
    """`items` against the baseline's correctness by item id (`correct_by_id`)."""
    if not b or not items:
        return None
    gained, lost, n = [], [], 0
    for it in items:
        key = str(it.get("id"))
        if key not in b:
            continue
        n += 1
        now = bool(it.get("correct"))
        if now and not b[key]:
            gained.append(key)
        elif b[key] and not now:
            lost.append(key)
    return ItemDelta(compared=n, gained=gained, lost=lost)


def baseline_items(store: Store, run: Run) -> dict[str, list[dict[str, Any]]]:
    """The per-item results of the run's baseline evaluations, by split."""
    out: dict[str, list[dict[str, Any]]] = {}
    with store.session() as s:
        for split, score in (("dev", run.baseline_dev), ("test", run.baseline_test)):
            if score is None:
                continue
            ev = s.exec(select(Evaluation).where(
                Evaluation.kind == "baseline", Evaluation.split == split,
                Evaluation.score == score).order_by(col(Evaluation.id))).first()
            if ev is not None:
                out[split] = list(ev.items or [])
    return out


def submissions(store: Store, run: Run) -> list[SubmissionView]:
    origin = aware(run.started_at or run.created_at)
    assert origin is not None
    base = {split: correct_by_id(items) for split, items in baseline_items(store, run).items()}
    with store.session() as s:
        subs = list(s.exec(select(Submission).where(Submission.run_id == run.id)
                           .order_by(col(Submission.created_at))).all())
        evs = list(s.exec(select(Evaluation).where(Evaluation.run_id == run.id)
                          .order_by(col(Evaluation.id))).all())
    by_sub: dict[str, list[EvalView]] = {}
    for e in evs:
        if e.submission_id is None:
            continue
        by_sub.setdefault(e.submission_id, []).append(EvalView(
            id=e.id or 0, kind=e.kind, split=e.split, status=e.status, score=e.score,
            ci_low=e.ci_low, ci_high=e.ci_high, n_items=e.n_items, error=e.error,
            delta=item_delta(list(e.items or []), base.get(e.split, {}))))
    return [SubmissionView(
        id=x.id, path=x.path, note=x.note, status=x.status, error=x.error, near_copy=x.near_copy,
        l2_distance=x.l2_distance, tool_call_id=x.tool_call_id,
        at_s=(aware(x.created_at) - origin).total_seconds(),  # type: ignore[operator]
        evaluations=by_sub.get(x.id, [])) for x in subs]


def final_items(store: Store, run: Run) -> dict[str, bool]:
    """The per-item correctness of a run's final test evaluation (empty when none)."""
    if not run.final_submission_id:
        return {}
    with store.session() as s:
        ev = current_final_evaluation(s, run)
    return {str(i.get("id")): bool(i.get("correct")) for i in (ev.items if ev else [])
            if isinstance(i, dict)}


class Activity(BaseModel):
    """What a live page polls for: the run's state and the counts that change."""

    status: str
    tool_calls: int
    last_call_id: int
    jobs: int
    jobs_running: int
    submissions: int
    graded: int
    budget_events: int
    final_test: float | None


def activity(store: Store, run_id: str) -> Activity | None:
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            return None
        n_calls, last = s.exec(select(func.count(), func.max(ToolCall.id))
                               .where(ToolCall.run_id == run_id)).one()
        n_jobs = s.exec(select(func.count()).select_from(Job).where(Job.run_id == run_id)).one()
        running = s.exec(select(func.count()).select_from(Job).where(
            Job.run_id == run_id, Job.state == "running")).one()
        n_subs = s.exec(select(func.count()).select_from(Submission)
                        .where(Submission.run_id == run_id)).one()
        graded = s.exec(select(func.count()).select_from(Evaluation).where(
            Evaluation.run_id == run_id, Evaluation.kind == "submission")).one()
        events = s.exec(select(func.count()).select_from(BudgetEvent)
                        .where(BudgetEvent.run_id == run_id)).one()
    return Activity(status=run.status, tool_calls=n_calls, last_call_id=last or 0, jobs=n_jobs,
                    jobs_running=running, submissions=n_subs, graded=graded,
                    budget_events=events, final_test=run.final_score)


class LiveClock(BaseModel):
    """The live page's clock: the run row's budget clock as `budget_status` reads it
    (`a2rl.server.run.clock.read_clock`: the row's `started_at` and `deadline` are the truth;
    the deadline moves when grading pauses the clock, so the page polls it). Kept apart from
    `Activity`, whose JSON keys the report cache and must not change every second."""

    started_at: datetime | None
    deadline: datetime | None
    budget_s: float
    elapsed_s: float | None  # None: the clock has not started
    remaining_s: float


def live_clock(run: Run, now: datetime | None = None) -> LiveClock:
    now = now or datetime.now(UTC)
    started, deadline = aware(run.started_at), aware(run.deadline)
    end = aware(run.ended_at) or now
    return LiveClock(
        started_at=started, deadline=deadline, budget_s=run.budget_s,
        elapsed_s=max((end - started).total_seconds(), 0.0) if started else None,
        remaining_s=max((deadline - end).total_seconds(), 0.0) if deadline else run.budget_s)
