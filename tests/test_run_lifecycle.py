"""The run in one place (`a2rl.server.run`): its clock, its grading follow-up, finalization
that grades only its own run, and the typed hook submissions go through."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from mcp import Client
from sqlmodel import select

from a2rl.grading.queue import claim, lease_owner, owner_gone
from a2rl.layout import BASE_MODEL, DATA, TASK_FILE, WRITABLE_DIRS
from a2rl.sandbox.local import LocalSandbox
from a2rl.server import build_server
from a2rl.server.app import RunRegistry
from a2rl.server.run import (
    GradingPump,
    QueueOnly,
    RunClock,
    build_runtime,
    create_run,
    finish_run,
)
from a2rl.server.run import grading as run_grading
from a2rl.server.run.grading import grade_next
from a2rl.settings import Settings
from a2rl.store import (
    AgentStatus,
    BudgetEvent,
    BudgetEventKind,
    EvaluationKind,
    EvaluationStatus,
    GradeRequest,
    GradeState,
    GradingClock,
    JobState,
    Run,
    RunStatus,
    Store,
    Submission,
    SubmissionStatus,
    aware,
    utcnow,
)
from a2rl.store.records.evaluations import NewEvaluation, Scores
from a2rl.store.records.grade_requests import finish as finish_request
from a2rl.tools.seam import GradingHook, RunClockView

from .conftest import require_bwrap

pytestmark = pytest.mark.timeout(300)


def bare_run(store: Store, run_id: str = "r1", grading_clock: str = "counted",
             budget_s: float = 600) -> None:
    with store.session() as s:
        s.add(Run(id=run_id, task_id="arith", workspace="/nonexistent/workspace",
                  budget_s=budget_s, grading_clock=grading_clock))


def queue_uncopied(store: Store, run_id: str, sub_id: str) -> int:
    """A queued submission with no stored copy: graded at once (as a failure), no worker."""
    with store.session() as s:
        s.add(Submission(id=sub_id, run_id=run_id, path="output/x"))
    return QueueOnly(store).request(run_id, sub_id, "dev")


def events(store: Store, run_id: str, kind: str) -> list[BudgetEvent]:
    with store.session() as s:
        return list(s.exec(select(BudgetEvent).where(BudgetEvent.run_id == run_id,
                                                     BudgetEvent.kind == kind)).all())


def request(store: Store, req_id: int) -> GradeRequest:
    with store.session() as s:
        req = s.get(GradeRequest, req_id)
        assert req is not None
        return req


def test_clock_starts_once_and_reads_used_and_remaining(store: Store) -> None:
    bare_run(store)
    clock = RunClock(store, "r1")
    before = clock.read()
    assert before.started_at is None and before.remaining_s == 600 and before.used_s == 0
    assert not before.exhausted and clock.deadline() is None
    assert clock.deadline_ts() > datetime(2099, 1, 1).timestamp()  # no deadline yet
    run = clock.start()
    assert run.status == RunStatus.running and clock.start().started_at == run.started_at
    assert len(events(store, "r1", BudgetEventKind.clock_start)) == 1
    later = clock.read(aware(run.started_at) + timedelta(seconds=100))  # type: ignore[operator]
    assert later.used_s == pytest.approx(100) and later.remaining_s == pytest.approx(500)
    gone = clock.read(aware(run.started_at) + timedelta(seconds=700))  # type: ignore[operator]
    assert gone.exhausted and gone.remaining_s == 0 and gone.used_s == 600


def test_clock_start_is_atomic_across_threads(store: Store) -> None:
    bare_run(store)
    clocks = [RunClock(store, "r1") for _ in range(4)]  # one per serving process, say
    threads = [threading.Thread(target=c.start) for c in clocks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({c.deadline() for c in clocks}) == 1


def test_exhaust_is_noted_once(store: Store) -> None:
    bare_run(store)
    clock = RunClock(store, "r1")
    assert clock.exhaust() is True and clock.exhaust() is False
    assert len(events(store, "r1", BudgetEventKind.exhausted)) == 1


@pytest.mark.parametrize("grading_clock", ["counted", "paused"])
def test_grading_time_pauses_only_a_paused_clock(store: Store, grading_clock: str) -> None:
    bare_run(store, grading_clock=grading_clock)
    clock = RunClock(store, "r1")
    deadline = aware(clock.start().deadline)
    assert deadline is not None
    moved = clock.record_grading(30.0, "s1", "dev")
    assert clock.grading_s() == 30.0
    if grading_clock == "paused":
        assert moved == clock.deadline() == deadline + timedelta(seconds=30)
    else:
        assert moved is None and clock.deadline() == deadline
    clock.close("done")
    assert clock.record_grading(10.0, "s2", "dev") is None  # an ended run's deadline stays
    assert clock.read().ended and clock.run().status == RunStatus.finished


def test_a_closed_run_keeps_its_end(store: Store) -> None:
    """Closing is once: a fleet giving up on a run (`failed`) after its node finalized it
    leaves the run finished, with one end event."""
    bare_run(store)
    clock = RunClock(store, "r1")
    clock.start()
    ended = clock.close("agent finished")
    again = clock.close("node lost", status=RunStatus.failed)
    assert (again.status, again.end_reason, aware(again.ended_at)) == (
        RunStatus.finished, "agent finished", aware(ended.ended_at))
    assert [e.detail for e in events(store, "r1", BudgetEventKind.finished)] == [
        {"reason": "agent finished"}]
    with pytest.raises(KeyError, match="does not exist"):
        RunClock(store, "nosuch").close("x")


def test_graded_request_gets_its_runs_follow_up(store: Store, settings: Settings) -> None:
    """Whoever grades (the pump or finalization), the grading time reaches the run's clock.
    A paused clock gives back only the time its jobs were frozen: a run with no sandbox has
    nothing to freeze, so its deadline stays and the hook is not told."""
    bare_run(store, grading_clock="paused")
    deadline = aware(RunClock(store, "r1").start().deadline)
    queue_uncopied(store, "r1", "s1")
    told: list[tuple[str, datetime]] = []
    req = grade_next(store, settings, "w", on_deadline=lambda r, d: told.append((r, d)))
    assert req is not None and req.state == GradeState.failed
    (ev,) = events(store, "r1", BudgetEventKind.grading)
    assert ev.detail["submission_id"] == "s1"
    assert ev.detail["pause_credit_s"] == 0 and ev.detail["wait_credit_s"] == 0
    assert RunClock(store, "r1").deadline() == deadline and told == []


def supervisor_deadline(settings: Settings, store: Store, run: Run) -> float:
    """The deadline the run's supervisor holds, read without handing it one (a reattach
    would give it the clock's)."""
    sandbox = LocalSandbox(build_runtime(settings, store, run).sandbox.spec())
    assert sandbox.client.load_token()
    return float(sandbox.client.call("ping")["deadline"])


