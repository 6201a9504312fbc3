"""`a2rl demo` and `a2rl run`: a run that produced no score exits 1 and says why."""

from __future__ import annotations

import time

import pytest
import typer

from a2rl.cli.lifecycle import exit_on_grading_failure
from a2rl.clients.orchestrator import Orchestrator
from a2rl.settings import Settings
from a2rl.store import Run, Store, Submission


def test_grading_failures_are_summarized_and_fail_the_command(
        settings: Settings, store: Store, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    with store.session() as s:
        s.add(Run(id="r-x", task_id="arith", workspace=str(tmp_path), budget_s=60))
        for i in range(3):
            s.add(Submission(id=f"s-{i}", run_id="r-x", path="output/a", status="failed",
                             error="the evaluation process exited with code 1; stderr tail:\n"
                                   "Traceback ..."))
        s.add(Submission(id="s-ok", run_id="r-x", path="output/b", status="refused",
                         error="train before submitting"))
    summary = Orchestrator(settings, store).summary("r-x", time.monotonic())
    assert summary.final_score is None and summary.submissions_failed == 3
    assert summary.grading_errors == ["the evaluation process exited with code 1; stderr tail:"]
    with pytest.raises(typer.Exit) as exc:
        exit_on_grading_failure(summary)
    assert exc.value.exit_code == 1
    err = capsys.readouterr().err
    assert "grading failed: the evaluation process exited with code 1" in err
    assert "produced no score (3 submissions failed grading)" in err
    exit_on_grading_failure(summary.model_copy(update={"final_score": 0.5}))  # a score: no exit
