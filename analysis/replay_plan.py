"""What `a2rl replay` re-runs of a finished run: the recipe behind its final submission.

From the record alone: the final submission's files, the job that wrote each of them (its
lineage, `a2rl.store.lineage`: matched by content), and, back from those jobs, every earlier job
that wrote a file they read (the kernel's record of each job's file accesses, `JobFile`), until
only the task's own inputs and the jobs' code remain. Each job is replayed with the code
snapshot it ran with (`Job.snapshot_id`). Pure reads: the plan is built before anything is made,
and whatever makes the recipe impossible to re-run is one `CannotReplay` line (a run still live,
no final submission, a checkpoint file no job wrote, a job whose code was not kept, file
accesses not recorded).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import col, select

from a2rl.clients.replay import ReplayPlan, ReplayStage
from a2rl.layout import LOGS, TASK_FILE
from a2rl.store import (
    Blob,
    Job,
    JobFile,
    Revision,
    Run,
    SnapshotFile,
    Store,
    aware,
)
from a2rl.store.lineage_query import stored_lineage
from a2rl.store.queries import INITIAL_SOURCE, NotFinished, finished_final

#: Files a job reads that no replay needs from an earlier job: caches the interpreter or a
#: library rebuilds, and the job logs' links.
REBUILT = re.compile(r"(^|/)__pycache__/|\.pyc$|^" + re.escape(LOGS) + "/")
#: How code fixes its own seed, and how it reads the run's.
FIXED_SEED = re.compile(r"--seed[ =]+\d+|(manual_seed|set_seed|random\.seed|np\.random\.seed)"
                        r"\(\s*\d+\s*\)|\bseed\s*=\s*\d+")
RUN_SEED = "A2RL_SEED"


class CannotReplay(RuntimeError):
    """The run's recipe cannot be re-run (one line: why); nothing was made."""


@dataclass(frozen=True)
class _Access:
    job_id: str
    started: datetime


def _inputs(run: Run) -> tuple[str, ...]:
    """The task's own files: never an earlier job's output."""
    return (*(p.rstrip("/") + "/" for p in (run.readonly_paths or [])), TASK_FILE)


def _last_writer(writers: dict[str, list[_Access]], path: str, before: datetime,
                 but: str | None = None) -> str | None:
    """The job that started last before `before` among those that wrote `path`."""
    found = [w for w in writers.get(path, []) if w.started < before and w.job_id != but]
    return max(found, key=lambda w: w.started).job_id if found else None


def seed_note(stages: list[ReplayStage]) -> str:
    """How the recipe seeds itself: reads the run's seed, or fixes its own (pure)."""
    texts = [s.command for s in stages] + [
        data.decode("utf-8", "replace") for s in stages for data in s.files.values()]
    if any(RUN_SEED in t for t in texts):
        return f"the recipe reads ${RUN_SEED}: each replica runs with a seed of its own"
    fixed = sorted({m.group(0) for t in texts for m in FIXED_SEED.finditer(t)})
    if fixed:
        return (f"the recipe fixes its own seed ({', '.join(fixed[:3])}) and never reads "
                f"${RUN_SEED}: replicas differ only where training is not deterministic")
    return f"the recipe neither reads ${RUN_SEED} nor fixes a seed"


