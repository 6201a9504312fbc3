"""Read-only queries the CLI and analysis share. Pure reads: no side effects."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlmodel import col, select

from a2rl.sections import GradingSettings

from .db import Store
from .models import Evaluation, Job, Revision, Run, Submission, ToolCall
from .outcome import end_kind, is_result, shown_final
from .run_config import EvaluationConfig
from .status import EvaluationKind, EvaluationStatus, RunStatus

#: Revisions recorded when a run is made (the task's own files): not the agent's changes.
INITIAL_SOURCE = "initial"


def _counts(s: Any, model: Any, run_ids: list[str], *where: Any) -> dict[str, int]:
    q = select(model.run_id, func.count()).where(col(model.run_id).in_(run_ids), *where)
    return dict(s.exec(q.group_by(model.run_id)).all())


def _summaries(s: Any, runs: list[Run]) -> list[dict[str, Any]]:
    """One run's settings, outcome and counts: the rows of `a2rl runs` and the head of
    `a2rl show` (the same keys in both)."""
    ids = [r.id for r in runs]
    counts = {
        "tool_calls": _counts(s, ToolCall, ids),
        "tool_errors": _counts(s, ToolCall, ids, col(ToolCall.is_error)),
        "revisions": _counts(s, Revision, ids, col(Revision.source) != INITIAL_SOURCE),
        "jobs": _counts(s, Job, ids),
        "submissions": _counts(s, Submission, ids),
    }
    out = []
    for run in runs:
        # run_id: the key every `--json` output names a run by; `id` kept one release (a2rl.cli)
        doc = {"run_id": run.id, **run.model_dump(mode="json", exclude={"token_hash"})}
        doc.update({name: by_run.get(run.id, 0) for name, by_run in counts.items()})
        if not doc["tool_calls"]:  # runs made before "initial" existed: the closing scan
            doc["revisions"] = 0   # recorded the task's files; no agent, no revision
        # how it ended (derived for rows closed before end_kind existed), whether it counts
        # as a result, and no final score without a final submission (`store.outcome`)
        kind = end_kind(run)
        doc["end_kind"] = str(kind) if kind else None
        doc["result"] = is_result(run)
        doc["final_score"], doc["final_note"] = shown_final(run, doc["submissions"])
        out.append(doc)
    return out


def list_runs(store: Store, task: str | None = None, agent: str | None = None,
              status: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Runs matching the filters, newest first, each as `run_summary` gives it."""
    q = select(Run).order_by(col(Run.created_at).desc())
    if task:
        q = q.where(Run.task_id == task)
    if agent:
        q = q.where(Run.agent == agent)
    if status:
        q = q.where(Run.status == status)
    if limit:
        q = q.limit(limit)
    with store.session() as s:
        return _summaries(s, list(s.exec(q).all()))


def count_runs(store: Store) -> int:
    with store.session() as s:
        return s.exec(select(func.count()).select_from(Run)).one()


def run_summary(store: Store, run_id: str) -> dict[str, Any] | None:
    with store.session() as s:
        run = s.get(Run, run_id)
        return None if run is None else _summaries(s, [run])[0]


