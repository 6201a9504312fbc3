"""One evaluation: a checkpoint, a task, a hidden split -> a score with its interval and
provenance.

The 95% interval is the Wilson score interval for a binomial proportion unless the task gives
its own (a length-controlled win rate); both come from `a2rl.stats`, and the provenance's
`ci_method` names the one used.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import a2rl
from a2rl.settings import Settings
from a2rl.stats import WILSON_METHOD, wilson_interval
from a2rl.tasks import ItemResult, Split, Task
from a2rl.tasks.interactive import InteractiveTask

from .engine import GenerationEngine
from .engine_select import build_engine, chosen_engine
from .hashing import data_hash, tree_hashes

#: Bump when scoring, prompting or generation settings of the grader change.
GRADER_VERSION = "2"  # 2: base tokenizer and task-built generation settings


class EvalResult(BaseModel):
    """What one evaluation produced (stored as an `Evaluation` row)."""

    score: float
    ci_low: float
    ci_high: float
    n_items: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    items: list[ItemResult] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)


def make_engine(task: Task, checkpoint_dir: Path, settings: Settings) -> GenerationEngine:
    """The engine `settings.grading_engine` selects (see `engine_select`), tokenizing, prompting
    (chat template) and decoding with the base model's tokenizer (see TASK.md), with generation
    settings from the task, never from the submission (`engine.greedy_config`)."""
    from transformers import AutoTokenizer

    base_dir = task.base_model_dir(settings)
    base_template = AutoTokenizer.from_pretrained(base_dir).chat_template
    grader = task.spec.grader.capped(settings.grader_max_new_tokens)
    return build_engine(chosen_engine(settings), checkpoint_dir, settings,
                        batch_size=grader.batch_size, max_new_tokens=grader.max_new_tokens,
                        chat_template=base_template, tokenizer_dir=base_dir)


def evaluate(
    task: Task,
    checkpoint_dir: Path,
    split: Split,
    settings: Settings,
    *,
    engine: GenerationEngine | None = None,
) -> EvalResult:
    """Generate on every item of the hidden `split` and score the outputs."""
    checkpoint_dir = Path(checkpoint_dir)
    started = time.monotonic()
    items = task.load_split(split, settings)
    engine = engine or make_engine(task, checkpoint_dir, settings)
    loaded = time.monotonic()
    grader = task.spec.grader.capped(settings.grader_max_new_tokens)
    if isinstance(task, InteractiveTask):  # level 3: play the instances (grading/rollout.py)
        from .rollout import run_rollouts

        scored = run_rollouts(task, items, engine, grader)
    else:
        outputs = engine.generate([task.build_prompt(it) for it in items],
                                  max_new_tokens=grader.max_new_tokens, stop=grader.stop)
        scored = task.score_outputs(items, outputs)
    low, high = scored.ci or wilson_interval(scored.n_correct, scored.n_items)
    low, high = min(low, scored.score), max(high, scored.score)  # float dust at 0 and 1
    metrics = {**scored.metrics, "load_s": round(loaded - started, 3),
               "generate_s": round(time.monotonic() - loaded, 3)}
    provenance = {
        "a2rl_version": a2rl.__version__,
        "task_id": task.spec.id,
        "profile": getattr(task, "profile", "a2rl"),
        "task_version": task.spec.version,
        "prompt_version": task.spec.prompt_version,
        "grader_version": GRADER_VERSION,
        "engine": engine.engine_name,
        "engine_version": engine.engine_version,
        "split": split,
        "data_hash": data_hash(items),
        "checkpoint_hashes": tree_hashes(checkpoint_dir),
        "generation": grader.model_dump(),
        "ci_method": WILSON_METHOD if scored.ci is None
        else str(scored.metrics.get("ci_method", "task-defined")),
    }
    return EvalResult(score=scored.score, ci_low=low, ci_high=high, n_items=scored.n_items,
                      metrics=metrics, items=scored.items, provenance=provenance)
