"""One run's rows and blobs in a portable form, and loading them into another store.

This is the store half of `a2rl export` / `a2rl import` (the archive file itself is
`a2rl.analysis.archive`). Rows travel as JSON objects (`model_dump(mode="json")`), blobs as
their uncompressed bytes.

Integer ids (tool calls, revisions, snapshots, evaluations, grading requests, budget events) are
assigned by each database, so loading always gives those rows fresh ids and rewrites every
column that refers to them: an explicit id could collide with the target's own rows, and on
PostgreSQL it would not advance the id sequence either. String ids (the run, its jobs and
submissions) are random and are kept: reports and the recorded tool arguments name them; a
clash with a different row in the target is refused rather than renamed.

The run's baseline evaluations are cached across runs and carry no run id; they travel too
(reports take the test sample size from them) and are reused when the target already holds the
same one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import SQLModel, col, select

from .db import Store, blob_row
from .models import (
    Audit,
    Blob,
    BudgetEvent,
    Evaluation,
    GradeRequest,
    Job,
    JobFile,
    Ledger,
    Regrade,
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Submission,
    ToolCall,
)
from .queries import baseline_evaluation, baseline_ids
from .records.toolcalls import number_older as number_tool_calls
from .status import EvaluationKind

#: Every table that holds a run's rows, in load order (referenced rows first).
RUN_TABLES: dict[str, type[SQLModel]] = {
    "run": Run, "toolcall": ToolCall, "snapshot": Snapshot, "snapshotfile": SnapshotFile,
    "revision": Revision, "job": Job, "jobfile": JobFile, "submission": Submission,
    "evaluation": Evaluation,
    "graderequest": GradeRequest, "budgetevent": BudgetEvent, "audit": Audit,
    "ledger": Ledger, "regrade": Regrade,
}


class RunExistsError(RuntimeError):
    """The target store already has a run with this id; `existing` is a detached copy of it."""

    def __init__(self, existing: Run) -> None:
        super().__init__(f"run {existing.id} already exists in this store")
        self.existing = Run.model_validate(existing.model_dump())  # outlives the rollback


class IdConflictError(RuntimeError):
    """A job or submission id of the run belongs to another run in the target store."""


@dataclass
class RunDump:
    """A run's rows (table name -> JSON objects) and the blobs they reference."""

    run_id: str
    rows: dict[str, list[dict[str, Any]]]
    blobs: dict[str, bytes]
    missing_blobs: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {name: len(self.rows.get(name, [])) for name in RUN_TABLES} | {
            "blob": len(self.blobs)}


def _referenced_blobs(run: Run, rows: dict[str, list[Any]]) -> set[str]:
    shas = {run.agent_transcript_sha, run.agent_stderr_sha}
    shas |= {r.blob_sha for r in rows["revision"]} | {r.prev_blob_sha for r in rows["revision"]}
    shas |= {f.blob_sha for f in rows["snapshotfile"]}
    shas |= {j.log_blob_sha for j in rows["job"]}
    shas |= {c.arguments_blob for c in rows["toolcall"]}  # a cut call's whole arguments
    return {s for s in shas if s}


