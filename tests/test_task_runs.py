"""`a2rl run` of the paper's tasks with the reference agent on the tiny model, on fixtures.

HumanEval (512 new tokens) and AlpacaEval (1,024) would spend about ten minutes per run
generating on two CPU cores, so their runs cap generation with the setting
`grader_max_new_tokens`; the cap is recorded in every evaluation's provenance, which the tests
check. What these runs show is the whole path (workspace, baseline, training, grading through
the real executor or a judge over HTTP, finalization), not a score.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.store import Evaluation, Run, Store

from .baseline_seed import base_model_dir, seed_base_model  # noqa: F401  (a fixture)
from .conftest import require_bwrap

A2RL = str(Path(sys.executable).parent / "a2rl")
FIXTURES = Path(__file__).parent / "fixtures"
# SFT as short as the runs below (its score is not under test: GRPO's path on top of it is)
QUICK = ["--agent-option", "sft_args=--steps 5 --holdout 0 --batch 4 --max-length 768",
         "--agent-option", "grpo_args=--steps 1 --prompts 2 --generations 2"]


def _run(tmp_path: Path, model_dir: Path, task: str, quick: list[str] = QUICK, **env: str
         ) -> tuple[dict, Store]:
    require_bwrap()
    seed_base_model(tmp_path, model_dir)
    full = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    full.update(A2RL_HOME=str(tmp_path), A2RL_BASE_MODEL="tiny-llama", **env)
    p = subprocess.run([A2RL, "run", "--task", task, "--agent", "reference", "--budget", "15m",
                        *quick, "--json"], env=full, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), Store(f"sqlite:///{tmp_path / 'a2rl.db'}")


def _check(summary: dict, store: Store, submissions: int = 2) -> None:
    from sqlmodel import select

    assert summary["agent_status"] == "finished" and summary["submissions"] == submissions
    with store.session() as s:
        run = s.get(Run, summary["run_id"])
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == run.id)).all()
    assert run.status == "finished" and run.final_score is not None
    assert run.base_model == "tiny-llama"  # the model actually used, not the task's default
    assert {e.split for e in evals} == {"dev", "test"}  # feedback, then the final score
    assert all(e.n_items > 0 for e in evals), [(e.split, e.n_items) for e in evals]
    assert all(e.status == "done" and e.ci_low <= e.score <= e.ci_high for e in evals), [
        (e.split, e.status, e.error, e.score, e.ci_low, e.ci_high) for e in evals]


@pytest.mark.timeout(900)
def test_gsm8k_run(tmp_path: Path, base_model_dir: Path) -> None:  # noqa: F811
    summary, store = _run(tmp_path, base_model_dir, "gsm8k", A2RL_GSM8K_DIR=str(FIXTURES / "gsm8k"))
    _check(summary, store, submissions=_new_submissions(store, summary["run_id"]))


def _new_submissions(store: Store, run_id: str) -> int:
    """SFT, then GRPO: two submits. One GRPO step on two prompts often scores every
    generation alike (no advantage, no update), so its checkpoint can hold SFT's very bytes;
    the server then answers with SFT's submission and does not count it again."""
    from sqlmodel import select

    from a2rl.store import ToolCall

    with store.session() as s:
        calls = s.exec(select(ToolCall).where(ToolCall.run_id == run_id,
                                              ToolCall.tool == "submit_checkpoint")).all()
    assert len(calls) == 2 and not any(c.is_error for c in calls), calls
    second = json.loads(calls[-1].result_summary)
    return 1 if second["resubmission"] else 2


# one SFT submission: GRPO's path is the same as GSM8K's run above
SHORT = ["--agent-option", "sft_args=--steps 5 --holdout 0 --batch 4 --max-length 768",
         "--agent-option", "stages=sft"]


def _capped(store: Store, summary: dict, cap: int) -> list[Evaluation]:
    from sqlmodel import select

    with store.session() as s:
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == summary["run_id"])).all()
    assert evals and all(e.provenance["generation"]["max_new_tokens"] == cap for e in evals)
    return list(evals)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_humaneval_run(tmp_path: Path, base_model_dir: Path) -> None:  # noqa: F811
    summary, store = _run(tmp_path, base_model_dir, "humaneval", SHORT,
                          A2RL_GRADING__MAX_NEW_TOKENS="24")
    _check(summary, store, submissions=1)
    evals = _capped(store, summary, 24)
    test = next(e for e in evals if e.split == "test")
    # every completion went through the executor: each item has an execution status
    assert test.n_items == 82 and sum(test.metrics["status_counts"].values()) == 82


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_alpacaeval_run(tmp_path: Path, base_model_dir: Path) -> None:  # noqa: F811
    from .fake_judge import FakeJudge

    with FakeJudge() as judge:
        summary, store = _run(
            tmp_path, base_model_dir, "alpacaeval", SHORT, A2RL_GRADING__MAX_NEW_TOKENS="16",
            A2RL_ALPACAEVAL_DIR=str(FIXTURES / "alpacaeval"), A2RL_JUDGE__BASE_URL=judge.base_url,
            A2RL_JUDGE__MODEL="fake-judge", A2RL_JUDGE__MAX_RETRIES="0")
    _check(summary, store, submissions=1)
    evals = _capped(store, summary, 16)
    # the judge was asked over HTTP for every submission's items (baseline: cached per home)
    assert judge.requests and all(r["model"] == "fake-judge" for r in judge.requests)
    assert all(e.metrics["judge"]["model"] == "fake-judge" for e in evals)
