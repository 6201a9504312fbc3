"""A run pairs its scores with its own baseline evaluation, never another task's or profile's
of the same score: by the ids it records when it is made, or (runs made before it recorded
them) by score and provenance. Two tasks whose baselines score alike, the older one the other
task's, are the case that matching by score alone got wrong."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from a2rl.analysis.report import build_report
from a2rl.analysis.web.queries import list_runs
from a2rl.grading import baseline_key
from a2rl.server.run.lifecycle import create_run
from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, Run, Store
from a2rl.store.queries import baseline_evaluation
from a2rl.store.transfer import dump_run, load_run
from a2rl.tasks import get_task, register
from a2rl.tasks.registry import unregister

from .fixture_task import FixtureTask

N = 10


class OtherFixtureTask(FixtureTask):
    spec = FixtureTask.spec.model_copy(update={"id": "fixture-b"})


@pytest.fixture
def two_tasks() -> Iterator[None]:
    register("fixture-b", OtherFixtureTask)
    yield
    unregister("fixture-b")


def _items(prefix: str, correct: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "prompt": "p", "output": "o", "expected": "e",
             "correct": i < correct} for i in range(N)]


def _seed_baseline(store: Store, settings: Settings, task_id: str, prefix: str) -> int:
    """A cached baseline of `task_id` (score 0.5 on both splits, items named `prefix*`), so
    that create_run reuses it as it reuses any cached baseline; the test split's id."""
    task = get_task(task_id)
    key = baseline_key(task, task.base_model_dir(settings), settings)
    ids = {}
    with store.session() as s:
        for split in ("dev", "test"):
            ev = Evaluation(kind="baseline", split=split, score=0.5, n_items=N,
                            items=_items(prefix, N // 2),
                            provenance={"task_id": task_id, "profile": "a2rl",
                                        "baseline_key": key})
            s.add(ev)
            s.flush()
            assert ev.id is not None
            s.add(BaselineCache(key=key, split=split, evaluation_id=ev.id))
            ids[split] = ev.id
    return ids["test"]


def _finish_with_final(store: Store, run: Run, prefix: str) -> None:
    """The run's final test evaluation: 8 of its 10 items correct."""
    with store.session() as s:
        row = s.get(Run, run.id)
        assert row is not None
        s.add(Evaluation(run_id=run.id, submission_id=f"{run.id}-s", kind="submission",
                         split="test", score=0.8, n_items=N, items=_items(prefix, 8),
                         provenance={"task_id": run.task_id, "profile": "a2rl"}))
        row.final_score, row.final_submission_id = 0.8, f"{run.id}-s"
        s.add(row)


def test_each_run_pairs_with_its_own_baseline(settings: Settings, store: Store,
                                              two_tasks: None, tmp_path: Path) -> None:
    other_id = _seed_baseline(store, settings, "fixture-b", "b")  # older, the same score
    own_id = _seed_baseline(store, settings, "fixture", "f")
    run = create_run(settings, store, task_id="fixture").run
    other = create_run(settings, store, task_id="fixture-b").run
    assert run.baseline_test == other.baseline_test == 0.5
    assert run.config.setup.baseline_evaluations["test"] == own_id
    assert other.config.setup.baseline_evaluations["test"] == other_id
    with store.session() as s:
        assert baseline_evaluation(s, run, "test").id == own_id  # type: ignore[union-attr]
        assert baseline_evaluation(s, other, "test").id == other_id  # type: ignore[union-attr]
    _finish_with_final(store, run, "f")
    # the report and the viewer pair the final items with the run's own baseline items
    summary = build_report(store, run.id).summary
    assert summary.improvement is not None, summary.improvement_note
    assert summary.improvement.n_paired == N
    assert summary.improvement.estimate == pytest.approx(0.3)
    row = next(r for r in list_runs(store) if r.run_id == run.id)
    assert row.improvement is not None and row.improvement.n_paired == N
    # an export carries the recorded baseline, renumbered by the store it is loaded into
    target = Store(f"sqlite:///{tmp_path / 'target.db'}")
    _seed_baseline(target, settings, "fixture-b", "b")  # the target's ids are shifted
    with target.session() as s:
        s.add(Evaluation(kind="submission", split="dev", score=0.1))
    load_run(target, dump_run(store, run.id))
    with target.session() as s:
        moved = s.get(Run, run.id)
        assert moved is not None
        ev = baseline_evaluation(s, moved, "test")
        assert ev is not None and ev.id != own_id and ev.items[0]["id"] == "f0"
    target.close()


def test_older_runs_are_matched_by_score_and_provenance(settings: Settings, store: Store,
                                                       two_tasks: None) -> None:
    """A run made before runs recorded their baseline ids: the oldest baseline of its score
    whose provenance names its task and profile, not the other task's older one."""
    _seed_baseline(store, settings, "fixture-b", "b")
    own_id = _seed_baseline(store, settings, "fixture", "f")
    with store.session() as s:
        paper = Evaluation(kind="baseline", split="test", score=0.5, n_items=N,
                           items=_items("p", 5), provenance={"task_id": "fixture",
                                                            "profile": "paper"})
        s.add(paper)
        s.flush()
        paper_id = paper.id
    old = Run(id="r-old", task_id="fixture", workspace="w", budget_s=60, baseline_test=0.5,
              config={})
    old_paper = Run(id="r-oldp", task_id="fixture", workspace="w", budget_s=60,
                    baseline_test=0.5, profile="paper", config={})
    gone = Run(id="r-gone", task_id="fixture", workspace="w", budget_s=60, baseline_test=0.5,
               config={"setup": {"baseline_evaluations": {"test": 10_000}}})
    with store.session() as s:
        assert baseline_evaluation(s, old, "test").id == own_id  # type: ignore[union-attr]
        assert baseline_evaluation(s, old_paper, "test").id == paper_id  # type: ignore[union-attr]
        # a recorded id is authoritative: when that row is gone, no other stands in for it
        assert baseline_evaluation(s, gone, "test") is None
        assert baseline_evaluation(s, old, "dev") is None  # no dev score recorded
