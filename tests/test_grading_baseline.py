"""The baseline is computed once per (task, base model, grader, engine) and then reused."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import select

from a2rl.grading import baseline_key, ensure_baseline
from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, Store
from a2rl.tasks import get_task


def test_baseline_is_cached(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    task = get_task("arith")
    base = task.base_model_dir(settings)
    first = ensure_baseline(store, task, base, settings)
    second = ensure_baseline(store, task, base, settings)
    assert set(first) == {"dev", "test"}
    assert {k: e.id for k, e in first.items()} == {k: e.id for k, e in second.items()}
    with store.session() as s:
        evs = list(s.exec(select(Evaluation)))
        cache = list(s.exec(select(BaselineCache)))
    assert len(evs) == 2 and {e.kind for e in evs} == {"baseline"}
    assert len(cache) == 2 and {c.key for c in cache} == {baseline_key(task, base, settings)}
    assert first["dev"].score is not None and first["dev"].score <= 0.05
    assert first["test"].n_items == 500
