"""Evaluation: the base model scores near zero; intervals, provenance and stop handling."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from a2rl.grading import cut_at_stop, evaluate, wilson_interval
from a2rl.grading.engine import Prompt
from a2rl.settings import Settings
from a2rl.stats import WILSON_METHOD
from a2rl.tasks import get_task


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("home"))


def test_base_model_scores_near_zero(settings: Settings) -> None:
    task = get_task("arith")
    base = task.base_model_dir(settings)
    res = evaluate(task, base, "dev", settings)
    assert res.n_items == 200 and len(res.items) == 200
    assert res.score <= 0.05
    assert res.ci_low <= res.score <= res.ci_high
    prov = res.provenance
    for key in ("a2rl_version", "task_id", "task_version", "prompt_version", "grader_version",
                "engine", "engine_version", "data_hash", "checkpoint_hashes"):
        assert prov[key], key
    assert "model.safetensors" in prov["checkpoint_hashes"]
    assert prov["ci_method"] == WILSON_METHOD
    item = res.items[0]
    assert item.id.startswith("dev-") and item.expected and item.prompt


class PerfectEngine:
    """An engine that answers every arith prompt correctly (tests the scoring path)."""

    engine_name = "perfect"
    engine_version = "0"

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        out = []
        for p in prompts:
            a, b = p[-1]["content"].split("+")  # type: ignore[index]
            out.append(f"{int(a) + int(b)}</s>junk")
        return [cut_at_stop(o, stop) for o in out]


def test_engine_seam_and_perfect_score(settings: Settings) -> None:
    task = get_task("arith")
    res = evaluate(task, Path(task.base_model_dir(settings)), "test", settings,
                   engine=PerfectEngine())
    assert res.score == 1.0 and res.n_items == 500 and res.ci_high == 1.0
    assert res.ci_low > 0.99
    assert res.provenance["engine"] == "perfect"


def test_wilson_interval() -> None:
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)
    assert wilson_interval(0, 200)[0] == 0.0 and wilson_interval(200, 200)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_cut_at_stop() -> None:
    assert cut_at_stop("12</s>34", ["</s>"]) == "12"
    assert cut_at_stop("12\n3", ["\n", "2"]) == "1"
    assert cut_at_stop("12", []) == "12"
