"""The grading queue: `GradeRequest` rows claimed with a lease, evaluated in a subprocess.

Why a lease: whichever process serves the run (`a2rl serve`, `a2rl run`, `a2rl finish`) drains
the queue, and a request must survive the process grading it. One that exits mid-evaluation
(its agent disconnected) kills the evaluation and gives the request back at once, with the
attempt it took (`give_back`, at exit); one that died without a word is seen gone by any
process of its host that pumps (`release_dead_leases`), and elsewhere its lease expires; each
such loss counts an attempt, up to `MAX_ATTEMPTS`. What follows a graded request for its run
(the grading time on the run's clock, pruning copies) is the run's business:
`a2rl.server.run.grading` wraps `process_one` with it, so every caller that grades does it.
Why a subprocess: see `a2rl.grading.worker`. Every outcome, including a timeout or a crash,
ends as an `Evaluation` row, so the agent gets an answer either way (but an evaluation this
process stopped by exiting, which is given back instead).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import and_, func, or_, update
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import (
    Evaluation,
    EvaluationConfig,
    EvaluationKind,
    EvaluationStatus,
    GradeRequest,
    GradeState,
    Run,
    Store,
    Submission,
    SubmissionStatus,
    aware,
    utcnow,
)
from a2rl.store.owners import owner_gone as process_gone
from a2rl.store.owners import process_owner

from .device_lock import device_lock
from .evaluate import EvalResult
from .frozen import CannotHonour, honour, of_run
from .prefork import Process, run_to_end, start_python
from .worker import WorkerSpec

MAX_ATTEMPTS = 3
STDERR_TAIL_CHARS = 2000
#: evaluation processes this process is waiting for: each runs in a session of its own, so a
#: server ended by a signal (`a2rl.interrupt`) would leave it grading for nobody; ended at exit
_workers: set[Process] = set()
#: the leases this process holds, by request id: given back when it exits, so that another
#: process claims them at once instead of when they expire (up to 12 minutes later)
_held: dict[int, tuple[Store, str]] = {}
_held_lock = threading.Lock()
#: set when this process exits: an evaluation it kills then is given back, not failed
_stopping = threading.Event()


@atexit.register
def _end_workers() -> None:
    """At exit (an agent that disconnected ends its `a2rl serve`; a signal; the end of `a2rl
    run`): kill the evaluations under way, and give their requests back to the queue."""
    _stopping.set()
    for proc in list(_workers):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with _held_lock:
        held = list(_held.items())
    for req_id, (store, owner) in held:
        with contextlib.suppress(Exception):  # a store gone already: the lease expires
            give_back(store, req_id, owner)
#: How long a claim holds beyond the evaluation's own timeout.
LEASE_MARGIN_S = 120.0


def enqueue(store: Store, run_id: str, submission_id: str, split: str) -> int:
    """Queue (submission, split) for grading; returns the request id."""
    with store.session() as s:
        req = GradeRequest(run_id=run_id, submission_id=submission_id, split=split)
        s.add(req)
        s.flush()
        assert req.id is not None
        return req.id


def _claimable(now: object, run_id: str | None) -> object:
    ready = or_(GradeRequest.state == GradeState.queued,
                and_(GradeRequest.state == GradeState.leased, GradeRequest.lease_until < now))
    return ready if run_id is None else and_(ready, GradeRequest.run_id == run_id)


def lease_owner() -> str:
    """A lease owner unique to this process and call: `host:pid:start:nonce`, the process as
    a run's owner is written (`owner_gone` reads it back; its start time tells a pid reused
    by another process from the one that took the lease)."""
    return f"{process_owner()}:{uuid.uuid4().hex[:6]}"


def owner_gone(owner: str | None) -> bool:
    """Whether `owner` is a process of this host that no longer runs: it died holding its
    lease, and nothing will finish its request. An owner elsewhere is never judged gone."""
    if not owner:
        return False
    return process_gone(":".join(owner.split(":")[:3]))


def release_dead_leases(store: Store, run_id: str | None = None) -> int:
    """End now the leases (of the run's requests, or of every run's) held for a process of
    this host that died (a server killed mid-evaluation), so they are claimed again at once
    rather than when the lease expires; returns how many. Every pump does it before it
    claims, and finalization while it waits."""
    with store.session() as s:
        query = select(GradeRequest).where(GradeRequest.state == GradeState.leased)
        if run_id is not None:
            query = query.where(GradeRequest.run_id == run_id)
        n = 0
        for req in s.exec(query).all():
            if owner_gone(req.lease_owner):
                res = s.exec(update(GradeRequest)  # type: ignore[call-overload]
                             .where(GradeRequest.id == req.id,
                                    GradeRequest.state == GradeState.leased,
                                    GradeRequest.lease_owner == req.lease_owner)
                             .values(lease_until=utcnow() - timedelta(seconds=1)))
                n += res.rowcount
        return n


def give_back(store: Store, req_id: int, owner: str) -> bool:
    """Put a request this process leased back in the queue, with the attempt it took given
    back: its evaluation was stopped by this process's own end, not by the checkpoint, so it
    must not bring the request nearer to `MAX_ATTEMPTS` (an agent that disconnects over and
    over would otherwise fail another run's submission). True when it was still ours."""
    with store.session() as s:
        res = s.exec(update(GradeRequest)  # type: ignore[call-overload]
                     .where(GradeRequest.id == req_id, GradeRequest.state == GradeState.leased,
                            GradeRequest.lease_owner == owner)
                     .values(state=GradeState.queued, lease_owner=None, lease_until=None,
                             attempts=GradeRequest.attempts - 1))  # claims count from 1
        returned: bool = res.rowcount == 1
        if returned:
            req = s.get(GradeRequest, req_id)
            sub = s.get(Submission, req.submission_id) if req is not None else None
            if sub is not None and sub.status == SubmissionStatus.grading:
                sub.status = SubmissionStatus.queued
                s.add(sub)
    with _held_lock:
        _held.pop(req_id, None)
    return returned


def outstanding(store: Store, run_id: str) -> list[GradeRequest]:
    """The run's requests not graded yet: queued, or leased by some process (whose lease
    bounds how long it may hold one)."""
    with store.session() as s:
        return list(s.exec(select(GradeRequest).where(
            GradeRequest.run_id == run_id,
            GradeRequest.state.in_([GradeState.queued, GradeState.leased]))  # type: ignore[attr-defined]
            .order_by(GradeRequest.id)).all())


def _turn_order(s: object, now: object, run_id: str | None) -> list[int]:
    """Candidate request ids, the fair order: round robin across runs.

    Each run with a claimable request offers its oldest; a run whose evaluation is under way
    goes last, then the run served longest ago (its latest evaluation's start; never served
    first), then the older request. So a run with many requests queued gets one evaluation
    per turn, and another run's single request waits behind at most one of them (per run
    ahead of it), never behind its whole backlog."""
    heads = s.exec(select(GradeRequest.run_id, func.min(GradeRequest.id))  # type: ignore[attr-defined]
                   .where(_claimable(now, run_id)).group_by(GradeRequest.run_id)).all()
    if len(heads) <= 1:
        return [head for _, head in heads]
    runs = [r for r, _ in heads]
    busy = set(s.exec(select(GradeRequest.run_id).where(  # type: ignore[attr-defined]
        GradeRequest.run_id.in_(runs), GradeRequest.state == GradeState.leased,  # type: ignore[attr-defined]
        GradeRequest.lease_until >= now)).all())
    served = dict(s.exec(select(Evaluation.run_id, func.max(Evaluation.started_at))  # type: ignore[attr-defined]
                         .where(Evaluation.run_id.in_(runs))  # type: ignore[attr-defined]
                         .group_by(Evaluation.run_id)).all())
    never = datetime.min.replace(tzinfo=UTC)
    return [head for r, head in sorted(
        heads, key=lambda h: (h[0] in busy, aware(served.get(h[0])) or never, h[1]))]


def claim(store: Store, owner: str, lease_s: float,
          run_id: str | None = None) -> GradeRequest | None:
    """Lease the next request in the fair order (`_turn_order`), or return None.

    With `run_id`, only that run's requests, oldest first: finalizing one run must not grade
    another's.

    The conditional UPDATE is the atomic step: two claimers can read the same candidate, but
    only one UPDATE matches it; the other moves on to the next candidate. On PostgreSQL the
    candidate is also row-locked with `FOR UPDATE SKIP LOCKED`, so claimers on several nodes
    pass over each other's candidates instead of queueing behind them (SQLite ignores the
    clause; its `BEGIN IMMEDIATE` already admits one writer at a time).
    """
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


def _failure_reason(rc: int | None, timed_out: bool, timeout_s: float, stderr: str) -> str:
    if timed_out:
        reason = f"the evaluation timed out after {timeout_s:g}s and was killed"
    elif rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
        reason = f"the evaluation process was killed by signal {name}"
        if rc == -signal.SIGKILL:
            reason += " (out of memory, or killed from outside)"
    elif rc == 4 and stderr.strip():  # the worker refused, in one line (`TaskChanged`)
        return stderr.strip().splitlines()[-1]
    elif rc:
        reason = f"the evaluation process exited with code {rc}"
    else:
        reason = "the evaluation process produced no result"
    tail = stderr.strip()[-STDERR_TAIL_CHARS:]
    return f"{reason}; stderr tail:\n{tail}" if tail else reason


def run_worker(spec: WorkerSpec | dict, timeout_s: float,
               ) -> tuple[EvalResult | None, str | None, float]:
    """Run `python -I -m a2rl.grading.worker` on `spec` (started warm: `prefork`); (result,
    failure reason, seconds).

    Isolated mode (`-I`: no current folder or script folder on sys.path, no PYTHON* variables,
    no user site-packages) and a private working folder: an `a2rl/` folder (a checkout, or
    something planted) where the caller stands can never be imported in place of ours.
    """
    with tempfile.TemporaryDirectory(prefix="a2rl-grade-") as tmp:
        out = Path(tmp) / "result.json"
        err_path = Path(tmp) / "stderr.txt"
        cwd = Path(tmp) / "cwd"
        cwd.mkdir(mode=0o700)
        # validated here, where the task registry registered its loader (the spec's default)
        text = WorkerSpec.model_validate(spec).model_dump_json()
        started = time.monotonic()
        proc = start_python("a2rl.grading.worker", ["--spec", text, "--out", str(out)], cwd,
                            err_path)
        _workers.add(proc)
        try:  # interrupted (Ctrl-C, a signal), it is graded for nobody: killed all the same
            timed_out = run_to_end(proc, timeout_s)
        finally:
            _workers.discard(proc)
        elapsed = time.monotonic() - started
        stderr = err_path.read_text(errors="replace")
        if not timed_out and proc.returncode == 0 and out.is_file():
            try:
                return EvalResult.model_validate_json(out.read_text()), None, elapsed
            except ValueError as exc:
                return None, f"the evaluation result did not parse: {exc}", elapsed
        return None, _failure_reason(proc.returncode, timed_out, timeout_s, stderr), elapsed


def _finish(store: Store, req_id: int, ev: Evaluation, error: str | None) -> None:
    with store.session() as s:
        s.add(ev)
        s.flush()
        req = s.get(GradeRequest, req_id)
        assert req is not None
        req.state = GradeState.failed if error else GradeState.done
        req.evaluation_id = ev.id
        req.lease_until = None
        s.add(req)
        sub = s.get(Submission, req.submission_id)
        if sub is not None:
            sub.status = SubmissionStatus.failed if error else SubmissionStatus.graded
            sub.error = error
            s.add(sub)


def spec_for(run: Run, checkpoint_dir: str, split: str, settings: Settings,
             evaluation: EvaluationConfig | None = None, *, regrade: bool = False,
             profile: str | None = None) -> WorkerSpec:
    """What the grader process is told to evaluate: the run's task under its profile (or
    `profile`, a second reading), the checkpoint at `checkpoint_dir` (a submission's stored
    copy, or the base model), on `split`, under `settings` with the run's frozen evaluation
    config laid over them (`frozen.honour`)."""
    return WorkerSpec(task_id=run.task_id, profile=profile or run.profile,
                      task_options=run.task_options, checkpoint_dir=checkpoint_dir,
                      split=split, settings=settings.model_dump(mode="json"),
                      evaluation=evaluation if profile in (None, run.profile) else None,
                      regrade=regrade)


#: What surrounds one evaluation for its run (`a2rl.server.run.pause` freezes the run's jobs
#: under a paused grading clock); the queue knows nothing of clocks.
EvaluationHold = Callable[[GradeRequest], AbstractContextManager[object]]


def process_one(
    store: Store, settings: Settings, owner: str, timeout_s: float = 600.0,
    run_id: str | None = None, hold: EvaluationHold | None = None,
) -> GradeRequest | None:
    """Claim one request (of `run_id` only, when given), evaluate its submission's stored
    copy, record the outcome.

    Returns the request it processed, or None when the queue was empty. Holds the device
    lock for the whole evaluation, and `hold(request)` around it when given.
    """
    with device_lock(settings):
        if _stopping.is_set():  # this process is exiting: claim nothing more
            return None
        req = claim(store, owner, lease_s=timeout_s + LEASE_MARGIN_S, run_id=run_id)
        if req is None:
            return None
        assert req.id is not None
        with _held_lock:
            _held[req.id] = (store, owner)
        try:
            with hold(req) if hold is not None else contextlib.nullcontext():
                _evaluate(store, settings, req, timeout_s)
        finally:
            with _held_lock:
                _held.pop(req.id, None)
        return req


def _honoured(settings: Settings, frozen: EvaluationConfig | None,
              ) -> tuple[str | None, Settings]:
    """(None, the settings to grade under), or (why this process cannot grade the run,
    its own settings)."""
    if frozen is None:  # a run with no evaluation to read its config from: these settings
        return None, settings
    try:
        return None, honour(settings, frozen)
    except CannotHonour as exc:
        return str(exc), settings


def _evaluate(store: Store, settings: Settings, req: GradeRequest, timeout_s: float) -> None:
    assert req.id is not None
    started = utcnow()
    ev = Evaluation(run_id=req.run_id, submission_id=req.submission_id,
                    kind=EvaluationKind.submission, split=req.split,
                    status=EvaluationStatus.failed, started_at=started)
    with store.session() as s:
        sub = s.get(Submission, req.submission_id)
        run = s.get(Run, req.run_id)
        if sub is not None:
            sub.status = SubmissionStatus.grading
            s.add(sub)
        frozen = of_run(s, run) if run is not None else None
    # a process that cannot honour the run's frozen config records why, never grades
    error, graded_under = _honoured(settings, frozen)
    if error is None and req.attempts > MAX_ATTEMPTS:
        error = (f"gave up after {MAX_ATTEMPTS} attempts: the grader stopped while "
                 "evaluating this checkpoint each time")
    elif error is None and (sub is None or run is None or not sub.checkpoint_dir):
        error = "the submission has no stored checkpoint copy to evaluate"
    elif error is None:
        assert run is not None and sub is not None and sub.checkpoint_dir
        spec = spec_for(run, sub.checkpoint_dir, req.split, graded_under, frozen)
        result, error, elapsed = run_worker(spec, timeout_s)
        if result is None and _stopping.is_set():
            # killed by this process's exit (`_end_workers`), not failed: queued again
            give_back(store, req.id, req.lease_owner or "")
            return
        if result is not None:
            ev.status, ev.score, ev.ci_low, ev.ci_high = (EvaluationStatus.done, result.score,
                                                          result.ci_low, result.ci_high)
            ev.n_items = result.n_items
            ev.metrics = {**result.metrics, "wall_s": round(elapsed, 3)}
            ev.items = [it.model_dump() for it in result.items]
            ev.provenance = result.provenance
    ev.error = error
    ev.ended_at = utcnow()
    _finish(store, req.id, ev, error)

