"""`graderequest` rows, the grading queue: queued, leased, given back, done or failed.

    queued --claim--> leased --finish--> done | failed
    leased --give_back--> queued (the attempt given back: the grader's own process stopped)
    leased, its lease ended (expired, or its holder seen dead) --claim--> leased again

Why leases: whichever process serves a run drains the queue, and a request must survive the
process grading it (`a2rl.grading.queue` says who claims and when). A claim is a conditional
UPDATE, the atomic step: two claimers may read the same candidate, but only one UPDATE
matches it. On PostgreSQL the candidate is row-locked first with `FOR UPDATE SKIP LOCKED`,
so claimers on several nodes pass over each other's candidates instead of queueing behind
them (SQLite ignores the clause; its `BEGIN IMMEDIATE` already admits one writer at a time).
The submission a request grades moves with it, in the same transaction
(`records.submissions`), and so does its evaluation (`records.evaluations`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, update
from sqlmodel import Session, select

from ..db import Store
from ..models import Evaluation, GradeRequest, aware, utcnow
from ..status import GradeState
from . import evaluations, submissions
from .evaluations import NewEvaluation


def enqueue(store: Store, run_id: str, submission_id: str, split: str) -> int:
    """Queue (submission, split) for grading; returns the request id."""
    with store.session() as s:
        req = GradeRequest(run_id=run_id, submission_id=submission_id, split=split)
        s.add(req)
        s.flush()
        assert req.id is not None
        return req.id


def _claimable(now: object, run_id: str | None) -> Any:
    ready = or_(GradeRequest.state == GradeState.queued,
                and_(GradeRequest.state == GradeState.leased, GradeRequest.lease_until < now))
    return ready if run_id is None else and_(ready, GradeRequest.run_id == run_id)


def _turn_order(s: Session, now: object, run_id: str | None) -> list[int]:
    """Candidate request ids, the fair order: round robin across runs.

    Each run with a claimable request offers its oldest; a run whose evaluation is under way
    goes last, then the run served longest ago (its latest evaluation's start; never served
    first), then the older request. So a run with many requests queued gets one evaluation
    per turn, and another run's single request waits behind at most one of them (per run
    ahead of it), never behind its whole backlog."""
    heads = s.exec(select(GradeRequest.run_id, func.min(GradeRequest.id))  # type: ignore[call-overload]
                   .where(_claimable(now, run_id)).group_by(GradeRequest.run_id)).all()
    if len(heads) <= 1:
        return [head for _, head in heads]
    runs = [r for r, _ in heads]
    busy = set(s.exec(select(GradeRequest.run_id).where(
        GradeRequest.run_id.in_(runs), GradeRequest.state == GradeState.leased,  # type: ignore[attr-defined]
        GradeRequest.lease_until >= now)).all())  # type: ignore[operator]
    served = dict(s.exec(select(Evaluation.run_id, func.max(Evaluation.started_at))  # type: ignore[call-overload]
                         .where(Evaluation.run_id.in_(runs))  # type: ignore[union-attr]
                         .group_by(Evaluation.run_id)).all())
    never = datetime.min.replace(tzinfo=UTC)
    return [head for r, head in sorted(
        heads, key=lambda h: (h[0] in busy, aware(served.get(h[0])) or never, h[1]))]


def claim(store: Store, owner: str, lease_s: float,
          run_id: str | None = None) -> GradeRequest | None:
    """Lease the next request in the fair order (`_turn_order`) to `owner` for `lease_s`,
    counting an attempt; None when nothing is claimable. With `run_id`, only that run's
    requests, oldest first: finalizing one run must not grade another's."""
    now = utcnow()
    with store.session() as s:
        for _ in range(10):
            order = _turn_order(s, now, run_id)
            if not order:
                return None
            for cand in order:
                locked = s.exec(select(GradeRequest.id).where(
                    GradeRequest.id == cand, _claimable(now, run_id))
                    .with_for_update(skip_locked=True)).first()
                if locked is None:
                    continue
                res = s.exec(update(GradeRequest)  # type: ignore[call-overload]
                             .where(GradeRequest.id == cand, _claimable(now, run_id))
                             .values(state=GradeState.leased, lease_owner=owner,
                                     lease_until=now + timedelta(seconds=lease_s),
                                     attempts=GradeRequest.attempts + 1))
                if res.rowcount == 1:
                    req = s.get(GradeRequest, cand)
                    assert req is not None
                    s.refresh(req)
                    return req
    return None


def release_dead_leases(store: Store, gone: Callable[[str | None], bool],
                        run_id: str | None = None) -> int:
    """End now the leases (of the run's requests, or of every run's) whose holder is `gone`
    (a process of this host that died), so they are claimed again at once rather than when
    they expire; returns how many. Each ends only if still held by the same owner."""
    with store.session() as s:
        query = select(GradeRequest).where(GradeRequest.state == GradeState.leased)
        if run_id is not None:
            query = query.where(GradeRequest.run_id == run_id)
        n = 0
        for req in s.exec(query).all():
            if gone(req.lease_owner):
                res = s.exec(update(GradeRequest)  # type: ignore[call-overload]
                             .where(GradeRequest.id == req.id,
                                    GradeRequest.state == GradeState.leased,
                                    GradeRequest.lease_owner == req.lease_owner)
                             .values(lease_until=utcnow() - timedelta(seconds=1)))
                n += res.rowcount
        return n


def give_back(store: Store, req_id: int, owner: str) -> bool:
    """Put a request `owner` leased back in the queue, with the attempt it took given back
    (its evaluation was stopped by the grading process's own end, not by the checkpoint),
    and its submission queued again; True when it was still `owner`'s."""
    with store.session() as s:
        res = s.exec(update(GradeRequest)  # type: ignore[call-overload]
                     .where(GradeRequest.id == req_id, GradeRequest.state == GradeState.leased,
                            GradeRequest.lease_owner == owner)
                     .values(state=GradeState.queued, lease_owner=None, lease_until=None,
                             attempts=GradeRequest.attempts - 1))  # claims count from 1
        returned: bool = res.rowcount == 1
        if returned:
            req = s.get(GradeRequest, req_id)
            if req is not None:
                submissions.requeue(s, req.submission_id)
    return returned


def finish(store: Store, req_id: int, new: NewEvaluation) -> Evaluation:
    """The request's evaluation recorded, the request `done` (`failed` when the evaluation
    failed) pointing at it, its lease ended, and its submission `graded` (or `failed`, with
    the evaluation's error), in one transaction."""
    with store.session() as s:
        ev = evaluations.record(s, new)
        req = s.get(GradeRequest, req_id)
        assert req is not None
        req.state = GradeState.failed if new.error else GradeState.done
        req.evaluation_id = ev.id
        req.lease_until = None
        s.add(req)
        submissions.graded(s, req.submission_id, new.error)
        return ev
