"""The baseline: the untouched base model scored on the hidden splits, computed once.

Every run needs it (the improvement is measured against it), and it only changes when the
task, the base model's bytes, the grader or the engine change; so it is cached in
`BaselineCache` under a key made of exactly those, and reused across runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, Store, utcnow
from a2rl.tasks import Split, Task

from .device_lock import device_lock
from .engine import TransformersEngine, transformers_engine_version
from .evaluate import GRADER_VERSION, evaluate
from .hashing import tree_digest, tree_hashes

SPLITS: tuple[Split, ...] = ("dev", "test")


def baseline_key(task: Task, base_dir: Path) -> str:
    parts = {
        "task": task.spec.id,
        "task_version": task.spec.version,
        "prompt_version": task.spec.prompt_version,
        "base_model": tree_digest(tree_hashes(Path(base_dir))),
        "grader_version": GRADER_VERSION,
        "engine": TransformersEngine.engine_name,
        "engine_version": transformers_engine_version(),
    }
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
    key = baseline_key(task, base_dir)
    found = _cached(store, key)
    if len(found) == len(SPLITS):
        return found
    with device_lock(settings):
        found = _cached(store, key)  # another process may have computed it meanwhile
        for split in SPLITS:
            if split in found:
                continue
            started = utcnow()
            result = evaluate(task, Path(base_dir), split, settings)
            ev = Evaluation(kind="baseline", split=split, status="done", score=result.score,
                            ci_low=result.ci_low, ci_high=result.ci_high,
                            n_items=result.n_items, metrics=result.metrics,
                            items=[it.model_dump() for it in result.items],
                            provenance={**result.provenance, "baseline_key": key},
                            started_at=started, ended_at=utcnow())
            try:
                with store.session() as s:
                    s.add(ev)
                    s.flush()
                    assert ev.id is not None
                    s.add(BaselineCache(key=key, split=split, evaluation_id=ev.id))
            except IntegrityError:  # a concurrent writer on another device won; use theirs
                pass
        return _cached(store, key)
