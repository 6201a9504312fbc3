"""The baseline is computed once per (task, base model, grader, engine) and then reused."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import select

from a2rl.grading import baseline_key, ensure_baseline
from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, Store
from a2rl.tasks import get_task

from .baseline_seed import base_model_dir  # noqa: F401  (a fixture)


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


def test_the_key_tells_homes_with_other_secret_seeds_apart(
        tmp_path: Path, base_model_dir: Path) -> None:  # noqa: F811
    """A store shared by two homes (a fleet's database, a store copied to another machine)
    reuses a baseline only where the hidden splits are the same items: arith draws them from
    the home's secret seed, so its key holds the seed's digest (never the seed); a task whose
    data fixes its splits keeps one key whatever the home's seeds."""
    import shutil

    arith, humaneval = get_task("arith"), get_task("humaneval")
    a, b, a_copy = (Settings(home=tmp_path / name) for name in ("a", "b", "a-copy"))
    key_a = baseline_key(arith, base_model_dir, a)  # makes a's seed
    shutil.copytree(a.home_dir / "secrets", a_copy.home_dir / "secrets")
    assert baseline_key(arith, base_model_dir, a_copy) == key_a  # the same seed: reused
    assert baseline_key(arith, base_model_dir, b) != key_a
    assert [it["prompt"] for it in arith.load_split("test", a)] != [
        it["prompt"] for it in arith.load_split("test", b)]  # what the key keeps apart
    seed = (a.home_dir / "secrets" / "arith.seed").read_text().strip()
    assert seed not in key_a and seed not in arith.hidden_split_identity(a)
    assert baseline_key(humaneval, base_model_dir, a) == baseline_key(humaneval, base_model_dir, b)
