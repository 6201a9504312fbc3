"""The grading queue: leases, ordering, and failures (timeout, crash) recorded as evaluations.

Each test runs on SQLite and on PostgreSQL (the `db_url` fixture, tests/pg.py), except the
worker-failure tests: what they check (how a dead or crashing grader process is recorded) does
not depend on the database, and each costs a grader process, so they run on SQLite only.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.grading import claim, enqueue, process_one
from a2rl.settings import Settings
from a2rl.store import Evaluation, GradeRequest, Run, Store, Submission

from .helpers import noisy_checkpoint_copy


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path]:
    """A grader-owned checkpoint copy (the base weights plus noise: graded, not trained)."""
    settings = Settings(home=tmp_path_factory.mktemp("home"))
    return settings, noisy_checkpoint_copy(settings, tmp_path_factory.mktemp("ws"))


SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    s = Store(db_url)
    with s.session() as sess:
        sess.add(Run(id="r1", task_id="arith", workspace=str(tmp_path), budget_s=600))
    return s


def submit(store: Store, sub_id: str, checkpoint_dir: Path | str, split: str = "dev") -> int:
    with store.session() as s:
        s.add(Submission(id=sub_id, run_id="r1", path=f"output/{sub_id}",
                         checkpoint_dir=str(checkpoint_dir)))
    return enqueue(store, "r1", sub_id, split)


def rows(store: Store, model: type) -> list:
    with store.session() as s:
        return list(s.exec(select(model).order_by(model.id)))  # type: ignore[attr-defined]


def test_claim_is_fifo_and_reclaims_expired_leases(store: Store) -> None:
    first, second = enqueue(store, "r1", "a", "dev"), enqueue(store, "r1", "b", "dev")
    got = claim(store, "w1", lease_s=-1)  # a lease that has already expired
    assert got is not None and got.id == first and got.attempts == 1
    again = claim(store, "w2", lease_s=60)
    assert again is not None and again.id == first and again.attempts == 2
    assert again.lease_owner == "w2"
    nxt = claim(store, "w3", lease_s=60)
    assert nxt is not None and nxt.id == second
    assert claim(store, "w4", lease_s=60) is None


def _claim_all(url: str, owner: str, out: multiprocessing.Queue) -> None:
    store = Store(url)
    got = []
    while (req := claim(store, owner, lease_s=600)) is not None:
        got.append(req.id)
    out.put(got)


def test_concurrent_claimers_take_each_request_once(store: Store) -> None:
    """Four processes (grader workers on several nodes) drain one queue: no request is
    claimed twice and none is left."""
    ids = [enqueue(store, "r1", f"s{i}", "dev") for i in range(60)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(store.url, f"w{n}", out)) for n in range(4)]
    for p in procs:
        p.start()
    claimed = [i for _ in procs for i in out.get(timeout=120)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(claimed) == ids
    reqs = rows(store, GradeRequest)
    assert all(r.state == "leased" and r.attempts == 1 for r in reqs)


def test_two_requests_processed_in_order(store: Store, ckpt) -> None:
    settings, copy = ckpt
    r1, r2 = submit(store, "s1", copy), submit(store, "s2", copy, split="test")
    assert process_one(store, settings, "w", timeout_s=240)
    assert process_one(store, settings, "w", timeout_s=240)
    assert not process_one(store, settings, "w", timeout_s=240)
    evs = rows(store, Evaluation)
    assert [(e.submission_id, e.split, e.status) for e in evs] == [
        ("s1", "dev", "done"), ("s2", "test", "done")]
    assert evs[0].n_items == 200 and evs[1].n_items == 500 and len(evs[0].items) == 200
    assert evs[0].ci_low is not None and evs[0].provenance["task_id"] == "arith"
    reqs = rows(store, GradeRequest)
    assert [(r.id, r.state, r.evaluation_id) for r in reqs] == [
        (r1, "done", evs[0].id), (r2, "done", evs[1].id)]
    assert {s.status for s in rows_subs(store)} == {"graded"}


def rows_subs(store: Store) -> list[Submission]:
    with store.session() as s:
        return list(s.exec(select(Submission)))


@SQLITE_ONLY
def test_killed_worker_fails_and_next_is_processed(store: Store, ckpt) -> None:
    settings, copy = ckpt
    submit(store, "slow", copy)
    submit(store, "fine", copy)
    # Not even a warm worker (prefork) loads the model and grades 200 items in 0.05 s: it is
    # killed mid-way.
    assert process_one(store, settings, "w", timeout_s=0.05)
    assert process_one(store, settings, "w", timeout_s=240)
    failed, done = rows(store, Evaluation)
    assert failed.status == "failed" and failed.score is None
    assert "timed out after 0.05s and was killed" in failed.error
    assert done.status == "done" and done.submission_id == "fine"
    subs = {s.id: s for s in rows_subs(store)}
    assert subs["slow"].status == "failed" and "timed out" in subs["slow"].error
    assert subs["fine"].status == "graded"
    assert [r.state for r in rows(store, GradeRequest)] == ["failed", "done"]


@SQLITE_ONLY
def test_crashing_worker_reports_stderr(store: Store, ckpt, tmp_path: Path) -> None:
    settings, _ = ckpt
    submit(store, "broken", tmp_path / "does-not-exist")
    assert process_one(store, settings, "w", timeout_s=240)
    (ev,) = rows(store, Evaluation)
    assert ev.status == "failed"
    assert "exited with code 1" in ev.error and "stderr tail" in ev.error
    assert "does-not-exist" in ev.error or "Error" in ev.error


@SQLITE_ONLY
def test_worker_reads_its_job_from_the_store(store: Store, ckpt, tmp_path: Path) -> None:
    """The grader is told its job as `process_one` tells it: the spec built from the stored
    request, its run and its submission (`spec_for`)."""
    from a2rl.grading import spec_for
    from a2rl.grading.evaluate import EvalResult
    from a2rl.grading.worker import main

    settings, copy = ckpt
    req_id = submit(store, "s9", copy)
    out = tmp_path / "result.json"
    with store.session() as s:
        req = s.get(GradeRequest, req_id)
        assert req is not None
        sub = s.get(Submission, req.submission_id)
        spec = spec_for(s.get(Run, req.run_id), sub.checkpoint_dir, req.split,  # type: ignore[arg-type,union-attr]
                        settings)
    assert main(["--spec", spec.model_dump_json(), "--out", str(out)]) == 0
    result = EvalResult.model_validate_json(out.read_text())
    assert result.n_items == 200 and result.provenance["split"] == "dev"
    assert rows(store, Evaluation) == []  # the worker never writes to the store


def test_worker_cannot_be_shadowed_by_the_callers_folder(
        ckpt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `a2rl/` package where the caller stands (or on PYTHONPATH) is never the grader."""
    from a2rl.grading import run_worker

    settings, copy = ckpt
    shadow = tmp_path / "checkout"
    (shadow / "a2rl" / "grading").mkdir(parents=True)
    for init in ("a2rl/__init__.py", "a2rl/grading/__init__.py"):
        (shadow / init).write_text("raise SystemExit('SHADOWED a2rl imported')\n")
    (shadow / "a2rl" / "grading" / "worker.py").write_text("raise SystemExit('SHADOWED')\n")
    monkeypatch.chdir(shadow)
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    spec = {"task_id": "no-such-task", "checkpoint_dir": str(copy), "split": "dev",
            "settings": settings.model_dump(mode="json")}
    result, error, _ = run_worker(spec, timeout_s=120)
    assert result is None and error is not None
    assert "SHADOWED" not in error and "no-such-task" in error  # our a2rl said it
