"""The ALFWorld backend of the workspace's environment API (written as `env/alfworld_env.py`).

It plays the **training** games the harness wrote under `data/alfworld/` (`train_games.jsonl`
and `json_2.1.1/train/...`) with the real ALFWorld engine of the Python environment
(`env/alfworld_game.py`, the grader's own code); dev and test games are never written there.
`make_expert_env(id)` also gives the handcoded expert's next action in
`step.info["expert_action"]` (for DAgger-style data collection). `raw=True` gives TextWorld's
text unchanged, as the `paper` profile's grader reads it (`env/alfworld_react.py`, written under
that profile, has its ReAct loop: `alfworld_react.play(ids, [lambda: make_train_env(id,
raw=True)...], [game_name(id)...], examples, generate)`, with examples of your own: the
grader's are not in the workspace, as the paper's harness does not expose them).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "alfworld"
# alfworld.info creates $ALFWORLD_DATA on import; this folder exists (and is read-only).
os.environ.setdefault("ALFWORLD_DATA", str(DATA))

import alfworld_game  # type: ignore[import-not-found]  # noqa: E402  # env/ is on sys.path


@lru_cache(maxsize=1)
def _games() -> dict[str, str]:
    """Train game id -> its task type, in the harness's order."""
    with (DATA / "train_games.jsonl").open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["id"]: row["task_type"] for row in rows}


def train_ids() -> list[str]:
    return list(_games())


def task_type(instance_id: str) -> str:
    """pick_and_place_simple, look_at_obj_in_light, pick_clean_then_place_in_recep, ..."""
    return _games()[instance_id]


def game_name(instance_id: str) -> str:
    """`<task folder>/<trial>`: the name whose prefix picks the ReAct examples."""
    return "/".join(instance_id.split("/")[-2:])


def make_train_env(instance_id: str, raw: bool = False) -> Any:
    return alfworld_game.AlfWorldEnv(DATA / "json_2.1.1" / instance_id, raw=raw)


def make_expert_env(instance_id: str, seed: int = 0, raw: bool = False) -> Any:
    """The same game with the handcoded expert's next action in `info["expert_action"]`."""
    if instance_id not in _games():
        raise ValueError(f"{instance_id!r} is not a training game")
    return alfworld_game.AlfWorldEnv(DATA / "json_2.1.1" / instance_id, expert=True, seed=seed,
                                     raw=raw)
