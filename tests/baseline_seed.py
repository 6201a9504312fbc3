"""The default task's baseline scored once per test session and copied into the stores of tests
that make runs of it through `a2rl` commands without testing the baseline's scoring; likewise
the tiny base model, built once and copied into tests' fresh homes (`seed_base_model`).

Scoring a baseline loads the base model and generates both hidden splits: seconds on a quiet
machine, tens of them on two busy cores, and each test's own store would score it again (the
cache lives in the store). The copy is what `a2rl.grading.ensure_baseline` stored, under its
own key (the base model's bytes, the grader, the engine): a command of the test finds it as it
finds any cached baseline, so the runs hold a real baseline. The scoring itself is tested where
it is the subject (tests/test_grading_baseline.py, and `a2rl demo` in tests/test_demo.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import BaselineCache, Evaluation, Store


@pytest.fixture(scope="session")
def baseline_rows(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory,
                  ) -> list[tuple[BaselineCache, Evaluation]]:
    """The default task's baseline on the session's home (its tiny base model), as stored."""
    from a2rl.grading import ensure_baseline
    from a2rl.tasks import get_task
    from a2rl.tasks.registry import DEFAULT_TASK

    folder = tmp_path_factory.mktemp("baseline-seed")
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{folder / 'seed.db'}")
    store = Store(settings.database_url)
    try:
        task = get_task(DEFAULT_TASK)
        ensure_baseline(store, task, task.base_model_dir(settings), settings)
        with store.session() as s:
            return [(cache.model_copy(), s.get(Evaluation, cache.evaluation_id).model_copy())
                    for cache in s.exec(select(BaselineCache)).all()]
    finally:
        store.close()


def seed_baseline(url: str, rows: list[tuple[BaselineCache, Evaluation]]) -> str:
    """Copy the baseline `rows` into the store at `url` (made if new); returns `url`."""
    store = Store(url)
    try:
        for cache, evaluation in rows:
            with store.session() as s:
                copy = Evaluation(**evaluation.model_dump(exclude={"id"}))
                s.add(copy)
                s.flush()
                s.add(BaselineCache(key=cache.key, split=cache.split, evaluation_id=copy.id))
    finally:
        store.close()
    return url


@pytest.fixture(scope="session")
def base_model_dir(a2rl_home: Path) -> Path:
    """The tiny base model, built once per session in the session's home."""
    from a2rl.tasks.tiny_model import ensure_base_model

    return ensure_base_model(Settings(home=a2rl_home))


def seed_base_model(home: Path, model_dir: Path) -> Path:
    """Copy the built tiny base model into the fresh `home` where an `a2rl` command of the test
    would build it again (about 5 CPU-seconds a process: torch's import, the model's
    initialisation, its save), and the session home's secret seeds that `home` lacks. The copy
    is what the session's baseline was scored on, and its hidden splits are the same items, so
    a seeded baseline's key (the model's bytes, the seed's digest) matches it. The build from a
    fresh home is still run where a user meets it: `a2rl demo` in tests/test_demo.py. Returns
    `home`."""
    dest = home / "models" / model_dir.name
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(model_dir, dest)
    seeds = model_dir.parents[1] / "secrets"  # the session's home: <home>/models/<model>
    for seed in sorted(seeds.glob("*.seed")) if seeds.is_dir() else []:
        target = home / "secrets" / seed.name
        if not target.exists():
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.copy2(seed, target)
    return home