def dump_run(store: Store, run_id: str) -> RunDump:
    """Everything the store holds about one run. Raises KeyError when there is no such run."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise KeyError(f"run {run_id!r} does not exist")

        def of_run(model: Any) -> list[Any]:
            return list(s.exec(select(model).where(model.run_id == run_id)
                               .order_by(model.id)).all())

        rows: dict[str, list[Any]] = {"run": [run]}
        for name in ("toolcall", "snapshot", "revision", "job", "jobfile", "submission",
                     "graderequest", "budgetevent", "regrade"):
            rows[name] = of_run(RUN_TABLES[name])
        snap_ids = [x.id for x in rows["snapshot"]]
        rows["snapshotfile"] = list(s.exec(select(SnapshotFile).where(
            col(SnapshotFile.snapshot_id).in_(snap_ids)).order_by(
            col(SnapshotFile.snapshot_id), col(SnapshotFile.path))).all()) if snap_ids else []
        sub_ids = [x.id for x in rows["submission"]]
        evals = s.exec(select(Evaluation).where(
            (col(Evaluation.run_id) == run_id) | col(Evaluation.submission_id).in_(sub_ids))
            .order_by(col(Evaluation.id))).all()
        baselines = [b for split in ("dev", "test")
                     if (b := baseline_evaluation(s, run, split)) is not None]
        # the baselines a regrade replaced (cached across runs, so without a run id): kept
        replaced = {r.old_baseline_id for r in rows["regrade"]} - {b.id for b in baselines}
        baselines += [b for i in sorted(x for x in replaced if x is not None)
                      if (b := s.get(Evaluation, i)) is not None]
        rows["evaluation"] = baselines + [e for e in evals if e.kind != EvaluationKind.baseline]
        rows["audit"] = [a for a in [s.get(Audit, run_id)] if a is not None]
        rows["ledger"] = [x for x in [s.get(Ledger, run_id)] if x is not None]
        wanted = sorted(_referenced_blobs(run, rows))
        blobs: dict[str, bytes] = {}
        for i in range(0, len(wanted), 500):
            for b in s.exec(select(Blob).where(col(Blob.sha256).in_(wanted[i:i + 500]))).all():
                blobs[b.sha256] = zlib.decompress(b.data) if b.encoding == "zlib" else b.data
    as_json = {name: [r.model_dump(mode="json") for r in found] for name, found in rows.items()}
    as_json["run"][0]["token_hash"] = None  # a credential of the live run, useless elsewhere
    # content a revision recorded by hash only (the run's cap) was never stored: not missing
    unstored = {r["blob_sha"] for r in as_json["revision"] if not r.get("content_stored", True)}
    return RunDump(run_id=run_id, rows=as_json, blobs=blobs,
                   missing_blobs=[sha for sha in wanted
                                  if sha not in blobs and sha not in unstored])


def _remapped(row: dict[str, Any], refs: dict[str, dict[int, int]]) -> dict[str, Any]:
    """A copy of `row` whose integer references point at the target's ids."""
    row = dict(row)
    for column, ids in refs.items():
        if row.get(column) is not None:
            row[column] = ids.get(row[column])
    return row


def _insert_all(s: Any, model: type[SQLModel], rows: list[dict[str, Any]],
                refs: dict[str, dict[int, int]] | None = None) -> dict[int, int]:
    """Insert rows with fresh ids after rewriting their references; old id -> new id."""
    pairs = []
    for row in rows:
        row = _remapped(row, refs or {})
        old = row.pop("id", None)
        obj = model.model_validate(row)
        s.add(obj)
        pairs.append((old, obj))
    s.flush()
    return {old: obj.id for old, obj in pairs if old is not None}


def _remapped_lineage(lineage: dict[str, Any], snaps: dict[int, int]) -> dict[str, Any]:
    """A submission's lineage whose stages name the target's code snapshots."""
    stages = [{**st, "snapshot_id": snaps.get(st["snapshot_id"])}
              if isinstance(st, dict) and st.get("snapshot_id") is not None else st
              for st in lineage.get("stages") or []]
    return {**lineage, "stages": stages}


def _remapped_flag(flag: dict[str, Any], calls: dict[int, int], revs: dict[int, int],
                   evals: dict[int, int]) -> dict[str, Any]:
    """An audit flag whose evidence ids are the target store's (an id the import did not
    bring is dropped: it names nothing there)."""
    ev = dict(flag.get("evidence") or {})
    for key, ids in (("tool_calls", calls), ("revisions", revs), ("evaluations", evals)):
        ev[key] = [ids[i] for i in ev.get(key, []) if i in ids]
    return {**flag, "evidence": ev}


def _same_baseline(s: Any, row: dict[str, Any]) -> int | None:
    """The id of a baseline evaluation in the target equal to this one, if any."""
    for ev in s.exec(select(Evaluation).where(
            Evaluation.kind == EvaluationKind.baseline, Evaluation.split == row["split"],
            Evaluation.score == row["score"], Evaluation.n_items == row["n_items"])).all():
        if ev.provenance == row["provenance"]:
            return ev.id
    return None


