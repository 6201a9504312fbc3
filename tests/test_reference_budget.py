"""The reference agent sizes its training to its budget: the arithmetic with fake rates and a
fake clock, and one real short run whose planned steps could never fit, submitted in time."""

from __future__ import annotations

import importlib.util
from importlib import resources
from types import ModuleType, SimpleNamespace

import pytest
from sqlmodel import select

from a2rl.clients.orchestrator import Orchestrator
from a2rl.clients.reference import RESERVE_MIN_S, stage_limit
from a2rl.store import Job, Run, RunConfig, Store, Submission

from .conftest import require_bwrap


def _timefit() -> ModuleType:
    """The workspace script as the agent writes it (it imports nothing from a2rl)."""
    path = resources.files("a2rl.clients").joinpath("reference_scripts", "timefit.py")
    spec = importlib.util.spec_from_file_location("timefit", str(path))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


timefit = _timefit()


def test_fit_steps_keeps_the_plan_when_it_fits() -> None:
    assert timefit.fit_steps(rate=20.0, seconds_left=100.0, done=12, planned=1000) == 1000


def test_fit_steps_cuts_to_what_the_rate_allows() -> None:
    # 1.5 steps/s with 200 s left after 12 steps: 12 + 300
    assert timefit.fit_steps(rate=1.5, seconds_left=200.0, done=12, planned=1000) == 312
    # nothing left: the steps taken, never fewer
    assert timefit.fit_steps(rate=1.5, seconds_left=-5.0, done=12, planned=1000) == 12
    assert timefit.fit_steps(rate=0.01, seconds_left=10.0, done=3, planned=1000, minimum=4) == 4


def test_fit_steps_without_a_rate_keeps_the_plan() -> None:
    assert timefit.fit_steps(rate=0.0, seconds_left=10.0, done=0, planned=50) == 50
    assert timefit.fit_steps(rate=float("nan"), seconds_left=10.0, done=0, planned=50) == 50


def test_threads_follow_the_idle_cores() -> None:
    assert timefit.threads_for(cpus=2, load=0.2) == 2
    assert timefit.threads_for(cpus=2, load=1.2) == 1
    assert timefit.threads_for(cpus=2, load=9.0) == 1
    assert timefit.threads_for(cpus=16, load=4.0) == 12


def test_cosine_warms_up_then_ends_at_zero() -> None:
    f = timefit.cosine(200)
    assert f(0) == 0.0 and f(5) == pytest.approx(0.5) and f(10) == pytest.approx(1.0)
    assert f(105) == pytest.approx(0.5) and f(200) == pytest.approx(0.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _steps(limit: timefit.TimeLimit, clock: _Clock, seconds_per_step: float, planned: int,
           scheduler: object = None) -> int:
    """Drive the callback as the trainer does; returns the step training stopped at."""
    state = SimpleNamespace(global_step=0, max_steps=planned)
    control = SimpleNamespace(should_training_stop=False)
    limit.on_train_begin(None, state, control)
    while state.global_step < planned and not control.should_training_stop:
        clock.now += seconds_per_step
        state.global_step += 1
        limit.on_step_end(None, state, control, lr_scheduler=scheduler)
    return state.global_step


def test_time_limit_plans_fewer_steps_from_the_measured_rate() -> None:
    import torch

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, timefit.cosine(1000))
    clock, said = _Clock(), []
    limit = timefit.TimeLimit(100.0, schedule=timefit.cosine, say=said.append, clock=clock)
    # 2 s a step: 1,000 steps would take 2,000 s; 100 s hold about 50
    stopped = _steps(limit, clock, 2.0, 1000, sched)
    assert 45 <= stopped <= 50 and limit.total == stopped and not limit.stopped_at_limit
    assert clock.now <= 100.0
    assert any("instead of 1000" in m for m in said), said
    # the schedule now decays to zero on the new last step
    assert sched.lr_lambdas[0](stopped) == pytest.approx(0.0)


def test_time_limit_keeps_a_plan_that_fits() -> None:
    clock = _Clock()
    limit = timefit.TimeLimit(100.0, say=lambda _m: None, clock=clock)
    assert _steps(limit, clock, 0.05, 1000) == 1000 and limit.total is None


def test_time_limit_stops_at_the_limit_when_the_machine_slows_down() -> None:
    clock, said = _Clock(), []
    limit = timefit.TimeLimit(30.0, say=said.append, clock=clock)
    state = SimpleNamespace(global_step=0, max_steps=1000)
    control = SimpleNamespace(should_training_stop=False)
    limit.on_train_begin(None, state, control)
    # fast during the probe (the plan stays), then 100x slower: the limit stops it
    while not control.should_training_stop:
        clock.now += 0.01 if state.global_step < 20 else 1.0
        state.global_step += 1
        limit.on_step_end(None, state, control)
    assert limit.stopped_at_limit and clock.now == pytest.approx(30.0, abs=1.0)


def test_stage_limit_keeps_a_reserve_for_grading() -> None:
    assert stage_limit(1000.0) == pytest.approx(800.0)  # a share of what is left
    assert stage_limit(100.0) == pytest.approx(100.0 - RESERVE_MIN_S)  # at least the floor
    assert stage_limit(10.0) == 0.0


@pytest.mark.timeout(400)
def test_reference_agent_submits_before_the_deadline(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    """100,000 planned steps can't fit in 90 seconds: the agent must cut them and submit.
    90 s leave the stage about 45 s after the agent's grading reserve (`RESERVE_MIN_S`, 40 s),
    more than the script's own start and save take on a loaded machine (about 30 s measured
    at load 16 on 2 cores); with one minute the stage got under 20 s, the script outlasted it,
    and the submission was still validating at the deadline."""
    require_bwrap()
    summary = Orchestrator(settings, store).run(RunConfig(
        task_id="arith", agent="reference", budget="90s",
        agent_options={"sft_args": "--steps 100000 --holdout 0", "stages": "sft"}))
    assert summary.agent_status == "finished", summary
    with store.session() as s:
        run = s.get(Run, summary.run_id)
        subs = s.exec(select(Submission).where(Submission.run_id == run.id)).all()
        jobs = s.exec(select(Job).where(Job.run_id == run.id, Job.is_background)).all()
    assert len(subs) == 1 and subs[0].status == "graded"
    assert run.deadline is not None and subs[0].created_at < run.deadline
    log = store.get_blob(jobs[0].log_blob_sha).decode()
    assert "instead of 100000" in log or "time limit: stopping" in log, log[-2000:]
