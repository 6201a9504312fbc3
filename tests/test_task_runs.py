"""`a2rl run` of the paper's tasks with the reference agent on the tiny model, on fixtures.

AlpacaEval is left out: its 1,024-token generations take about ten minutes on two CPU cores
for one run's baseline and evaluations; its scoring is tested through `evaluate` instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.store import Evaluation, Run, Store

from .conftest import require_bwrap

A2RL = str(Path(sys.executable).parent / "a2rl")
FIXTURES = Path(__file__).parent / "fixtures"
QUICK = ["--agent-option", "sft_args=--steps 20 --holdout 0 --batch 8 --max-length 1024",
         "--agent-option", "grpo_args=--steps 1 --prompts 2 --generations 2"]


def _run(tmp_path: Path, task: str, **env: str) -> tuple[dict, Store]:
    require_bwrap()
    full = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    full.update(A2RL_HOME=str(tmp_path), A2RL_BASE_MODEL="tiny-llama", **env)
    p = subprocess.run([A2RL, "run", "--task", task, "--agent", "reference", "--budget", "15m",
                        *QUICK, "--json"], env=full, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), Store(f"sqlite:///{tmp_path / 'a2rl.db'}")


def _check(summary: dict, store: Store) -> None:
    from sqlmodel import select

    assert summary["agent_status"] == "finished" and summary["submissions"] == 2
    with store.session() as s:
        run = s.get(Run, summary["run_id"])
        evals = s.exec(select(Evaluation).where(Evaluation.run_id == run.id)).all()
    assert run.status == "finished" and run.final_score is not None
    assert run.base_model == "tiny-llama"  # the model actually used, not the task's default
    assert {e.split for e in evals} == {"dev", "test"}  # feedback, then the final score
    assert all(e.status == "done" and e.ci_low <= e.score <= e.ci_high for e in evals), [
        (e.split, e.status, e.error, e.score, e.ci_low, e.ci_high) for e in evals]


@pytest.mark.timeout(900)
def test_gsm8k_run(tmp_path: Path) -> None:
    summary, store = _run(tmp_path, "gsm8k", A2RL_GSM8K_DIR=str(FIXTURES / "gsm8k"))
    _check(summary, store)
