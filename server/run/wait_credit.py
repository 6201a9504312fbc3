"""The wait credit: how long a run's requests waited behind other runs' evaluations, counted once.

Why: a run never pays for another run's grading, so the time its requests spent queued while
other runs' evaluations held the grader moves its deadline (`RunClock.record_grading`). Counted
per request, a run that always kept two submissions queued had every other run's evaluation
credited once per pending request (118 s credited for 82 s of another run's grading), and a
120 s budget lived 507 s while its jobs kept computing. So the credit is a run's, not a
request's: the union of its requests' waiting spans (each from its queueing to its
evaluation's start), intersected with the union of other runs' evaluation spans. Two requests
waiting through the same evaluation count it once. What was already given back is subtracted
when the next request is graded, and the whole is capped with the pause credit
(`grading.pause_cap_fraction`).

`overlap_s` and `merged` are pure; `run_waited_s` reads the spans from the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import or_
from sqlmodel import select

from a2rl.store import Evaluation, GradeRequest, Store, aware

Span = tuple[datetime, datetime]


def merged(spans: Iterable[Span]) -> list[Span]:
    """The union of `spans` as disjoint spans in order (empty and reversed ones dropped)."""
    out: list[Span] = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def overlap_s(a: Iterable[Span], b: Iterable[Span]) -> float:
    """Seconds of the union of `a` that the union of `b` covers."""
    left, right = merged(a), merged(b)
    total, i, j = 0.0, 0, 0
    while i < len(left) and j < len(right):
        lo, hi = max(left[i][0], right[j][0]), min(left[i][1], right[j][1])
        if hi > lo:
            total += (hi - lo).total_seconds()
        if left[i][1] <= right[j][1]:
            i += 1
        else:
            j += 1
    return total


def run_waited_s(store: Store, run_id: str) -> float:
    """How long the run's graded requests waited behind other runs' evaluations, in all:
    each request's span from its queueing to its evaluation's start, their union, covered by
    the union of other runs' evaluations (one still under way counts up to now)."""
    with store.session() as s:
        rows = s.exec(select(GradeRequest.created_at, Evaluation.started_at)
                      .join(Evaluation, Evaluation.id == GradeRequest.evaluation_id)  # type: ignore[arg-type]
                      .where(GradeRequest.run_id == run_id)).all()
        own = [(q, b) for q, b in ((aware(q), aware(b)) for q, b in rows)
               if q is not None and b is not None and b > q]
        if not own:
            return 0.0
        first, last = min(q for q, _ in own), max(b for _, b in own)
        others = s.exec(select(Evaluation.started_at, Evaluation.ended_at).where(
            Evaluation.run_id != run_id, Evaluation.started_at < last,  # type: ignore[operator]
            or_(Evaluation.ended_at.is_(None), Evaluation.ended_at > first))).all()  # type: ignore[union-attr]
    spans = [(aware(a), aware(e) or last) for a, e in others if a is not None]
    return overlap_s(own, spans)  # type: ignore[arg-type]
