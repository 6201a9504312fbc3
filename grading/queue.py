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
process stopped by exiting, which is given back instead). The rows' changes themselves (the
queue row with its submission and its evaluation) are `a2rl.store.records.grade_requests`'.
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
from pathlib import Path

from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import (
    EvaluationConfig,
    EvaluationKind,
    GradeRequest,
    GradeState,
    Run,
    Store,
    utcnow,
)
from a2rl.store.owners import owner_gone as process_gone
from a2rl.store.owners import process_owner
from a2rl.store.records import grade_requests, submissions
from a2rl.store.records.evaluations import NewEvaluation

from .device_lock import device_lock
from .evaluate import EvalResult
from .frozen import CannotHonour, honour, of_run
from .prefork import Process, run_to_end, start_python
from .recorded import scores_of
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


#: Queue (submission, split) for grading; returns the request id.
enqueue = grade_requests.enqueue


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
    return grade_requests.release_dead_leases(store, owner_gone, run_id)


def give_back(store: Store, req_id: int, owner: str) -> bool:
    """Put a request this process leased back in the queue, with the attempt it took given
    back: its evaluation was stopped by this process's own end, not by the checkpoint, so it
    must not bring the request nearer to `MAX_ATTEMPTS` (an agent that disconnects over and
    over would otherwise fail another run's submission). True when it was still ours."""
    returned = grade_requests.give_back(store, req_id, owner)
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


def claim(store: Store, owner: str, lease_s: float,
          run_id: str | None = None) -> GradeRequest | None:
    """Lease the next request in the fair order (round robin across runs: a run with many
    requests queued gets one evaluation per turn), or return None; with `run_id`, only that
    run's requests, oldest first (finalizing one run must not grade another's). The atomic
    claim and its locks: `a2rl.store.records.grade_requests.claim`."""
    return grade_requests.claim(store, owner, lease_s, run_id)


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
    with store.session() as s:
        sub = submissions.start_grading(s, req.submission_id)
        run = s.get(Run, req.run_id)
        frozen = of_run(s, run) if run is not None else None
    # a process that cannot honour the run's frozen config records why, never grades
    error, graded_under = _honoured(settings, frozen)
    scores = None
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
            scores = scores_of(result, elapsed)
    grade_requests.finish(store, req.id, NewEvaluation(
        run_id=req.run_id, submission_id=req.submission_id, kind=EvaluationKind.submission,
        split=req.split, started_at=started, ended_at=utcnow(), scores=scores, error=error))
