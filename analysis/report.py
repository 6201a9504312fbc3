"""`build_report(store, run_id)`: the structured report of one run, computed from the store.

Pure: reads the store, returns a `Report`; rendering and writing files happen elsewhere.
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime

from a2rl.store import EvaluationKind, EvaluationStatus, Store, SubmissionStatus
from a2rl.store.outcome import end_kind, is_result, shown_final

from .attribution import attribution_section
from .audit_view import audit_section
from .data import RunData, load_run
from .failures import find_failures
from .improvement import Scored, paired_improvement
from .ledger_view import ledger_section
from .lineage_view import lineage_section
from .published import summary_published
from .routes import classify
from .schema import (
    CodeVersion,
    Evidence,
    FileChange,
    RegradeNote,
    Report,
    Route,
    ScorePoint,
    Summary,
    Trajectory,
)
from .timeline import build_metrics, build_timeline

MAX_DIFF_LINES = 400


def build_trajectory(d: RunData) -> Trajectory:
    split = d.run.config.feedback_split
    baseline = d.run.baseline_test if split == "test" else d.run.baseline_dev
    when = {s.id: d.t(s.created_at) or 0.0 for s in d.submissions}
    evs = sorted((e for e in d.evaluations if e.kind == EvaluationKind.submission
                  and e.split == split and e.status == EvaluationStatus.done
                  and e.score is not None and e.submission_id in when),
                 key=lambda e: when[e.submission_id])  # type: ignore[index]
    points, best = [], baseline
    for e in evs:
        assert e.score is not None and e.submission_id is not None
        improved = best is None or e.score > best
        best = e.score if improved else best
        points.append(ScorePoint(submission_id=e.submission_id, at_s=when[e.submission_id],
                                 split=split, score=e.score, ci_low=e.ci_low, ci_high=e.ci_high,
                                 improved_best=improved))
    return Trajectory(split=split, baseline=baseline, points=points)


def _diff(path: str, before: str | None, after: str | None) -> tuple[str, bool]:
    if (before is None and after is None) or "\0" in (before or "") + (after or ""):
        return "(binary)", False
    lines = list(difflib.unified_diff((before or "").splitlines(keepends=True),
                                      (after or "").splitlines(keepends=True),
                                      fromfile=f"a/{path}", tofile=f"b/{path}"))
    truncated = len(lines) > MAX_DIFF_LINES
    text = "".join(line if line.endswith("\n") else line + "\n"
                   for line in lines[:MAX_DIFF_LINES])
    return text, truncated


def build_code_history(d: RunData) -> list[CodeVersion]:
    # The first submission's changes are against the task's own files, not an empty folder.
    out, prev = [], dict(d.initial_files)
    for sub in d.submissions:
        files = d.snapshots.get(sub.snapshot_id, {}) if sub.snapshot_id is not None else {}
        changes = []
        for path in sorted(set(prev) | set(files)):
            a, b = prev.get(path), files.get(path)
            if a == b:
                continue
            change = "added" if a is None else "deleted" if b is None else "changed"
            text, cut = _diff(path, d.text(a) if a else "", d.text(b) if b else "")
            changes.append(FileChange(path=path, change=change, diff=text, truncated=cut))
        out.append(CodeVersion(submission_id=sub.id, snapshot_id=sub.snapshot_id, files=files,
                               changes=changes))
        if sub.snapshot_id is not None:
            prev = files
    return out


def build_routes(d: RunData) -> list[Route]:
    out = []
    started = [(d.t(j.started_at) or 0.0, j.id, j.command) for j in d.jobs]
    for sub in d.submissions:
        files = d.snapshots.get(sub.snapshot_id, {}) if sub.snapshot_id is not None else {}
        texts = {p: d.text(sha) for p, sha in files.items()}
        at = d.t(sub.created_at) or 0.0
        cmds = [(jid, cmd) for t, jid, cmd in started if t <= at]
        refusal = sub.error if sub.status == SubmissionStatus.refused else None
        route, also, ev = classify(sub.path, refusal,
                                   sub.near_copy, sub.l2_distance, texts, cmds, sub.id)
        out.append(Route(submission_id=sub.id, path=sub.path, route=route, also=also,
                         evidence=ev))
    return out


def build_summary(d: RunData, trajectory: Trajectory) -> Summary:
    run = d.run
    best = max(trajectory.points, key=lambda p: p.score, default=None)
    final_ev = d.final_test_eval()
    improvement, note = None, None
    # No final submission: no final score and no improvement (PostTrainBench's rule; the
    # store's final_score holds the baseline's then, `store.outcome.shown_final`).
    final_test, final_note = shown_final(run, len(d.submissions))
    if final_note is not None and run.ended_at is not None:
        note = f"no improvement: {final_note}"
    if final_test is not None and run.baseline_test is not None:
        base_ev = d.baseline_test_eval
        if base_ev is None or final_ev is None:
            note = (f"no interval: the {'baseline' if base_ev is None else 'final'} test "
                    "evaluation is not in the store")
        else:
            improvement, note = paired_improvement(
                Scored(final_test, final_ev.items, final_ev.metrics, final_ev.provenance),
                Scored(run.baseline_test, base_ev.items, base_ev.metrics, base_ev.provenance),
                run.task_id)
    end = run.ended_at or (d.calls[-1].started_at if d.calls else None)
    used = d.t(end) if run.started_at and end else None
    summary = Summary(
        run_id=run.id, task=run.task_id, agent=run.agent, agent_version=run.agent_version,
        driver_model=run.driver_model, base_model=run.base_model, protocol=run.protocol,
        profile=run.profile or "a2rl",
        status=run.status, end_reason=run.end_reason, budget_s=run.budget_s,
        agent_status=run.agent_status, agent_error=run.agent_error,
        end_kind=str(kind) if (kind := end_kind(run)) else None, result=is_result(run),
        budget_used_s=min(used, run.budget_s) if used is not None else None,
        started_at=run.started_at.isoformat() if run.started_at else None,
        ended_at=run.ended_at.isoformat() if run.ended_at else None,
        baseline_dev=run.baseline_dev, baseline_test=run.baseline_test,
        best_dev=best.score if best else None,
        best_submission_id=best.submission_id if best else None,
        final_test=final_test, final_submission_id=run.final_submission_id,
        final_note=final_note,
        improvement=improvement, improvement_note=note,
        submissions_total=len(d.submissions),
        submissions_valid=sum(s.status == SubmissionStatus.graded for s in d.submissions),
        submissions_refused=sum(s.status == SubmissionStatus.refused for s in d.submissions),
        submissions_failed=sum(s.status == SubmissionStatus.failed for s in d.submissions),
        final_provenance=dict(final_ev.provenance) if final_ev else {})
    summary.published = summary_published(summary)
    summary.evaluation_config = d.evaluation_config
    summary.regrades = [RegradeNote(
        id=r.id or 0, at=r.created_at.isoformat(), reason=r.reason, profile=r.profile,
        current=r.current, grader_version=r.grader_version, old_final=r.old_final,
        new_final=r.new_final, old_baseline=r.old_baseline, new_baseline=r.new_baseline,
        changed_items=len(r.changed), error=r.error) for r in d.regrades]
    return summary


def build_report(store: Store, run_id: str, idle_threshold_s: float = 120.0) -> Report:
    """The report of one run. Raises KeyError when the run does not exist."""
    d = load_run(store, run_id)
    trajectory = build_trajectory(d)
    timeline = build_timeline(d, idle_threshold_s)
    routes, failures = build_routes(d), find_failures(d)
    link_calls(d, [e for x in [*routes, *failures] for e in x.evidence])
    return Report(generated_at=datetime.now(UTC).isoformat(),
                  summary=build_summary(d, trajectory), timeline=timeline,
                  trajectory=trajectory, code_history=build_code_history(d),
                  routes=routes, failures=failures,
                  metrics=build_metrics(d, timeline, trajectory),
                  audit=audit_section(store, run_id), ledger=ledger_section(store, run_id),
                  lineage=lineage_section(store, run_id),
                  attribution=attribution_section(store, run_id))


def link_calls(d: RunData, evidence: list[Evidence]) -> None:
    """Each piece of evidence about a job or a submission gets the tool call it came from
    (the run_command that started the job, the submit_checkpoint), for the viewer's link."""
    by_job = {j.id: j.tool_call_id for j in d.jobs}
    by_sub = {x.id: x.tool_call_id for x in d.submissions}
    seq = {c.id: c.seq for c in d.calls}
    for e in evidence:
        if e.job_id:
            e.call_id = by_job.get(e.job_id)
        elif e.submission_id:
            e.call_id = by_sub.get(e.submission_id)
        if e.call_id is not None:
            e.call_seq = seq.get(e.call_id) or e.call_id