def slow_grader(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The grader as if each evaluation took `seconds`: it sleeps that long inside the
    evaluation's hold, where a paused clock keeps the run's jobs frozen (the follow-up is
    under test, not the evaluation: a real one of a tiny model takes a few seconds, too few
    to measure)."""
    real = run_grading.process_one

    def process_one(store: Store, *args: object, hold: object = None,
                    **kw: object) -> GradeRequest | None:
        @contextlib.contextmanager
        def slow(req: GradeRequest) -> Iterator[None]:
            with hold(req) if hold is not None else contextlib.nullcontext():  # type: ignore[operator]
                yield
                time.sleep(seconds)

        return real(store, *args, hold=slow, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_grading, "process_one", process_one)


def test_moved_deadline_reaches_a_sandbox_another_process_serves(
        settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a paused grading clock, run X's request graded by the pump of a process that
    serves only run Y: the pump freezes X's jobs, attaches to X's supervisor and hands it X's
    new deadline (moved by the time frozen), so X's job lives past the old one."""
    require_bwrap()
    settings = settings.updated({"grading.pause_cap_fraction": 1.0})
    x = create_run(settings, store, task_id="arith", baseline=False, start_clock=True,
                   grading_clock="paused", budget="8s").run
    y = create_run(settings, store, task_id="arith", baseline=False, start_clock=True).run
    sandbox = build_runtime(settings, store, x).sandbox.get()  # X's own serving process, say
    sandbox.spawn("j-long", "sleep 60")
    serving_y = RunRegistry(settings, store)
    serving_y.get(y.id)
    queue_uncopied(store, x.id, "s-x")
    slow_grader(monkeypatch, 5.0)
    try:
        pump = serving_y.pump
        assert grade_next(store, settings, pump.owner, on_deadline=pump.on_deadline) is not None
        old, new = aware(x.deadline), RunClock(store, x.id).deadline()
        assert old is not None and new is not None and (new - old).total_seconds() >= 5
        assert supervisor_deadline(settings, store, x) == new.timestamp()
        assert x.id not in serving_y._runtimes  # it attached, it did not start serving X
        wait = old.timestamp() + 1.5 - time.time()
        assert wait > 0, "the grading came after the old deadline: the machine is too slow"
        time.sleep(wait)
        assert sandbox.get("j-long").state == JobState.running
    finally:
        finish_run(settings, store, x.id)
        finish_run(settings, store, y.id)


@pytest.mark.anyio
async def test_a_tool_call_hands_the_sandbox_a_deadline_moved_elsewhere(
        settings: Settings, store: Store) -> None:
    """A grader that cannot reach the supervisor (another node of a fleet) moves only the
    clock: the run's next tool call, even budget_status, hands the sandbox the new deadline."""
    require_bwrap()
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True,
                     grading_clock="paused", budget="10m").run
    try:
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as c:
            r = await c.call_tool("run_command", {"command": "sleep 60", "wait_s": 0})
            assert not r.is_error, r
            before = supervisor_deadline(settings, store, run)
            assert before == RunClock(store, run.id).deadline_ts()
            moved = RunClock(store, run.id).record_grading(30.0, None, "dev")
            assert moved is not None and supervisor_deadline(settings, store, run) == before
            await c.call_tool("budget_status", {})
            assert supervisor_deadline(settings, store, run) == moved.timestamp() == before + 30
    finally:
        finish_run(settings, store, run.id)


