"""The run in one place (`a2rl.server.run`): its clock, its grading follow-up, finalization
that grades only its own run, and the typed hook submissions go through."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.server.run import GradingPump, QueueOnly, RunClock, create_run, finish_run
from a2rl.server.run.grading import grade_next
from a2rl.settings import Settings
from a2rl.store import (
    BudgetEvent,
    BudgetEventKind,
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


def test_graded_request_gets_its_runs_follow_up(store: Store, settings: Settings) -> None:
    """Whoever grades (the pump or finalization), the grading time reaches the run's clock
    and a paused clock's deadline moves, with the hook told."""
    bare_run(store, grading_clock="paused")
    deadline = aware(RunClock(store, "r1").start().deadline)
    queue_uncopied(store, "r1", "s1")
    told: list[tuple[str, datetime]] = []
    req = grade_next(store, settings, "w", on_deadline=lambda r, d: told.append((r, d)))
    assert req is not None and req.state == GradeState.failed
    (ev,) = events(store, "r1", BudgetEventKind.grading)
    assert ev.detail["submission_id"] == "s1"
    new = RunClock(store, "r1").deadline()
    assert told == [("r1", new)]
    assert (new - deadline).total_seconds() == pytest.approx(ev.detail["seconds"], abs=0.01)  # type: ignore[operator]


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
    moved = (aware(row.deadline) - aware(mine.deadline)).total_seconds()  # type: ignore[operator]
    assert moved == pytest.approx(ev.detail["seconds"], abs=0.01)
    finish_run(settings, store, other.id)  # now it is graded, by its own finalization
    assert request(store, theirs).state == GradeState.failed


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
    assert list(BudgetEventKind) == ["clock_start", "grading", "exhausted", "finished"]
    assert Run(id="r", task_id="t", workspace="/w", budget_s=1).status == "created"
    from a2rl.cli import GRADING_CLOCKS, RUN_STATUSES  # spelled out there: the CLI starts light
    assert tuple(RunStatus) == RUN_STATUSES and tuple(GradingClock) == GRADING_CLOCKS


def test_tools_reach_the_run_without_the_server_app(tmp_path: Path) -> None:
    """The tools use the run's clock and hooks; importing them loads no MCP app (the server
    imports the tools, not the other way round)."""
    code = ("import sys, a2rl.tools, a2rl.tools.runtime\n"
            "assert 'a2rl.server.run.clock' in sys.modules\n"
            "bad = [m for m in ('a2rl.server.app', 'a2rl.server.run.lifecycle',"
            " 'a2rl.server.run.grading') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=120)


def test_finish_is_idempotent_and_closes_the_clock(settings: Settings, store: Store) -> None:
    run = create_run(settings, store, task_id="arith", baseline=False).run
    done = finish_run(settings, store, run.id, reason="test")
    again = finish_run(settings, store, run.id, reason="other")
    assert done.status == RunStatus.finished and again.end_reason == "test"
    assert [e.detail for e in events(store, run.id, BudgetEventKind.finished)] == [
        {"reason": "test"}]
    assert aware(done.ended_at) <= utcnow()  # type: ignore[operator]


def test_workspace_volume_lives_with_its_run(settings: Settings, store: Store,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """As root with loop devices: a made run's workspace is its own mount, read-only once the
    run is finished and detached by `a2rl gc`; a run that fails to be made leaves none."""
    import os

    from a2rl.tasks.arith.task import ArithTask
    from a2rl.tools.sandbox import volume

    from .conftest import require

    require(volume.unavailable_reason() is None,
            f"a workspace volume cannot be made here: {volume.unavailable_reason()}")
    run = create_run(settings, store, task_id="arith", budget="10m", baseline=False).run
    workspace = Path(run.workspace)
    assert os.path.ismount(workspace) and (workspace.parent / volume.IMAGE_NAME).is_file()
    assert not (workspace / "lost+found").exists()
    finish_run(settings, store, run.id)
    # Finished: still where it was, read-only; `a2rl gc` detaches it, the image keeps it.
    assert os.path.ismount(workspace) and os.statvfs(workspace).f_flag & os.ST_RDONLY
    assert (workspace / "TASK.md").is_file()
    from a2rl.server.gc import collect_garbage

    assert str(workspace) in collect_garbage(settings, store)["volumes_detached"]
    assert not os.path.ismount(workspace)

    def broken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError("no room for the task's data")

    monkeypatch.setattr(ArithTask, "prepare_workspace", broken)
    before = set(settings.runs_dir.iterdir())
    with pytest.raises(OSError, match="no room"):
        create_run(settings, store, task_id="arith", budget="10m", baseline=False)
    (made,) = set(settings.runs_dir.iterdir()) - before
    assert not os.path.ismount(made / "workspace")