def load_run(store: Store, dump: RunDump) -> dict[str, int]:
    """Insert a dumped run in one transaction; the rows inserted per table (blobs: new ones).

    Raises RunExistsError when the run id is taken and IdConflictError when one of its job or
    submission ids belongs to another run; nothing is written then.
    """
    rows = dump.rows
    inserted: dict[str, int] = {}
    with store.session() as s:
        existing = s.get(Run, dump.run_id)
        if existing is not None:
            raise RunExistsError(existing)
        for name, model in (("job", Job), ("submission", Submission)):
            ids = [r["id"] for r in rows.get(name, [])]
            taken = s.exec(select(model.id).where(col(model.id).in_(ids))).all() if ids else []
            if taken:
                raise IdConflictError(f"{name} id {taken[0]} of run {dump.run_id} already "
                                      "belongs to another run in this store")
        new_blobs = 0
        for sha, data in dump.blobs.items():
            if s.get(Blob, sha) is None:
                s.add(blob_row(data))
                new_blobs += 1
        inserted["blob"] = new_blobs
        run = Run.model_validate(rows["run"][0])
        s.add(run)
        calls = _insert_all(s, ToolCall, rows.get("toolcall", []))
        number_tool_calls(s.connection())  # a dump from before schema v6 has no numbers
        call_ref = {"tool_call_id": calls}
        snaps = _insert_all(s, Snapshot, rows.get("snapshot", []), call_ref)
        revs = _insert_all(s, Revision, rows.get("revision", []), call_ref)
        for name, refs in (("snapshotfile", {"snapshot_id": snaps}),
                           ("job", {"snapshot_id": snaps, **call_ref}),
                           ("submission", {"snapshot_id": snaps, **call_ref})):
            for row in rows.get(name, []):
                if name == "submission" and row.get("lineage"):
                    row = {**row, "lineage": _remapped_lineage(row["lineage"], snaps)}
                s.add(RUN_TABLES[name].model_validate(_remapped(row, refs)))
        _insert_all(s, JobFile, rows.get("jobfile", []))  # a dump from before v8 has none
        evals: dict[int, int] = {}
        fresh = []
        for row in rows.get("evaluation", []):
            reuse = _same_baseline(s, row) if row.get("kind") == EvaluationKind.baseline else None
            if reuse is not None:
                evals[row["id"]] = reuse
            else:
                fresh.append(row)
        evals |= _insert_all(s, Evaluation, [
            {**row, "superseded_by": None, "regrade_id": None} for row in fresh])
        # regrades name evaluations, and their evaluations name them back: both renumbered
        regrades = _insert_all(s, Regrade, rows.get("regrade", []), {
            f"{age}_{what}_id": evals for age in ("old", "new") for what in ("final", "baseline")})
        for row in fresh:
            if row.get("superseded_by") is not None or row.get("regrade_id") is not None:
                ev = s.get(Evaluation, evals[row["id"]])
                ev.superseded_by = evals.get(row["superseded_by"])  # type: ignore[union-attr]
                ev.regrade_id = regrades.get(row["regrade_id"])  # type: ignore[union-attr]
                s.add(ev)
        recorded = baseline_ids(run)
        if recorded:  # the baseline ids the run recorded, as the target numbers them
            setup = run.config.setup.model_copy(update={"baseline_evaluations": {
                split: evals.get(ev_id) for split, ev_id in recorded.items()}})
            run.config = run.config.model_copy(update={"setup": setup})
            s.add(run)
        _insert_all(s, GradeRequest, rows.get("graderequest", []), {"evaluation_id": evals})
        _insert_all(s, BudgetEvent, rows.get("budgetevent", []))
        for row in rows.get("audit", []):  # its evidence names rows by id: renumbered too
            s.add(Audit.model_validate({**row, "flags": [_remapped_flag(f, calls, revs, evals)
                                                         for f in row.get("flags", [])]}))
        for row in rows.get("ledger", []):  # a dump from before schema v7 has none
            s.add(Ledger.model_validate(row))
        inserted |= {name: len(rows.get(name, [])) for name in RUN_TABLES}
        inserted["evaluation"] = len(fresh)
        inserted["regrade"] = len(regrades)
    return inserted