def test_a_run_is_laid_out_once_by_its_task(settings: Settings, store: Store) -> None:
    """The workspace holds `a2rl.layout`'s names, written by the task alone."""
    run = create_run(settings, store, task_id="arith", baseline=False).run
    ws = Path(run.workspace)
    assert sorted(p.name for p in ws.iterdir()) == sorted(
        [TASK_FILE, BASE_MODEL, DATA, *WRITABLE_DIRS])
    assert all(not any((ws / d).iterdir()) for d in WRITABLE_DIRS)
    finish_run(settings, store, run.id)


def test_finishing_one_run_grades_only_its_own_requests(settings: Settings,
                                                        store: Store) -> None:
    """Finalization grades its run's queue, with the follow-up; another run's request stays
    queued for the process serving that run."""
    mine = create_run(settings, store, task_id="arith", baseline=False, start_clock=True,
                      grading_clock="paused").run
    other = create_run(settings, store, task_id="arith", baseline=False).run
    own = queue_uncopied(store, mine.id, "s-mine")
    theirs = queue_uncopied(store, other.id, "s-theirs")
    finish_run(settings, store, mine.id)
    assert request(store, theirs).state == GradeState.queued
    assert request(store, own).state == GradeState.failed
    with store.session() as s:
        sub = s.get(Submission, "s-theirs")
        assert sub is not None and sub.status == SubmissionStatus.queued
    (ev,) = events(store, mine.id, BudgetEventKind.grading)
    assert events(store, other.id, BudgetEventKind.grading) == []
    with store.session() as s:
        row = s.get(Run, mine.id)
        assert row is not None and row.status == RunStatus.finished
    # the deadline moved by what the grading gave back, as its event says (a finalizing run's
    # jobs are stopped, so nothing was frozen: not its grading time, 10 ms or more when loaded)
    moved = (aware(row.deadline) - aware(mine.deadline)).total_seconds()  # type: ignore[operator]
    given_back = ev.detail["pause_credit_s"] + ev.detail["wait_credit_s"]
    assert moved == pytest.approx(given_back, abs=0.01) and ev.detail["seconds"] >= 0
    finish_run(settings, store, other.id)  # now it is graded, by its own finalization
    assert request(store, theirs).state == GradeState.failed


def test_finishing_waits_for_its_request_under_another_lease(settings: Settings,
                                                             store: Store) -> None:
    """A request of the run that another process's pump is grading is waited for: its
    evaluation is there when the final score is picked."""
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True,
                     protocol="paper").run
    req_id = queue_uncopied(store, run.id, "s1")
    held = claim(store, "another-process", lease_s=60, run_id=run.id)
    assert held is not None and held.id == req_id

    def other_process_grades() -> None:
        time.sleep(1.5)
        finish_request(store, req_id, NewEvaluation(
            run_id=run.id, submission_id="s1", kind=EvaluationKind.submission, split="test",
            started_at=utcnow(), ended_at=utcnow(),
            scores=Scores(score=0.75, ci_low=None, ci_high=None, n_items=0, metrics={},
                          items=[], provenance={})))

    grader = threading.Thread(target=other_process_grades)
    started = time.monotonic()
    grader.start()
    done = finish_run(settings, store, run.id)
    grader.join()
    assert time.monotonic() - started >= 1.5
    assert done.final_score == 0.75 and done.final_submission_id == "s1"
    assert request(store, req_id).state == GradeState.done


