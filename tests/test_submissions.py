"""submit_checkpoint and get_score through a real MCP client, grading and finalization."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from sqlalchemy import func
from sqlmodel import select

from a2rl.server import build_server, create_run, finish_run
from a2rl.store import Evaluation, Run, Store, Submission, aware

from .conftest import require_bwrap
from .helpers import last_call, text_of
from .test_grading_checks import save_perturbed

pytestmark = [pytest.mark.timeout(300), pytest.mark.anyio]


def make_run(settings, store, **kw) -> Run:  # type: ignore[no-untyped-def]
    require_bwrap()
    return create_run(settings, store, task_id="arith", budget="30m", **kw).run


async def connect(settings, store, run: Run) -> AsyncIterator[Client]:  # type: ignore[no-untyped-def]
    return Client(build_server(settings, store, run_id=run.id, transport="memory"),
                  mode="legacy")


async def submit_and_wait(c: Client, path: str) -> dict:
    r = await c.call_tool("submit_checkpoint", {"path": path})
    assert not r.is_error, text_of(r)
    sid = r.structured_content["submission_id"]
    for _ in range(20):
        s = (await c.call_tool("get_score", {"submission_id": sid, "wait_s": 30}))
        if s.structured_content["status"] not in ("queued", "grading"):
            return s.structured_content
    raise AssertionError("grading never finished")


async def test_refusals_are_immediate_and_recorded(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    run = make_run(settings, store)
    ws = Path(run.workspace)
    shutil.copytree(ws / "base_model", ws / "output" / "copy")
    (ws / "output" / "lora").mkdir()
    (ws / "output" / "lora" / "adapter_config.json").write_text("{}")
    (ws / "output" / "lora" / "adapter_model.safetensors").write_bytes(b"x")
    cases = {"output/copy": "train before submitting", "output/lora": "merge",
             "code": "output", "output/missing": "does not exist"}
    async with await connect(settings, store, run) as c:
        for path, expect in cases.items():
            r = await c.call_tool("submit_checkpoint", {"path": path})
            assert r.is_error and expect in text_of(r), (path, text_of(r))
            assert expect in last_call(store, run.id).error
        r = await c.call_tool("budget_status", {})
        assert r.structured_content["submissions_used"] == 0
    with store.session() as s:
        subs = s.exec(select(Submission).where(Submission.run_id == run.id)).all()
    assert sorted(x.path for x in subs) == sorted(cases)
    assert all(x.status == "refused" and x.error for x in subs)
    finish_run(settings, store, run.id)


async def test_graded_from_the_copy_and_heldout_hides_test(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    run = make_run(settings, store, max_submissions=2)
    ws = Path(run.workspace)
    base = ws / "base_model"
    save_perturbed(base, ws / "output" / "a", 0.3)
    save_perturbed(base, ws / "output" / "b", 0.6)
    async with await connect(settings, store, run) as c:
        await c.call_tool("edit_file", {"path": "code/train.py", "new_text": "print(1)\n"})
        r1 = await c.call_tool("submit_checkpoint", {"path": "output/a"})
        r2 = await c.call_tool("submit_checkpoint", {"path": "output/b", "note": "second"})
        first, second = (r.structured_content["submission_id"] for r in (r1, r2))
        shutil.rmtree(ws / "output" / "a")  # deleting after submitting changes nothing
        shutil.copytree(base, ws / "output" / "b", dirs_exist_ok=True)
        s1 = await c.call_tool("get_score", {"submission_id": first, "wait_s": 60})
        s2 = await c.call_tool("get_score", {"submission_id": second, "wait_s": 60})
        assert s1.structured_content["status"] == "graded", s1.structured_content
        assert s2.structured_content["status"] == "graded", s2.structured_content
        assert s1.structured_content["split"] == "dev"
        assert "items" not in s1.structured_content
        r3 = await c.call_tool("submit_checkpoint", {"path": "output/b"})
        assert r3.is_error and "submission limit" in text_of(r3)
        best = (await c.call_tool("get_score", {})).structured_content
        assert best["best_submission_id"] in (first, second)
    with store.session() as s:
        evs = s.exec(select(Evaluation).where(Evaluation.run_id == run.id)
                     .order_by(Evaluation.id)).all()
        subs = {x.id: x for x in s.exec(select(Submission).where(
            Submission.run_id == run.id)).all()}
    assert [e.submission_id for e in evs] == [first, second]  # graded in order
    assert {e.split for e in evs} == {"dev"}  # no test score before the end
    assert subs[first].snapshot_id and subs[first].file_hashes
    assert all(len(e.items) == e.n_items == 200 for e in evs)
    prov = evs[0].provenance
    assert prov["checkpoint_hashes"] == subs[first].file_hashes  # the copy, hashed at submit
    assert {"a2rl_version", "task_version", "engine", "data_hash"} <= set(prov)
    for _ in range(50):  # the pump drops the losing copy right after grading
        alive = [x for x in subs.values() if Path(x.checkpoint_dir).exists()]
        if len(alive) == 1:
            break
        time.sleep(0.1)
    assert [x.id for x in alive] == [best["best_submission_id"]]
    done = finish_run(settings, store, run.id)
    with store.session() as s:
        tests = s.exec(select(Evaluation).where(Evaluation.run_id == run.id,
                                                Evaluation.split == "test")).all()
    assert len(tests) == 1 and tests[0].submission_id == best["best_submission_id"]
    assert done.final_submission_id == best["best_submission_id"]
    assert done.final_score == tests[0].score
    kept = [x for x in subs.values() if Path(x.checkpoint_dir).exists()]
    assert [x.id for x in kept] == [done.final_submission_id]


async def test_identical_resubmission_gets_the_earlier(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    """Same files (by the copy's hashes) as an earlier submission: its id and status, not
    graded again, not counted; changed files, even under the same path, are a new one."""
    run = make_run(settings, store, max_submissions=2, baseline=False)
    ws = Path(run.workspace)
    base = ws / "base_model"
    save_perturbed(base, ws / "output" / "a", 0.3)
    async with await connect(settings, store, run) as c:
        r1 = await c.call_tool("submit_checkpoint", {"path": "output/a"})
        assert not r1.is_error and r1.structured_content["resubmission"] is False
        first = r1.structured_content["submission_id"]
        s1 = await c.call_tool("get_score", {"submission_id": first, "wait_s": 60})
        assert s1.structured_content["status"] == "graded", s1.structured_content
        r2 = await c.call_tool("submit_checkpoint", {"path": "output/a", "note": "again"})
        assert not r2.is_error, text_of(r2)
        again = r2.structured_content
        assert again["submission_id"] == first and again["resubmission"] is True
        assert again["status"] == "graded" and first in again["warning"]
        summary = json.loads(last_call(store, run.id).result_summary)
        assert summary["submission_id"] == first and summary["resubmission"] is True
        # the same path with other files: the copy's hashes differ, a new submission
        shutil.rmtree(ws / "output" / "a")
        save_perturbed(base, ws / "output" / "a", 0.6)
        r3 = await c.call_tool("submit_checkpoint", {"path": "output/a"})
        third = r3.structured_content["submission_id"]
        assert third != first and r3.structured_content["resubmission"] is False
        used = (await c.call_tool("budget_status", {})).structured_content["submissions_used"]
        assert used == 2
        # the same files under another path, at the limit: still answered with the earlier
        shutil.copytree(ws / "output" / "a", ws / "output" / "c")
        r4 = await c.call_tool("submit_checkpoint", {"path": "output/c"})
        assert not r4.is_error, text_of(r4)
        assert r4.structured_content["submission_id"] == third
        assert r4.structured_content["resubmission"] is True
        # other files at the limit: the limit's refusal
        save_perturbed(base, ws / "output" / "d", 0.9)
        r5 = await c.call_tool("submit_checkpoint", {"path": "output/d"})
        assert r5.is_error and "submission limit reached" in text_of(r5)
        await c.call_tool("get_score", {"submission_id": third, "wait_s": 60})
    with store.session() as s:
        subs = s.exec(select(Submission).where(Submission.run_id == run.id)).all()
        evs = s.exec(select(Evaluation).where(Evaluation.run_id == run.id)).all()
    assert sorted(x.id for x in subs) == sorted([first, third])
    assert sorted(e.submission_id for e in evs) == sorted([first, third])  # none graded twice
    copies = {p.name for p in (settings.home_dir / "checkpoints" / run.id).iterdir()}
    assert copies <= {first, third}  # the resubmissions' copies are gone
    finish_run(settings, store, run.id)


async def test_no_valid_submission_finalizes_at_baseline(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    run = make_run(settings, store)
    done = finish_run(settings, store, run.id)
    assert done.final_score == run.baseline_test and done.final_submission_id is None
    assert done.status == "finished"


async def test_paper_protocol_scores_on_test(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    run = make_run(settings, store, protocol="paper")
    ws = Path(run.workspace)
    save_perturbed(ws / "base_model", ws / "output" / "a", 0.3)
    async with await connect(settings, store, run) as c:
        score = await submit_and_wait(c, "output/a")
    assert score["split"] == "test" and score["baseline"] == run.baseline_test
    done = finish_run(settings, store, run.id)
    assert done.final_score == score["score"]


def test_baseline_is_computed_once_for_two_runs(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    a, b = make_run(settings, store), make_run(settings, store)
    with store.session() as s:
        n = s.exec(select(func.count()).select_from(Evaluation).where(
            Evaluation.kind == "baseline")).one()
    assert n == 2  # dev and test, once
    assert (a.baseline_dev, a.baseline_test) == (b.baseline_dev, b.baseline_test)
    for r in (a, b):
        finish_run(settings, store, r.id)


@pytest.mark.parametrize("clock", ["counted", "paused"])
async def test_grading_clock(settings, store: Store, clock: str) -> None:  # type: ignore[no-untyped-def]
    run = make_run(settings, store, grading_clock=clock, start_clock=True)
    ws = Path(run.workspace)
    save_perturbed(ws / "base_model", ws / "output" / "a", 0.3)
    async with await connect(settings, store, run) as c:
        # a job, so the run has a sandbox (and a cgroup) whose jobs a paused clock freezes
        r = await c.call_tool("run_command", {"command": "sleep 120", "wait_s": 0})
        assert not r.is_error, r
        await submit_and_wait(c, "output/a")
        for _ in range(50):  # the pump records grading time right after the score
            budget = (await c.call_tool("budget_status", {})).structured_content
            if budget["grading_s"] > 0:
                break
            time.sleep(0.1)
    assert budget["grading_s"] > 0
    with store.session() as s:
        moved = (aware(s.get(Run, run.id).deadline) - aware(run.deadline)).total_seconds()
    if clock == "paused":  # the time the jobs were frozen, about the evaluation's
        assert budget["grading_pause_cap_s"] == 0.25 * 30 * 60
        assert moved == pytest.approx(budget["grading_pause_credit_s"], abs=0.01)
        assert budget["grading_pause_credit_s"] == pytest.approx(budget["grading_s"], abs=1.0)
    else:
        assert moved == 0 and budget["grading_pause_credit_s"] == 0
    finish_run(settings, store, run.id)
