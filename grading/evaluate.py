"""One evaluation: a checkpoint, a task, a hidden split -> a score with its interval and
provenance.

How the items are played and scored is the task's strategy (`GradedTask.evaluate`, in
`seam`): generate then score for most tasks, rollouts for interactive ones. This module only
loads the split, builds the engine and records what was done; it never asks what kind of task
it holds. The 95% interval is the task's (`TaskScore.interval`: Wilson's for a share of
correct items, or the task's own, named by `ci_method`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import a2rl
from a2rl.settings import Settings

from .hashing import data_hash, tree_hashes
from .seam import GenerationEngine, GradedTask, ItemResult, Split

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


def generation_settings(task: GradedTask, settings: Settings,
                        frozen: dict[str, Any] | None = None) -> Any:
    """How the grader generates for `task`: the run's frozen generation settings when given
    (`RunConfig.evaluation.generation`), else the task's own capped by
    `grading.max_new_tokens`; never the submission's."""
    if frozen:
        return type(task.spec.grader).model_validate(frozen)
    return task.spec.grader.capped(settings.grading.max_new_tokens)


def make_engine(task: GradedTask, checkpoint_dir: Path, settings: Settings,
                generation: dict[str, Any] | None = None) -> GenerationEngine:
    """The engine `settings.grading.engine` selects (see `engine_select`), tokenizing, prompting
    (chat template) and decoding with the base model's tokenizer (see TASK.md), with generation
    settings from the task or the run's frozen config, never from the submission
    (`engine.greedy_config`)."""
    from transformers import AutoTokenizer

    from .engine_select import build_engine, chosen_engine

    base_dir = task.base_model_dir(settings)
    base_template = AutoTokenizer.from_pretrained(base_dir).chat_template
    grader = generation_settings(task, settings, generation)
    return build_engine(chosen_engine(settings), checkpoint_dir, settings,
                        batch_size=grader.batch_size, max_new_tokens=grader.max_new_tokens,
                        chat_template=base_template, tokenizer_dir=base_dir)


def evaluate(
    task: GradedTask,
    checkpoint_dir: Path,
    split: Split,
    settings: Settings,
    *,
    engine: GenerationEngine | None = None,
    generation: dict[str, Any] | None = None,
) -> EvalResult:
    """Score the checkpoint on every item of the hidden `split`, the task's way, generating
    with `generation` (a run's frozen settings) when given, else the task's."""
    checkpoint_dir = Path(checkpoint_dir)
    started = time.monotonic()
    items = task.load_split(split, settings)
    engine = engine or make_engine(task, checkpoint_dir, settings, generation)
    loaded = time.monotonic()
    grader = generation_settings(task, settings, generation)
    scored = task.evaluate(items, engine, grader)
    low, high = scored.interval()
    metrics = {**scored.metrics, "load_s": round(loaded - started, 3),
               "generate_s": round(time.monotonic() - loaded, 3)}
    provenance = {
        "a2rl_version": a2rl.__version__,
        "task_id": task.spec.id,
        "profile": task.profile,
        "task_version": task.spec.version,
        "prompt_version": task.spec.prompt_version,
        "task_options": task.options_record(settings),
        "grader_version": GRADER_VERSION,
        "engine": engine.engine_name,
        "engine_version": engine.engine_version,
        "split": split,
        "data_hash": data_hash(items),
        "checkpoint_hashes": tree_hashes(checkpoint_dir),
        "generation": grader.model_dump(),
        "max_new_tokens_cap": settings.grading.max_new_tokens,
        "ci_method": scored.ci_method,
    }
    evaluated_as = getattr(task, "evaluated_as", task.profile)
    if evaluated_as != task.profile:  # a toy under paper: the a2rl evaluation, said so
        provenance["evaluated_as"] = evaluated_as
    return EvalResult(score=scored.score, ci_low=low, ci_high=high, n_items=scored.n_items,
                      metrics=metrics, items=scored.items, provenance=provenance)
