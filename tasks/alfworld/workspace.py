"""The train games written into a workspace (`data/alfworld/`), read-only.

Why a trimmed copy: the sandbox shows only the workspace, so the train games the agent rolls
out on must be inside it; dev (valid_seen) and test (valid_unseen) games never are. Each game
keeps its `game.tw-pddl` as downloaded (hardlinked when the sandbox guarantees read-only
mounts, else copied) and a `traj_data.json` cut to what the text game and its handcoded expert
read (`task_type`, `pddl_params`, the task id and the human goal annotations): ALFRED's full
file also lists every video frame and low-level action, which is most of the download.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from .data import JSON_DIR, GameRef, game_dir
from .game import GAME_FILE, TRAJ_FILE

TRAJ_KEYS = ("task_id", "task_type", "pddl_params", "turk_annotations")
INDEX_FILE = "train_games.jsonl"


def _clear(dest: Path) -> None:
    if not dest.exists():
        return
    for p in dest.rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    shutil.rmtree(dest)


def _place(src: Path, target: Path, link: bool) -> None:
    if link:
        try:
            os.link(src, target)
            target.chmod(0o444)
            return
        except OSError:
            pass
    shutil.copyfile(src, target)
    target.chmod(0o444)


def write_train_games(root: Path, games: Sequence[GameRef], dest: Path, *,
                      link: bool = False) -> None:
    """`dest/json_2.1.1/<id>/` per train game, and `dest/train_games.jsonl` ({id, task_type})."""
    _clear(dest)
    for ref in games:
        if not ref.id.startswith("train/"):
            raise ValueError(f"refusing to write non-train game {ref.id} into a workspace")
        src = game_dir(root, ref)
        target = dest / JSON_DIR / ref.id
        target.mkdir(parents=True, exist_ok=True)
        _place(src / GAME_FILE, target / GAME_FILE, link)
        traj = json.loads((src / TRAJ_FILE).read_text())
        (target / TRAJ_FILE).write_text(json.dumps({k: traj[k] for k in TRAJ_KEYS if k in traj}))
        (target / TRAJ_FILE).chmod(0o444)
    index = dest / INDEX_FILE
    index.write_text("".join(json.dumps(ref.model_dump()) + "\n" for ref in games))
    index.chmod(0o444)
