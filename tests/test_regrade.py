"""`a2rl regrade`'s refusals: what cannot be regraded says so in one line and changes nothing
(unknown ids, a live run, a run with no final submission, a removed copy). The regrade of a
real run is tested on the demo run (tests/test_demo.py); archives carry regrades
(tests/test_archive.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.server.run.regrade import changed_verdicts
from a2rl.store import Evaluation, Regrade, Run, Store, Submission, utcnow

A2RL = str(Path(sys.executable).parent / "a2rl")


def test_changed_verdicts_names_each_item_that_moved() -> None:
    old = [{"id": "a", "correct": True}, {"id": "b", "correct": False}, {"id": "c"}]
    new = [{"id": "a", "correct": True}, {"id": "b", "correct": True}, {"id": "d"}]
    assert changed_verdicts("final", old, new) == [
        {"evaluation": "final", "id": "b", "old": False, "new": True},
        {"evaluation": "final", "id": "c", "old": False, "new": None},
        {"evaluation": "final", "id": "d", "old": None, "new": False}]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A store with a live run, a finished run with no submission and a finished run whose
    final copy was removed."""
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        s.add(Run(id="r-live", task_id="arith", workspace="/x", budget_s=60, status="running"))
        s.add(Run(id="r-none", task_id="arith", workspace="/x", budget_s=60, status="finished",
                  ended_at=utcnow()))
        s.add(Run(id="r-gone", task_id="arith", workspace="/x", budget_s=60, status="finished",
                  ended_at=utcnow(), final_submission_id="s-gone", final_score=0.5))
        s.add(Submission(id="s-gone", run_id="r-gone", path="output/x", status="graded",
                         checkpoint_dir=str(tmp_path / "checkpoints" / "gone")))
        s.add(Evaluation(run_id="r-gone", submission_id="s-gone", split="test", score=0.5))
    store.close()
    return tmp_path


def _regrade(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"A2RL_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([A2RL, "regrade", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_what_cannot_be_regraded_says_why_in_one_line(home: Path) -> None:
    unknown = _regrade(home, "r-typo")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "a2rl: run 'r-typo' does not exist (see a2rl runs)"]
    assert _regrade(home).returncode == 2  # nothing named
    assert "not both" in _regrade(home, "r-live", "--all").stderr
    for run_id, says in (("r-live", "is still running: regrade it once it has ended"),
                         ("r-none", "has no final submission"),
                         ("r-gone", "the stored copy of its final submission s-gone was "
                                    "removed")):
        p = _regrade(home, run_id)
        assert p.returncode == 1, p.stderr
        [line] = [x for x in p.stdout.splitlines() if x.strip()]
        assert line.startswith(f"run {run_id}: not regraded:") and says in line, line
        assert "Traceback" not in p.stderr
    store = Store(f"sqlite:///{home / 'a2rl.db'}")
    with store.session() as s:
        from sqlmodel import select

        assert s.exec(select(Regrade)).all() == []  # nothing changed
        assert len(s.exec(select(Evaluation)).all()) == 1
    store.close()
    everything = _regrade(home, "--all")  # only runs with a final submission are selected
    assert everything.returncode == 1 and "r-gone" in everything.stdout
    assert "r-none" not in everything.stdout and "r-live" not in everything.stdout


def test_an_archived_regrade_keeps_both_records(tmp_path: Path) -> None:
    """A regraded run dumped and loaded into another store (whose ids differ): the regrade,
    the old and new evaluations and the replaced baseline all come over, their references
    renumbered to the target's ids."""
    from sqlmodel import select

    from a2rl.store import RunConfig
    from a2rl.store.transfer import dump_run, load_run

    src = Store(f"sqlite:///{tmp_path / 'src.db'}")
    with src.session() as s:
        old_base = Evaluation(kind="baseline", split="test", score=0.1)
        s.add(old_base)
        s.flush()
        config = RunConfig(task_id="arith")
        config.setup.baseline_evaluations = {"test": old_base.id}
        s.add(Run(id="r-re", workspace="/x", budget_s=60, status="finished", ended_at=utcnow(),
                  final_submission_id="s-re", final_score=0.6, baseline_test=0.1,
                  config=config, **config.row_values()))
        s.add(Submission(id="s-re", run_id="r-re", path="output/x", status="graded"))
        old_final = Evaluation(run_id="r-re", submission_id="s-re", split="test", score=0.5)
        s.add(old_final)
        s.flush()
        regrade = Regrade(run_id="r-re", current=True, reason="a fix", old_final_id=old_final.id,
                          old_baseline_id=old_base.id, old_final=0.5, new_final=0.6)
        s.add(regrade)
        s.flush()
        new_final = Evaluation(run_id="r-re", submission_id="s-re", split="test", score=0.6,
                               regrade_id=regrade.id)
        new_base = Evaluation(run_id="r-re", kind="baseline", split="test", score=0.1,
                              regrade_id=regrade.id)
        s.add(new_final)
        s.add(new_base)
        s.flush()
        regrade.new_final_id, regrade.new_baseline_id = new_final.id, new_base.id
        old_final.superseded_by = new_final.id
        run = s.get(Run, "r-re")
        assert run is not None
        setup = run.config.setup.model_copy(update={"baseline_evaluations": {"test": new_base.id}})
        run.config = run.config.model_copy(update={"setup": setup})
    dump = dump_run(src, "r-re")
    assert len(dump.rows["regrade"]) == 1 and len(dump.rows["evaluation"]) == 4
    dst = Store(f"sqlite:///{tmp_path / 'dst.db'}")
    with dst.session() as s:  # ids in the target start elsewhere
        for _ in range(3):
            s.add(Evaluation(kind="submission", split="dev", score=0.0))
    load_run(dst, dump)
    with dst.session() as s:
        [row] = s.exec(select(Regrade)).all()
        evs = {e.id: e for e in s.exec(select(Evaluation)).all()}
        run = s.get(Run, "r-re")
    assert run is not None and row.current and row.reason == "a fix"
    new_final, old_final = evs[row.new_final_id], evs[row.old_final_id]  # type: ignore[index]
    assert (new_final.score, old_final.score) == (0.6, 0.5)
    assert old_final.superseded_by == new_final.id and new_final.regrade_id == row.id
    assert evs[row.old_baseline_id].kind == "baseline"  # type: ignore[index]
    assert run.config.setup.baseline_evaluations["test"] == row.new_baseline_id
    src.close()
    dst.close()