def test_finishing_grades_its_request_whose_lease_expired(settings: Settings,
                                                          store: Store) -> None:
    """A process that died holding the run's request: finalization waits out the lease (and
    no longer), then grades the request itself, with its follow-up."""
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True).run
    req_id = queue_uncopied(store, run.id, "s1")
    assert claim(store, "a-dead-process", lease_s=2, run_id=run.id) is not None
    started = time.monotonic()
    finish_run(settings, store, run.id)
    assert 1.5 <= time.monotonic() - started < 60
    req = request(store, req_id)
    assert req.state == GradeState.failed and req.attempts == 2
    assert req.lease_owner != "a-dead-process"
    assert len(events(store, run.id, BudgetEventKind.grading)) == 1


def test_finishing_does_not_wait_for_a_dead_process_of_this_host(settings: Settings,
                                                                 store: Store) -> None:
    """The run's request leased by a process of this host that has died (a server stopped
    mid-evaluation): its long lease is not waited out, the request is graded here at once."""
    run = create_run(settings, store, task_id="arith", baseline=False, start_clock=True).run
    req_id = queue_uncopied(store, run.id, "s1")
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = f"{socket.gethostname()}:{gone.pid}:dead"
    assert owner_gone(owner) and not owner_gone(lease_owner())
    assert not owner_gone(f"another-host:{gone.pid}:x")  # never judged from here
    assert claim(store, owner, lease_s=600, run_id=run.id) is not None
    started = time.monotonic()
    finish_run(settings, store, run.id)
    assert time.monotonic() - started < 60
    req = request(store, req_id)
    assert req.state == GradeState.failed and req.attempts == 2


def test_pump_is_the_grading_hook(store: Store, settings: Settings) -> None:
    """A request through the pump is queued and graded in the background, follow-up done."""
    bare_run(store)
    with store.session() as s:
        s.add(Submission(id="s1", run_id="r1", path="output/x"))
    pump = GradingPump(settings, store, idle_poll_s=0.05)
    try:
        req_id = pump.request("r1", "s1", "dev")
        for _ in range(200):
            if events(store, "r1", BudgetEventKind.grading):
                break
            threading.Event().wait(0.05)
    finally:
        pump.stop()
    assert request(store, req_id).state == GradeState.failed
    assert len(events(store, "r1", BudgetEventKind.grading)) == 1


def test_statuses_keep_their_stored_words() -> None:
    """The enums name the words already in every store: changing one is a data migration."""
    assert list(RunStatus) == ["created", "running", "finalizing", "finished", "failed"]
    assert list(SubmissionStatus) == ["validating", "refused", "queued", "grading", "graded",
                                      "failed"]
    assert list(EvaluationStatus) == ["done", "failed"]
    assert list(GradeState) == ["queued", "leased", "done", "failed"]
    assert list(JobState) == ["running", "exited", "killed", "timeout", "lost"]
    assert list(BudgetEventKind) == ["clock_start", "grading", "exhausted", "finished",
                                     "validation", "scan_stopped"]
    assert list(AgentStatus) == ["finished", "crashed", "budget", "interrupted"]
    assert Run(id="r", task_id="t", workspace="/w", budget_s=1).status == "created"
    # the CLI's choices are the store's words
    from a2rl.cli.options import GRADING_CLOCKS, RUN_STATUSES
    assert tuple(RunStatus) == RUN_STATUSES and tuple(GradingClock) == GRADING_CLOCKS


def test_tools_reach_the_run_without_the_server(tmp_path: Path, store: Store,
                                                 settings: Settings) -> None:
    """The tools read the run's clock and call its grading hook through the shapes they
    declare (`a2rl.tools.seam`), which the server's clock and pump fill: importing the tools
    loads nothing of the server (the server imports the tools, not the other way round)."""
    code = ("import sys, a2rl.tools, a2rl.tools.runtime, a2rl.tools.budget, a2rl.tools.seam\n"
            "bad = [m for m in sys.modules if m.startswith('a2rl.server')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=120)
    bare_run(store)
    assert isinstance(RunClock(store, "r1"), RunClockView)
    pump = GradingPump(settings, store)
    assert isinstance(pump, GradingHook) and isinstance(QueueOnly(store), GradingHook)