def run_details(store: Store, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """A run's jobs and its submissions with their scores (what `a2rl show` lists)."""
    with store.session() as s:
        jobs = s.exec(select(Job).where(Job.run_id == run_id)
                      .order_by(col(Job.started_at))).all()
        subs = s.exec(select(Submission).where(Submission.run_id == run_id)
                      .order_by(col(Submission.created_at))).all()
        evals = s.exec(select(Evaluation.submission_id, Evaluation.kind, Evaluation.split,
                              Evaluation.status, Evaluation.score)
                       .where(Evaluation.run_id == run_id,
                              col(Evaluation.submission_id).is_not(None),
                              Evaluation.kind != EvaluationKind.reading,
                              col(Evaluation.superseded_by).is_(None))
                       .order_by(col(Evaluation.id))).all()
    scores: dict[str, dict[str, float | None]] = {}
    for sub_id, _kind, split, state, score in evals:
        scores.setdefault(sub_id, {})[split] = score if state == EvaluationStatus.done else None
    return {
        "job_list": [{"id": j.id, "state": j.state, "exit_code": j.exit_code,
                      "command": j.command, "started_at": j.started_at.isoformat(),
                      "ended_at": j.ended_at.isoformat() if j.ended_at else None,
                      "cpu_s": j.cpu_s, "memory_peak_bytes": j.memory_peak_bytes,
                      "snapshot_id": j.snapshot_id, "files_recorded": j.files_recorded}
                     for j in jobs],
        "submission_list": [{"id": x.id, "path": x.path, "status": x.status, "error": x.error,
                             "created_at": x.created_at.isoformat(),
                             "scores": scores.get(x.id, {})} for x in subs],
    }


def baseline_ids(run: Run) -> dict[str, int]:
    """split -> id of the baseline evaluation the run was made with ({} for older runs)."""
    ids = run.config.setup.baseline_evaluations
    return {str(k): int(v) for k, v in ids.items() if v is not None}


def _provenance_matches(run: Run, ev: Evaluation) -> bool:
    """Whether a baseline evaluation could be this run's by what it records: the same task,
    profile and (when it names one) base model. Evaluations recorded before provenance had
    a field match on it."""
    prov = ev.provenance or {}
    if prov.get("task_id", run.task_id) != run.task_id:
        return False
    if prov.get("profile", "a2rl") != (run.profile or "a2rl"):
        return False
    named = (prov.get("task_options") or {}).get("base_model")
    return not (named and run.base_model and named != run.base_model)


def match_baseline(run: Run, split: str, by_id: dict[int, Evaluation],
                   candidates: list[Evaluation]) -> Evaluation | None:
    """The run's baseline evaluation of `split` among loaded rows (pure).

    A run records the ids of the baseline evaluations it was made with (`RunSetup`'s);
    runs made before that recorded only the scores, so for them it is the oldest baseline
    evaluation of that split with that score whose provenance fits the run (task, profile,
    base model): two tasks whose base models score the same must not share one.
    `candidates` are baseline evaluations of `split`, oldest first.
    """
    recorded = baseline_ids(run).get(split)
    if recorded is not None:
        ev = by_id.get(recorded)
        return ev if ev is not None and ev.split == split else None
    score = run.baseline_test if split == "test" else run.baseline_dev
    if score is None:
        return None
    return next((e for e in candidates if e.split == split and e.score == score
                 and _provenance_matches(run, e)), None)


def baseline_evaluation(s: Any, run: Run, split: str) -> Evaluation | None:
    """The baseline evaluation a run's `baseline_<split>` came from (`match_baseline`).
    Reports take the test split's sample size and per-item results from it, and exports
    carry it along."""
    recorded = baseline_ids(run).get(split)
    if recorded is not None:
        ev = s.get(Evaluation, recorded)
        return match_baseline(run, split, {recorded: ev} if ev is not None else {}, [])
    score = run.baseline_test if split == "test" else run.baseline_dev
    if score is None:
        return None
    candidates = list(s.exec(select(Evaluation).where(
        Evaluation.kind == EvaluationKind.baseline, Evaluation.split == split,
        Evaluation.score == score).order_by(Evaluation.id)).all())  # type: ignore[arg-type]
    return match_baseline(run, split, {}, candidates)


def current_final_evaluation(s: Any, run: Run) -> Evaluation | None:
    """The run's final submission's current test evaluation: the one no regrade replaced
    (`Evaluation.superseded_by`), never a second reading under another profile."""
    if not run.final_submission_id:
        return None
    return s.exec(select(Evaluation).where(
        Evaluation.submission_id == run.final_submission_id, Evaluation.split == "test",
        Evaluation.kind == EvaluationKind.submission, Evaluation.status == EvaluationStatus.done,
        col(Evaluation.superseded_by).is_(None)).order_by(col(Evaluation.id).desc())).first()


def best_submission(store: Store, run_id: str, split: str) -> tuple[Submission, Any] | None:
    """The best graded submission of a run on `split`; ties go to the earliest."""
    with store.session() as s:
        rows = s.exec(select(Submission, Evaluation).join(
            Evaluation, Evaluation.submission_id == Submission.id).where(  # type: ignore[arg-type]
            Submission.run_id == run_id, Evaluation.split == split,
            Evaluation.kind == EvaluationKind.submission,
            Evaluation.status == EvaluationStatus.done, col(Evaluation.superseded_by).is_(None))
            .order_by(Submission.created_at)).all()  # type: ignore[arg-type]
    best = None
    for sub, ev in rows:
        if ev.score is not None and (best is None or ev.score > best[1].score):
            best = (sub, ev)
    return best


#: engine names as provenance records them -> the kind that loads them
_KIND_OF_NAME = {"transformers": "transformers", "transformers-static": "static",
                 "vllm": "vllm"}


def from_provenance(prov: dict[str, Any], run: Run) -> EvaluationConfig | None:
    """The config an evaluation recorded in its provenance (a run made before runs froze
    theirs); None when it recorded too little to say (no grader version or engine)."""
    if not prov.get("grader_version") or not prov.get("engine"):
        return None
    name = str(prov["engine"])
    kind = _KIND_OF_NAME.get(name, name.split("-")[0])
    generation = dict(prov.get("generation") or {})
    return EvaluationConfig(
        task_id=str(prov.get("task_id") or run.task_id),
        task_version=str(prov.get("task_version") or ""),
        prompt_version=str(prov.get("prompt_version") or "1"),
        profile=str(prov.get("profile") or run.profile or "a2rl"),
        task_options=dict(prov.get("task_options") or run.task_options),
        grader_version=str(prov["grader_version"]), engine_name=name,
        grading=GradingSettings(engine=kind,
                                max_new_tokens=int(prov.get("max_new_tokens_cap") or 0)),
        engine_version=str(prov.get("engine_version") or ""), generation=generation,
        source="provenance")


def evaluation_config(session: Any, run: Run) -> EvaluationConfig | None:
    """The run's evaluation config: frozen with it, or (a run made before runs froze it) read
    from its first evaluation's provenance: the baseline it was made with, else its earliest
    completed evaluation. None when it has none to read."""
    if run.config.evaluation is not None:
        return run.config.evaluation
    first: Evaluation | None = None
    for split in ("dev", "test"):
        ev_id = run.config.setup.baseline_evaluations.get(split)
        if ev_id is not None and (first := session.get(Evaluation, ev_id)) is not None:
            break
    if first is None:
        first = session.exec(select(Evaluation).where(
            Evaluation.run_id == run.id, Evaluation.status == EvaluationStatus.done)
            .order_by(col(Evaluation.id))).first()
    return from_provenance(first.provenance or {}, run) if first is not None else None


class NotFinished(LookupError):
    """A command that needs a finished run with a final submission was given another (one
    line: why)."""


def finished_final(session: Any, run_id: str, verb: str, nothing: str) -> tuple[Run, Submission]:
    """The finished run `run_id` and its final submission, for `a2rl regrade` and `a2rl
    replay` (`verb`: "regrade it"; `nothing`: what a run without a final submission lacks);
    `NotFinished` saying why not."""
    run = session.get(Run, run_id)
    if run is None:
        raise NotFinished(f"run {run_id!r} does not exist (see a2rl runs)")
    if run.ended_at is None or run.status != RunStatus.finished:
        raise NotFinished(f"run {run_id} is still {run.status}: {verb} once it has ended "
                          f"(a2rl finish {run_id})")
    sub = session.get(Submission, run.final_submission_id) if run.final_submission_id else None
    if sub is None:
        raise NotFinished(f"run {run_id} has no final submission: {nothing}")
    return run, sub
