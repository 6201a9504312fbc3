"""Everything one report needs, read from the store in a few queries (no side effects)."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func
from sqlmodel import col, select

from a2rl.store import (
    Blob,
    BudgetEvent,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Job,
    Regrade,
    Revision,
    Run,
    SnapshotFile,
    Store,
    Submission,
    ToolCall,
    aware,
)
from a2rl.store.queries import INITIAL_SOURCE, baseline_evaluation, evaluation_config


@dataclass
class RunData:
    run: Run
    calls: list[ToolCall]
    jobs: list[Job]
    submissions: list[Submission]
    evaluations: list[Evaluation]
    snapshots: dict[int, dict[str, str]]  # snapshot id -> path -> blob sha
    budget_events: list[BudgetEvent]
    revisions: int
    baseline_test_n: int | None
    #: changes recorded by path, size and sha256 only (the run's revision bytes were used up)
    revisions_without_content: int = 0
    baseline_test_eval: Evaluation | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)
    #: `a2rl regrade`s of the run, oldest first, and the evaluations they made (by id):
    #: kept out of `evaluations`, which holds what was graded while the run lived
    regrades: list[Regrade] = field(default_factory=list)
    regraded: dict[int, Evaluation] = field(default_factory=dict)
    #: the task's own files as the run was made (path -> blob sha): where the code started
    initial_files: dict[str, str] = field(default_factory=dict)

    #: the run's evaluation config as a document (`a2rl.store.queries.evaluation_config`)
    evaluation_config: dict[str, object] | None = None

    @property
    def current_regrade(self) -> Regrade | None:
        """The latest regrade whose evaluations are the run's scores (None: never regraded,
        or only read again under another profile)."""
        return next((r for r in reversed(self.regrades) if r.current), None)

    def final_test_eval(self) -> Evaluation | None:
        """The final submission's current test evaluation: the latest current regrade's, else
        the one graded when the run ended."""
        regrade = self.current_regrade
        if regrade is not None and regrade.new_final_id in self.regraded:
            return self.regraded[regrade.new_final_id]  # type: ignore[index]
        final = self.run.final_submission_id
        return next((e for e in reversed(self.evaluations)
                     if final and e.submission_id == final and e.split == "test"
                     and e.kind == EvaluationKind.submission
                     and e.status == EvaluationStatus.done), None)

    @functools.cached_property
    def origin(self) -> datetime:  # cached: `t` runs once per call, job and submission
        return aware(self.run.started_at) or aware(self.run.created_at)  # type: ignore[return-value]

    def t(self, dt: datetime | None) -> float | None:
        """Seconds since the clock's start."""
        dt = aware(dt)
        return None if dt is None else (dt - self.origin).total_seconds()

    def text(self, sha: str | None) -> str | None:
        """A blob as text, or None when missing or binary."""
        data = self.blobs.get(sha) if sha else None
        if data is None or b"\0" in data[:8192]:
            return None
        return data.decode("utf-8", errors="replace")


def _blobs(store: Store, shas: set[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    wanted = sorted(shas)
    with store.session() as s:
        for i in range(0, len(wanted), 500):
            for b in s.exec(select(Blob).where(col(Blob.sha256).in_(wanted[i:i + 500]))).all():
                out[b.sha256] = zlib.decompress(b.data) if b.encoding == "zlib" else b.data
    return out


def load_run(store: Store, run_id: str) -> RunData:
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise KeyError(f"run {run_id!r} does not exist")
        # Plain rows with ToolCall's columns, not ORM objects: a run can have 10,000 calls
        # and building mapped instances was most of a report's time.
        # Arguments and results are left out (reports do not show them; JSON decoding them
        # was a third of the rest).
        calls = list(s.execute(select(*(c for c in ToolCall.__table__.columns  # type: ignore[attr-defined]
                                        if c.name not in ("arguments", "result_summary")))
                               .where(ToolCall.run_id == run_id)
                               .order_by(col(ToolCall.id))).all())
        jobs = list(s.exec(select(Job).where(Job.run_id == run_id)
                           .order_by(col(Job.started_at))).all())
        subs = list(s.exec(select(Submission).where(Submission.run_id == run_id)
                           .order_by(col(Submission.created_at))).all())
        every = list(s.exec(select(Evaluation).where(Evaluation.run_id == run_id)
                            .order_by(col(Evaluation.started_at))).all())
        evals = [e for e in every if e.regrade_id is None]
        regraded = {e.id: e for e in every if e.regrade_id is not None and e.id is not None}
        regrades = list(s.exec(select(Regrade).where(Regrade.run_id == run_id)
                               .order_by(col(Regrade.id))).all())
        snap_ids = [x.snapshot_id for x in subs if x.snapshot_id is not None]
        snapshots: dict[int, dict[str, str]] = {i: {} for i in snap_ids}
        if snap_ids:
            for f in s.exec(select(SnapshotFile).where(
                    col(SnapshotFile.snapshot_id).in_(snap_ids))).all():
                snapshots[f.snapshot_id][f.path] = f.blob_sha
        events = list(s.exec(select(BudgetEvent).where(BudgetEvent.run_id == run_id)
                             .order_by(col(BudgetEvent.at))).all())
        # The agent's revisions: not the task's files recorded at creation, and none in a
        # run without tool calls (older runs recorded the task's files at their closing scan).
        revisions = s.exec(select(func.count()).select_from(Revision).where(
            Revision.run_id == run_id, Revision.source != INITIAL_SOURCE)).one() if calls else 0
        without_content = s.exec(select(func.count()).select_from(Revision).where(
            Revision.run_id == run_id, col(Revision.content_stored).is_(False))).one()
        initial = {r.path: r.blob_sha for r in s.exec(select(Revision).where(
            Revision.run_id == run_id, Revision.source == INITIAL_SOURCE)).all() if r.blob_sha}
        base = baseline_evaluation(s, run, "test")
        frozen = evaluation_config(s, run)
    shas = {sha for files in snapshots.values() for sha in files.values()}
    shas |= {j.log_blob_sha for j in jobs if j.log_blob_sha} | set(initial.values())
    return RunData(run=run, calls=calls, jobs=jobs, submissions=subs, evaluations=evals,
                   snapshots=snapshots, budget_events=events, revisions=revisions,
                   revisions_without_content=without_content,
                   baseline_test_n=base.n_items if base else None, baseline_test_eval=base,
                   blobs=_blobs(store, shas), initial_files=initial, regrades=regrades,
                   regraded=regraded,
                   evaluation_config=frozen.model_dump(mode="json") if frozen else None)


def job_logs(store: Store, run_id: str) -> list[tuple[str, str]]:
    """(job id, log text) of every job with a stored log, in start order: what the training
    curves are read from (the viewer's and the HTML report's)."""
    with store.session() as s:
        rows = list(s.exec(select(Job.id, Job.log_blob_sha).where(
            Job.run_id == run_id, col(Job.log_blob_sha).is_not(None))
            .order_by(col(Job.started_at))).all())
    data = _blobs(store, {sha for _, sha in rows if sha})
    return [(jid, data[sha].decode("utf-8", errors="replace")) for jid, sha in rows
            if sha in data]
