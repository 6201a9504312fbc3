"""The run on one time axis: tool calls, jobs, submissions, grading, idle gaps; and the
process metrics computed from it."""

from __future__ import annotations

from collections import Counter

from a2rl.store import aware

from .data import RunData
from .schema import (
    JobEvent,
    ProcessMetrics,
    Span,
    SubmissionEvent,
    Timeline,
    ToolCallEvent,
    Trajectory,
)


def merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of intervals, sorted."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def covered(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in merge(spans))


def end_s(d: RunData) -> float:
    """The run's end on the axis: its end, else its last activity."""
    if d.run.ended_at is not None:
        return d.t(d.run.ended_at) or 0.0
    times = [d.t(c.started_at) or 0.0 for c in d.calls[-1:]]
    times += [d.t(j.ended_at or j.started_at) or 0.0 for j in d.jobs]
    return max(times, default=0.0)


def job_spans(d: RunData, end: float) -> list[tuple[float, float]]:
    return [(d.t(j.started_at) or 0.0, d.t(j.ended_at) if j.ended_at else end) for j in d.jobs]


def build_timeline(d: RunData, idle_threshold_s: float = 120.0) -> Timeline:
    end = end_s(d)
    # model_construct: 10,000 rows from our own store need no validation (it was a fifth of
    # a large run's report time).
    calls = [ToolCallEvent.model_construct(id=c.id or 0, tool=c.tool,
                                           start_s=d.t(c.started_at) or 0.0,
                                           duration_s=c.duration_ms / 1000.0,
                                           is_error=bool(c.is_error))
             for c in d.calls]
    jobs = [JobEvent(id=j.id, command=j.command[:200], state=j.state, exit_code=j.exit_code,
                     start_s=d.t(j.started_at) or 0.0, end_s=d.t(j.ended_at),
                     cause=j.end_cause, cause_evidence=j.end_evidence)
            for j in d.jobs]
    subs = [SubmissionEvent(id=s.id, path=s.path, status=s.status, at_s=d.t(s.created_at) or 0.0)
            for s in d.submissions]
    grading = merge([(d.t(e.started_at) or 0.0, d.t(e.ended_at) or end)
                     for e in d.evaluations if e.submission_id])
    busy = merge([(c.start_s, c.start_s + c.duration_s) for c in calls] + job_spans(d, end))
    gaps, cursor = [], 0.0
    for a, b in busy + [(end, end)]:
        if a - cursor >= idle_threshold_s:
            gaps.append(Span(start_s=cursor, end_s=a))
        cursor = max(cursor, b)
    return Timeline(origin=d.origin.isoformat(), end_s=end, tool_calls=calls, jobs=jobs,
                    submissions=subs, grading=[Span(start_s=a, end_s=b) for a, b in grading],
                    idle_gaps=gaps, idle_threshold_s=idle_threshold_s,
                    grading_s=sum(b - a for a, b in grading),
                    idle_s=sum(g.end_s - g.start_s for g in gaps))


def build_metrics(d: RunData, timeline: Timeline, trajectory: Trajectory) -> ProcessMetrics:
    total = len(d.submissions)
    valid = [s for s in d.submissions if s.status == "graded"]
    pts = trajectory.points
    first_imp = next((p.at_s for p in pts if trajectory.baseline is not None
                      and p.score > trajectory.baseline), None)
    best = max(pts, key=lambda p: p.score, default=None)
    best_at = next((p.at_s for p in pts if best is not None and p.score == best.score), None)
    budget = d.run.budget_s or timeline.end_s
    deadline = d.t(aware(d.run.deadline)) if d.run.deadline else None
    horizon = min(timeline.end_s, deadline) if deadline is not None else timeline.end_s
    running = covered(job_spans(d, timeline.end_s), 0.0, horizon)
    return ProcessMetrics(
        valid_submission_rate=len(valid) / total if total else None,
        time_to_first_valid_s=min((d.t(s.created_at) or 0.0 for s in valid), default=None),
        time_to_first_improvement_s=first_imp,
        time_to_best_s=best_at,
        improving_share=sum(p.improved_best for p in pts) / len(pts) if pts else None,
        job_running_share=running / budget if budget else None,
        tool_calls=len(d.calls), tool_errors=sum(c.is_error for c in d.calls),
        tool_calls_by_kind=dict(Counter(c.tool for c in d.calls).most_common()),
        jobs=len(d.jobs), revisions=d.revisions,
        revisions_without_content=d.revisions_without_content,
        job_logs_not_stored=sum(j.log_bytes > 0 and not j.log_blob_sha for j in d.jobs))