def plan_replay(store: Store, run_id: str) -> ReplayPlan:
    """The recipe behind run `run_id`'s final submission, or `CannotReplay`."""
    with store.session() as s:
        try:
            run, sub = finished_final(s, run_id, "replay it", "there is no recipe to replay")
        except NotFinished as exc:
            raise CannotReplay(str(exc)) from None
        accesses = list(s.exec(select(JobFile).where(JobFile.run_id == run_id)).all())
        jobs = {j.id: j for j in s.exec(select(Job).where(Job.run_id == run_id)).all()}
        initial = {r.path: r.blob_sha for r in s.exec(select(Revision).where(
            Revision.run_id == run_id, Revision.source == INITIAL_SOURCE)).all()}
    lineage = stored_lineage(sub)
    if not accesses or lineage is None:
        why = next((j.files_recorded for j in jobs.values()
                    if j.files_recorded and j.files_recorded != "complete"),
                   "no job's file accesses were recorded")
        raise CannotReplay(f"run {run_id}: {why}; so the jobs behind its checkpoint are not "
                           "known")
    started = {j.id: aware(j.started_at) for j in jobs.values()}
    writers: dict[str, list[_Access]] = {}
    reads: dict[str, set[str]] = {}
    for a in accesses:
        if a.job_id is None or a.job_id not in started:
            continue
        if a.written:
            writers.setdefault(a.path, []).append(_Access(a.job_id, started[a.job_id]))
        if a.read:
            reads.setdefault(a.job_id, set()).add(a.path)
    wanted: list[str] = []
    for f in lineage.files:  # each submitted file's writer, by its content
        if f.job_id is None or f.job_id not in jobs:
            made = "edit_file wrote it" if f.how == "edited" else "its write was not recorded"
            raise CannotReplay(f"run {run_id}: no job wrote {lineage.checkpoint}/{f.path} of "
                               f"the final checkpoint ({made}): the recipe cannot be re-run "
                               "without the agent")
        wanted.append(f.job_id)
    inputs = _inputs(run)
    needed: set[str] = set()
    while wanted:
        job_id = wanted.pop()
        if job_id in needed:
            continue
        needed.add(job_id)
        recorded = jobs[job_id].files_recorded
        if recorded is not None and recorded != "complete":
            raise CannotReplay(f"run {run_id}: the file accesses of job {job_id} were not "
                               f"recorded whole ({recorded}): what it depended on is not known")
        for path in reads.get(job_id, set()):
            if path.startswith(inputs) or REBUILT.search(path):
                continue
            writer = _last_writer(writers, path, started[job_id], but=job_id)  # type: ignore[arg-type]
            if writer is not None:
                wanted.append(writer)
    return ReplayPlan(source_run_id=run_id, submit_path=sub.path,
                      stages=_stages(store, run_id, [jobs[j] for j in needed], initial))


def _stages(store: Store, run_id: str, jobs: list[Job],
            initial: dict[str, str | None]) -> list[ReplayStage]:
    """The jobs in the order they started, each with its code (the task's own files, as the
    run was made with them, left out: a fresh run has them)."""
    jobs.sort(key=lambda j: aware(j.started_at))  # type: ignore[arg-type,return-value]
    lost = [j.id for j in jobs if j.snapshot_id is None]
    if lost:
        raise CannotReplay(f"run {run_id}: the code job {lost[0]} ran with was not kept (a "
                           "run recorded before jobs kept their code): it cannot be re-run")
    with store.session() as s:
        files = list(s.exec(select(SnapshotFile).where(col(SnapshotFile.snapshot_id).in_(
            [j.snapshot_id for j in jobs]))).all())
        shas = {f.blob_sha for f in files if initial.get(f.path) != f.blob_sha}
        blobs = {b.sha256: b for b in s.exec(select(Blob).where(
            col(Blob.sha256).in_(sorted(shas)))).all()}
    by_snapshot: dict[int, dict[str, bytes]] = {}
    for f in files:
        if initial.get(f.path) == f.blob_sha:
            continue
        blob = blobs.get(f.blob_sha)
        if blob is None:
            raise CannotReplay(f"run {run_id}: the content of {f.path} (a job's code) was not "
                               "stored (the run's revision bytes were used up)")
        by_snapshot.setdefault(f.snapshot_id, {})[f.path] = _content(blob)
    return [ReplayStage(job_id=j.id, command=j.command,
                        files=by_snapshot.get(j.snapshot_id, {}))  # type: ignore[arg-type]
            for j in jobs]


def _content(blob: Any) -> bytes:
    return zlib.decompress(blob.data) if blob.encoding == "zlib" else blob.data
