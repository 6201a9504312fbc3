"""The WebShop backend of the workspace's environment API (written as `env/webshop_env.py`).

Standard library only (the site itself is `env/webshop_sim.py`, the grader's own code). It
reads the catalog and the **training** goals the harness wrote under `data/webshop/`
(`products.jsonl`, `train_goals.jsonl`; dev and test goals are never written there) and which
site the grader plays (`site.json`: the original's under the `paper` profile). The search
index is built once per process, on the first episode.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import webshop_sim  # type: ignore[import-not-found]  # env/ is on sys.path (a2rl_env)

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "webshop"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=1)
def _goals() -> dict[str, dict[str, Any]]:
    return {row["id"]: row["goal"] for row in _jsonl(DATA / "train_goals.jsonl")}


@lru_cache(maxsize=1)
def catalog() -> Any:
    """The shared `webshop_sim.Catalog` (products and BM25 index), the grader's site."""
    site = DATA / "site.json"
    original = bool(json.loads(site.read_text()).get("original")) if site.is_file() else False
    return webshop_sim.Catalog(_jsonl(DATA / "products.jsonl"), original=original)


def train_ids() -> list[str]:
    return list(_goals())


def make_train_env(instance_id: str) -> Any:
    return webshop_sim.WebShopEnv(catalog(), _goals()[instance_id])
