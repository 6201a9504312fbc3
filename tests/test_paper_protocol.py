"""What the reference harness does around the evaluations, read from RD-Agent's wheel
(tests/harness_wheels.py; a user without it skips, CI fails) beside ours
(docs/paper-fidelity.md, "Same or different, row by row"):

- the final score: `run.py`'s own expressions (the best of the scores file, a failed evaluation
  counted at its 0; with none, best 0 and improvement None) beside our `best_submission` on a
  real store: equal whenever one evaluation succeeded, different (kept, documented) otherwise;
- the budget the harness's agent instructions state (12 hours, 43,200 s) is every paper task's;
- what the harness exposes of ALFWorld to the agent (`eval.py` only): our paper workspace has
  its loop, not its examples (tests/test_paper_alfworld.py checks the workspace itself).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from a2rl.store import Evaluation, Run, Store, Submission
from a2rl.store.queries import best_submission
from a2rl.store.status import EvaluationKind, EvaluationStatus
from a2rl.tasks import rdagent

from .harness_wheels import require_wheel

BENCH = "rdagent/scenarios/rl/autorl_bench"


@pytest.fixture(scope="module")
def wheel() -> Path:
    return require_wheel(rdagent.RDAGENT)


def _run_py_rules(wheel: Path) -> tuple[Any, Any, Any]:
    """run.py's `best = ...` statement and the `best_score` and `improvement` values of the
    row it appends to results.csv, compiled from the wheel's source."""
    tree = ast.parse(rdagent.source_of(wheel, f"{BENCH}/run.py"))
    best = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and [getattr(t, "id", None) for t in n.targets] == ["best"])
    row = next(n for n in ast.walk(tree) if isinstance(n, ast.Dict)
               and any(getattr(k, "value", None) == "best_score" for k in n.keys))
    values = {k.value: v for k, v in zip(row.keys, row.values, strict=True)
              if isinstance(k, ast.Constant)}

    def compile_expr(node: ast.expr) -> Any:
        return compile(ast.Expression(node), "<harness run.py>", "eval")

    return compile_expr(best), compile_expr(values["best_score"]), compile_expr(
        values["improvement"])


def _server_entry(score: float | None, baseline: float) -> dict[str, Any]:
    """One scores.json entry as core/server.py writes it: a failed evaluation keeps the
    evaluator's default score 0.0 and an `error`."""
    entry: dict[str, Any] = {"score": 0.0 if score is None else score,
                             "improvement": round((score or 0.0) - baseline, 6)}
    if score is None:
        entry["error"] = "evaluation failed"
    return entry


def _ours(store: Store, run_id: str, scores: list[float | None], baseline: float) -> float:
    """Our final score under the paper protocol (server/run/finalize.py): the best done test
    evaluation, else the baseline's test score."""
    with store.session() as s:
        s.add(Run(id=run_id, task_id="arith", workspace=f"/runs/{run_id}", budget_s=60,
                  agent="ref", base_model="tiny", protocol="paper", baseline_test=baseline))
        for k, score in enumerate(scores):
            s.add(Submission(id=f"{run_id}-{k}", run_id=run_id, path=f"output/{k}",
                             status="graded"))
            s.flush()
            s.add(Evaluation(run_id=run_id, submission_id=f"{run_id}-{k}",
                             kind=EvaluationKind.submission, split="test", n_items=10,
                             score=score, status=EvaluationStatus.done if score is not None
                             else EvaluationStatus.failed, items=[]))
    best = best_submission(store, run_id, "test")
    return baseline if best is None else float(best[1].score)


CASES: list[tuple[list[float | None], float]] = [
    ([0.3, 0.5, 0.4], 0.2),
    ([None, 0.35], 0.2),
    ([0.1, None, 0.05], 0.2),   # every success below the baseline: the best still counts
    ([0.0, None], 0.2),
    ([None, None], 0.2),        # every evaluation failed
    ([], 0.2),                  # no submission
]


def test_final_score_rules_against_run_py(wheel: Path, store: Store) -> None:
    best_expr, best_score_expr, improvement_expr = _run_py_rules(wheel)
    differ = []
    for k, (scores, baseline) in enumerate(CASES):
        entries = [_server_entry(s, baseline) for s in scores]
        best = eval(best_expr, {"scores": entries, "max": max})
        theirs = eval(best_score_expr, {"best": best})
        improvement = eval(improvement_expr, {"best": best})
        ours = _ours(store, f"r{k}", scores, baseline)
        if any(s is not None for s in scores):
            assert ours == pytest.approx(theirs), scores
            assert improvement == pytest.approx(ours - baseline)
        else:
            differ.append((scores, theirs, improvement, ours))
    # kept: with no successful evaluation the harness reports 0 and no improvement; we report
    # the baseline and an improvement of 0
    assert differ == [([None, None], 0.0, pytest.approx(-0.2), 0.2), ([], 0, None, 0.2)]


def test_paper_budget_is_the_harness_instructions(wheel: Path) -> None:
    from a2rl.settings import parse_duration
    from a2rl.tasks import get_task, list_tasks

    text = rdagent.source_of(wheel, f"{BENCH}/core/instructions.md")
    stated = {int(s) for s in re.findall(r"\b(\d{4,6}) seconds", text)}
    assert stated == {43200}
    run_py = rdagent.source_of(wheel, f"{BENCH}/run.py")
    assert "timeout: int = 3600" in run_py  # the script's own default, which we do not take
    paper = [t.spec.id for t in list_tasks() if t.has_paper_profile]
    assert len(paper) == 6, paper  # the paper's six tasks
    for task_id in paper:
        assert parse_duration(get_task(task_id, "paper").spec.default_budget) == 43200, task_id


def test_alfworld_exposes_what_the_harness_does(wheel: Path) -> None:
    tree = ast.parse(rdagent.source_of(wheel, f"{BENCH}/benchmarks/__init__.py"))
    exposed: dict[str, list[str]] = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "BenchmarkConfig":
            kw = {k.arg: k.value for k in call.keywords}
            if "expose_files" in kw:
                exposed[ast.literal_eval(kw["id"])] = ast.literal_eval(kw["expose_files"])
    assert exposed["alfworld"] == ["eval.py"]  # the loop, not react_prompts.json
