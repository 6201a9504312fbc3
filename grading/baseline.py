"""The baseline: the untouched base model scored on the hidden splits, computed once.

Every run needs it (the improvement is measured against it), and it only changes when the
task, the base model's bytes, the grader or the engine change; so it is cached in
`BaselineCache` under a key made of exactly those, and reused across runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, EvaluationKind, Store, utcnow
from a2rl.store.records import evaluations
from a2rl.store.records.evaluations import NewEvaluation

from .device_lock import device_lock
from .engine import GenerationEngine
from .engine_select import chosen_engine, cuda_available, engine_identity, engine_section
from .evaluate import GRADER_VERSION, evaluate, make_engine
from .hashing import tree_digest, tree_hashes
from .recorded import scores_of
from .seam import GradedTask as Task
from .seam import Split

SPLITS: tuple[Split, ...] = ("dev", "test")


def baseline_key(task: Task, base_dir: Path, settings: Settings) -> str:
    kind = chosen_engine(settings)
    engine, engine_version = engine_identity(kind, cuda=cuda_available())
    parts = {
        "generation": task.spec.grader.capped(settings.grading.max_new_tokens).model_dump(),
        "task": task.spec.id,
        "task_version": task.spec.version,
        "prompt_version": task.spec.prompt_version,
        "base_model": tree_digest(tree_hashes(Path(base_dir))),
        "grader_version": GRADER_VERSION,
        "engine": engine,
        "engine_version": engine_version,
    }
    # A task whose hidden splits are drawn from this home's secret seed: the seed's digest
    # (only then, so that the other tasks' existing keys stay valid).
    hidden = task.hidden_split_identity(settings)
    if hidden is not None:
        parts["hidden_splits"] = hidden
    profile = getattr(task, "profile", "a2rl")
    if profile != "a2rl":  # only then: the a2rl profile's existing cache keys stay valid
        parts["profile"] = profile
    # Options that change what is scored (a data folder, a reference file): only those set
    # away from their defaults, so that existing keys stay valid. The base model is in the
    # key already, by its bytes.
    changed = {k: v for k, v in task.options_record(settings).items()
               if k != "base_model" and v != task.options_defaults().get(k)}
    if changed:
        parts["task_options"] = changed
    # An engine with settings of its own (`[grading.<engine>]`) may generate otherwise under
    # others: its section, whole (only then: the built-in engines have none, their keys stay)
    if (own := engine_section(kind)) is not None:
        parts["engine_settings"] = settings.grading.section(own).model_dump(mode="json")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _cached(store: Store, key: str) -> dict[str, Evaluation]:
    found: dict[str, Evaluation] = {}
    with store.session() as s:
        for split in SPLITS:
            row = s.get(BaselineCache, (key, split))
            if row is not None and (ev := s.get(Evaluation, row.evaluation_id)) is not None:
                found[split] = ev
    return found


def ensure_baseline(
    store: Store, task: Task, base_dir: Path, settings: Settings
) -> dict[str, Evaluation]:
    """The baseline `Evaluation` of each hidden split, computing the missing ones."""
    key = baseline_key(task, base_dir, settings)
    found = _cached(store, key)
    if len(found) == len(SPLITS):
        return found
    with device_lock(settings):
        found = _cached(store, key)  # another process may have computed it meanwhile
        missing = [split for split in SPLITS if split not in found]
        if not missing:
            return found
        # One engine for the missing splits, closed at the end: this runs in the caller's
        # process (not a grading worker), which must give the device memory back.
        engine = make_engine(task, Path(base_dir), settings)
        try:
            for split in missing:
                _evaluate_split(store, task, Path(base_dir), settings, key, split, engine)
        finally:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        return _cached(store, key)


def _evaluate_split(store: Store, task: Task, base_dir: Path, settings: Settings, key: str,
                    split: Split, engine: GenerationEngine) -> None:
    started = utcnow()
    result = evaluate(task, base_dir, split, settings, engine=engine)
    scores = scores_of(result)
    evaluations.record_baseline(store, key, NewEvaluation(
        split=split, kind=EvaluationKind.baseline, started_at=started, ended_at=utcnow(),
        scores=replace(scores, provenance={**scores.provenance, "baseline_key": key})))
