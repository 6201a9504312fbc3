"""Budget and fairness between runs (issue 24): grading time is never compute time, and one
run's evaluations are never another run's cost.

Evaluations here are the cheapest the queue has: a request whose submission has no stored
copy is recorded as a failed evaluation at once (no grader process), and `slow_evaluations`
makes each take a known time by sleeping inside the evaluation's hold, where a paused clock
keeps the run's jobs frozen. The queue, the store, the clock, the freezer and the sandbox
are the real ones.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mcp import Client
from sqlmodel import select

from a2rl.grading.device_lock import device_lock
from a2rl.sandbox.cgroup import RunCgroup
from a2rl.server import build_server
from a2rl.server.run import QueueOnly, RunClock, build_runtime, create_run, finish_run
from a2rl.server.run import grading as run_grading
from a2rl.server.run.grading import grade_next
from a2rl.settings import Settings
from a2rl.store import (
    BudgetEvent,
    BudgetEventKind,
    Evaluation,
    GradeRequest,
    Run,
    Store,
    Submission,
    aware,
    utcnow,
)

from .conftest import require, require_bwrap
from .helpers import text_of, wait_for
from .test_grading_checks import save_perturbed

pytestmark = pytest.mark.timeout(300)


def started_run(store: Store, run_id: str, budget_s: float = 600,
                grading_clock: str = "counted") -> None:
    with store.session() as s:
        s.add(Run(id=run_id, task_id="arith", workspace="/nonexistent/workspace",
                  budget_s=budget_s, grading_clock=grading_clock))
    RunClock(store, run_id).start()


def queue(store: Store, run_id: str, sub_id: str) -> int:
    """A queued submission with no stored copy: evaluated at once, as a failure."""
    with store.session() as s:
        s.add(Submission(id=sub_id, run_id=run_id, path="output/x"))
    return QueueOnly(store).request(run_id, sub_id, "dev")


def slow_evaluations(monkeypatch: pytest.MonkeyPatch, seconds: float,
                     spans: list[tuple[str, float, float]] | None = None) -> None:
    """Each evaluation takes `seconds`, inside its hold (a paused run's jobs frozen); the
    (submission, start, end) of each, by the wall clock, go to `spans`."""
    real = run_grading.process_one

    def process_one(store: Store, *args: object, hold: object = None,
                    **kw: object) -> GradeRequest | None:
        @contextlib.contextmanager
        def slow(req: GradeRequest) -> Iterator[None]:
            with hold(req) if hold is not None else contextlib.nullcontext():  # type: ignore[operator]
                began, at = time.time(), utcnow()
                time.sleep(seconds)
                yield
                if spans is not None:
                    spans.append((req.submission_id, began, time.time()))
            with store.session() as s:  # the evaluation began with the sleep
                ev = s.exec(select(Evaluation).where(
                    Evaluation.submission_id == req.submission_id)).one()
                ev.started_at = at
                s.add(ev)

        return real(store, *args, hold=slow, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_grading, "process_one", process_one)


def grading_events(store: Store, run_id: str) -> list[dict]:
    with store.session() as s:
        return [e.detail for e in s.exec(select(BudgetEvent).where(
            BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.grading)
            .order_by(BudgetEvent.id))]  # type: ignore[arg-type]


def test_a_run_waits_behind_one_evaluation_of_another_and_is_not_charged(
        store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A queues three requests, then run B one: B is graded after A's first (round
    robin, not A's whole backlog), and B's counted clock gets back the time it waited behind
    A's evaluation; waiting behind its own run's evaluations is not given back, and B's
    evaluation, which A's second and third requests both waited through, is given back to A
    once (the union of A's waits, not once per pending request)."""
    started_run(store, "A")
    started_run(store, "B")
    for n in range(3):
        queue(store, "A", f"a{n}")
    queue(store, "B", "b0")
    deadline_b = RunClock(store, "B").deadline()
    slow_evaluations(monkeypatch, 1.0)
    order = []
    while (req := grade_next(store, settings, "w")) is not None:
        order.append(req.submission_id)
    assert order == ["a0", "b0", "a1", "a2"]
    (b,) = grading_events(store, "B")
    assert 1.0 <= b["wait_credit_s"] < 1.6, b  # A's one evaluation, not three
    moved = (RunClock(store, "B").deadline() - deadline_b).total_seconds()  # type: ignore[operator]
    assert moved == pytest.approx(b["wait_credit_s"], abs=0.01)
    assert RunClock(store, "B").credits("b0").wait_s == b["wait_credit_s"]
    a = {d["submission_id"]: d["wait_credit_s"] for d in grading_events(store, "A")}
    assert a["a0"] == 0  # first in line
    assert 1.0 <= a["a1"] < 1.6  # behind a0 (its own: not given back) and b0 (given back)
    assert a["a2"] == 0  # behind a0, b0, a1: only b0 is another run's, and given back already


def test_a_run_keeping_requests_queued_gets_its_waits_back_within_the_cap(
        store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: run A keeps two requests queued while run B's evaluations take turns with
    them (round robin). Counted per pending request and uncapped, A got 0.5 + 1 s back for
    1 s of B's grading (a 120 s budget lived 507 s); now each span is given back once (the
    test above) and all that grading gives back stops at the cap (`grading_pause_cap_fraction`
    of the budget, under a counted clock too: 0.75 s here), so A's deadline moves 0.75 s."""
    settings = settings.updated({"grading.pause_cap_fraction": 0.75 / 600})
    started_run(store, "A")
    started_run(store, "B")
    queue(store, "B", "b0")
    queue(store, "A", "a0")
    queue(store, "A", "a1")
    queue(store, "B", "b1")
    deadline_a = RunClock(store, "A").deadline()
    slow_evaluations(monkeypatch, 0.5)
    order = []
    while (req := grade_next(store, settings, "w")) is not None:
        order.append(req.submission_id)
    assert order == ["b0", "a0", "b1", "a1"]
    a = {d["submission_id"]: d["wait_credit_s"] for d in grading_events(store, "A")}
    assert 0.5 <= a["a0"] <= 0.75, a  # behind b0 (a loaded machine grades it slower)
    assert a["a1"] == pytest.approx(0.75 - a["a0"], abs=0.002), a  # b1, cut at the cap
    moved = (RunClock(store, "A").deadline() - deadline_a).total_seconds()  # type: ignore[operator]
    assert moved == pytest.approx(0.75, abs=0.01)
    assert RunClock(store, "A").credits().wait_s == pytest.approx(0.75, abs=0.002)


def test_wait_spans_are_united_before_they_are_counted() -> None:
    """The wait credit's arithmetic: a run's waits are one union, and so are the other runs'
    evaluations; only what both cover counts, once."""
    from a2rl.server.run.wait_credit import merged, overlap_s

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(a: float, b: float) -> tuple[datetime, datetime]:
        return t0 + timedelta(seconds=a), t0 + timedelta(seconds=b)

    assert merged([at(5, 6), at(0, 2), at(1, 3), at(4, 4)]) == [at(0, 3), at(5, 6)]
    two_waits = [at(0, 10), at(0, 10)]  # two requests queued through the same span
    assert overlap_s(two_waits, [at(2, 5)]) == 3.0
    assert overlap_s([at(0, 4), at(6, 9)], [at(3, 7), at(8, 20)]) == 3.0
    assert overlap_s([at(0, 1)], [at(1, 2)]) == 0.0 and overlap_s([], [at(0, 1)]) == 0.0


def test_any_pump_takes_at_once_a_request_a_dead_process_held(
        store: Store, settings: Settings) -> None:
    """A serving process killed mid-evaluation (no exit handler ran) leaves its lease for the
    evaluation's timeout and a margin (12 minutes): the pump of any other serving process of
    the host sees the holder gone and takes the request at once, whatever its run (before,
    only that run's own finalization looked)."""
    from a2rl.grading import claim
    from a2rl.server.run.grading import GradingPump

    started_run(store, "V")
    req_id = queue(store, "V", "v0")
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = f"{socket.gethostname()}:{gone.pid}:0:abcdef"
    assert claim(store, dead, lease_s=720) is not None
    pump = GradingPump(settings, store, idle_poll_s=0.1).start()
    try:
        assert wait_for(lambda: _request(store, req_id).state == "failed", 30)
    finally:
        pump.stop()
    req = _request(store, req_id)
    assert req.lease_owner == pump.owner and req.attempts == 2  # the lost attempt counts


def _request(store: Store, req_id: int) -> GradeRequest:
    with store.session() as s:
        req = s.get(GradeRequest, req_id)
        assert req is not None
        return req


def test_claim_order_is_round_robin_across_runs(store: Store) -> None:
    """The queue alone: a run whose evaluation is under way goes last; among the others the
    one served longest ago (never served first) offers its oldest request."""
    from a2rl.grading import claim

    for run in ("A", "B", "C"):
        started_run(store, run)
    ids = {sub: queue(store, run, sub) for run, sub in
           [("A", "a0"), ("A", "a1"), ("B", "b0"), ("A", "a2"), ("C", "c0"), ("B", "b1")]}
    got = [claim(store, "w", lease_s=60) for _ in range(3)]  # leases held: all under way
    assert [g.submission_id for g in got if g] == ["a0", "b0", "c0"]
    assert all(g is not None and g.id == ids[g.submission_id] for g in got)


@pytest.mark.anyio
async def test_pending_submissions_are_capped_with_a_reason(
        settings: Settings, store: Store, tmp_path: Path) -> None:
    """With `max_pending_grades = 1` and the grader busy (its lock held), a second
    submission is refused with how many are pending; once the first is graded, submitting
    works again, and `budget_status` and `get_score` say what was given back. The limit is
    the run's, frozen when it was made: the process serving it, set otherwise, holds it to
    it."""
    require_bwrap()
    made = settings.updated({"grading.max_pending_grades": 1})
    assert settings.grading.max_pending_grades != 1
    run = create_run(made, store, task_id="arith", baseline=False, start_clock=True,
                     budget="10m").run
    ws = Path(run.workspace)
    save_perturbed(ws / "base_model", ws / "output" / "ck", 0.3)
    try:
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as c:
            with device_lock(settings):  # the grader is busy with another run, say
                first = await c.call_tool("submit_checkpoint", {"path": "output/ck"})
                assert not first.is_error, text_of(first)
                second = await c.call_tool("submit_checkpoint", {"path": "output/ck"})
                assert second.is_error
                reason = text_of(second)
                assert "1 submission(s) of this run are pending grading" in reason, reason
                assert "at most 1" in reason and "\n" not in reason.strip()
            sid = first.structured_content["submission_id"]
            score = (await c.call_tool("get_score", {"submission_id": sid, "wait_s": 60}))
            assert not score.is_error, text_of(score)
            assert score.structured_content["status"] == "graded", score
            assert score.structured_content["waited_s"] == 0.0  # no other run's evaluation
            again = await c.call_tool("submit_checkpoint", {"path": "output/ck"})
            assert not again.is_error, text_of(again)
            status = (await c.call_tool("budget_status", {})).structured_content
            assert status["max_pending_grades"] == 1
            assert status["grading_wait_credit_s"] == 0.0
            assert status["grading_pause_cap_s"] == 0.0  # a counted clock pauses nothing
    finally:
        finish_run(settings, store, run.id)


TICKER = "while :; do date +%s.%N >> ticks; sleep 0.1; done"


def test_paused_clock_freezes_the_jobs_and_its_credit_is_capped(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 20 s run with a paused clock (cap 25%: 5 s) and a job that writes a timestamp
    every 0.1 s; four 2 s evaluations: the first 5 s of grading are frozen and given back
    (no tick lands in them), the rest counts; the job dies within a few seconds of budget
    plus cap."""
    require_bwrap()
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True,
                     grading_clock="paused", budget="20s").run
    started = aware(run.started_at)
    assert started is not None
    sandbox = build_runtime(settings, store, run).sandbox.get()
    sandbox.spawn("j-tick", TICKER)
    cgroup = RunCgroup(run.id)
    if not (cgroup.exists and ("freezer" in cgroup.paths or cgroup.v2)):
        finish_run(settings, store, run.id)
        require(False, "no writable cgroup freezer here: the paused clock cannot freeze jobs")
    for n in range(4):
        queue(store, run.id, f"s{n}")
    spans: list[tuple[str, float, float]] = []
    slow_evaluations(monkeypatch, 2.0, spans)
    try:
        while grade_next(store, settings, "w") is not None:
            pass
        credits = {d["submission_id"]: d["pause_credit_s"] for d in grading_events(store, run.id)}
        assert [round(credits[f"s{n}"]) for n in range(4)] == [2, 2, 1, 0], credits
        ticks = [float(x) for x in (Path(run.workspace) / "ticks").read_text().split()]
        for sub, began, _ in spans:
            frozen = (began, began + credits[sub] - 0.1)
            inside = [t for t in ticks if frozen[0] < t < frozen[1]]
            assert not inside, (sub, frozen, inside)
        assert any(t > spans[-1][1] + 0.5 for t in ticks) or credits["s3"] == 0
        deadline = RunClock(store, run.id).deadline()
        assert deadline is not None
        given = (deadline - started).total_seconds() - 20
        assert given == pytest.approx(5.0, abs=0.3), given  # the cap, never more
        # the job runs until the deadline, then the sandbox's watchdog ends it
        wait = deadline.timestamp() + 3 - time.time()
        assert wait > 0, "grading ended after the deadline: the machine is too slow"
        time.sleep(wait)
        ticks_file = Path(run.workspace) / "ticks"
        seen = ticks_file.read_text()
        time.sleep(1.0)
        assert ticks_file.read_text() == seen  # nothing ticks any more
        assert max(float(x) for x in seen.split()) < deadline.timestamp() + 1.0
        assert utcnow() - started < timedelta(seconds=20 + 5 + 5)
    finally:
        finish_run(settings, store, run.id)
    assert not cgroup.exists  # nothing left behind, though the run ended at its deadline


def test_jobs_left_frozen_still_die_at_the_end(settings: Settings, store: Store) -> None:
    """A grader that died mid-freeze leaves the jobs frozen: finishing the run thaws them
    first and ends them at once (a frozen process never dies until thawed, and the
    supervisor's shutdown waited a minute for them), leaving no cgroup."""
    require_bwrap()
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True).run
    sandbox = build_runtime(settings, store, run).sandbox.get()
    sandbox.spawn("j-tick", TICKER)
    cgroup = RunCgroup(run.id)
    try:
        if not (cgroup.exists and ("freezer" in cgroup.paths or cgroup.v2)):
            require(False, "no writable cgroup freezer here")
        assert cgroup.freeze_jobs(True)
    finally:
        began = time.monotonic()
        finish_run(settings, store, run.id)
    assert time.monotonic() - began < 30
    assert not cgroup.exists and not cgroup.pids()
