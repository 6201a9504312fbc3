"""Model-graded answers, asked once: a SQLite cache and a cached concurrent fan-out.

Every model-graded scorer (AlpacaEval's judge and paper annotator, DeepSearchQA's correctness
judge) grades many items against one endpoint, and a re-grading of the same outputs should cost
nothing. So each keeps its successful verdicts in one SQLite file (`judge_cache_path`, under
A2RL_HOME) keyed by the sha256 of what determines the verdict (the caller's `cache_key` parts:
its prompt version, the judge model, the texts or their hashes), and asks for the rest
concurrently with `cached_map`. Errors are never cached: the next grading asks again for those
items only. Which parts make the key is the protocol's business, not this module's.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from a2rl.settings import Settings

__all__ = ["AnswerCache", "cache_key", "cached_map", "judge_cache_path", "sha256_text"]

T = TypeVar("T")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(*parts: str) -> str:
    """The sha256 of the JSON list of `parts`: unambiguous whatever the texts contain."""
    return sha256_text(json.dumps(list(parts)))


def judge_cache_path(settings: Settings) -> Path:
    return settings.home_dir / "judge-cache" / "judge.sqlite"


class AnswerCache:
    """Successful answers in one SQLite file (WAL; safe across threads and processes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS judgments (key TEXT PRIMARY KEY, "
                       "judge_model TEXT, value TEXT NOT NULL, created REAL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock, self._connect() as db:
            row = db.execute("SELECT value FROM judgments WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, judge_model: str, value: dict[str, Any]) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO judgments VALUES (?, ?, ?, ?)",
                       (key, judge_model, json.dumps(value), time.time()))


def cached_map(cache: AnswerCache | None, model: str, keys: Sequence[str | None],
               ask: Callable[[int], T], save: Callable[[T], dict[str, Any] | None],
               load: Callable[[dict[str, Any]], T], concurrency: int = 8) -> list[T]:
    """`ask(i)` for every i without a cached answer, `concurrency` at a time; results in
    input order. `keys[i]` None: never cached. `save` gives what to cache (None: nothing, as
    for errors, which are asked again next time); `load` rebuilds a result from the cache;
    `model` is recorded with each entry."""
    results: list[T | None] = [None] * len(keys)
    todo: list[int] = []
    for i, key in enumerate(keys):
        hit = cache.get(key) if cache and key is not None else None
        if hit is not None:
            results[i] = load(hit)
        else:
            todo.append(i)
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = {i: pool.submit(ask, i) for i in todo}
            for i, fut in futures.items():
                results[i] = result = fut.result()
                value = save(result)
                key = keys[i]
                if cache and key is not None and value is not None:
                    cache.put(key, model, value)
    return [r for r in results if r is not None]
