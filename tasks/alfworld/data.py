"""The ALFWorld game files, host side: where they are and which games make each split.

Files: what `alfworld-download` fetches (`a2rl alfworld download` runs it into the folder of the
setting `alfworld_dir`, default `$A2RL_HOME/data/alfworld`): `json_2.1.1/{train, valid_seen,
valid_unseen}/<task folder>/<trial>/` with `traj_data.json`, `initial_state.pddl` and
`game.tw-pddl`. The games of a split are the ones the real `AlfredTWEnv.collect_game_files`
keeps (all six task types, solvable, no movable receptacles or slicing), sorted by path:
train 3,553 games, valid_seen 140, valid_unseen 134. Splits here: train = train (visible),
dev = valid_seen, test = valid_unseen (the paper's out-of-distribution evaluation set).
"""

from __future__ import annotations

import contextlib
import io
import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from a2rl.settings import Settings

from .game import TASK_GROUPS, task_type
from .options import AlfWorldOptions

JSON_DIR = "json_2.1.1"
#: a2rl split -> ALFWorld folder (and `AlfredTWEnv`'s train_eval name).
SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train", "train"),
    "dev": ("valid_seen", "eval_in_distribution"),
    "test": ("valid_unseen", "eval_out_of_distribution"),
}
N_TRAIN, N_DEV, N_TEST = 3553, 140, 134  # the full download's games (json_2.1.1)


class GameRef(BaseModel):
    """One game: `id` is its folder under json_2.1.1 (e.g. `valid_unseen/<task>/<trial>`)."""

    id: str
    task_type: str

    @property
    def group(self) -> str:
        return TASK_GROUPS.get(self.task_type, self.task_type)


def target_dir(settings: Settings, options: AlfWorldOptions | None = None) -> Path:
    """Where the games are (or go): the task's option `data_dir` (deprecated alias
    `alfworld_dir`), default `$A2RL_HOME/data/alfworld`."""
    opts = options or AlfWorldOptions.resolve("alfworld", settings)
    return (Path(opts.data_dir).expanduser() if opts.data_dir
            else settings.home_dir / "data" / "alfworld")


def data_dir(settings: Settings, options: AlfWorldOptions | None = None) -> Path:
    """The folder holding json_2.1.1/ (a clear one-line error when the download is missing)."""
    folder = target_dir(settings, options)
    if not (folder / JSON_DIR).is_dir():
        raise RuntimeError(f"ALFWorld's game files are not in {folder}: run `a2rl alfworld "
                           "download` (or set -T data_dir= / the deprecated alfworld_dir to "
                           f"a folder holding {JSON_DIR}/)")
    return folder


def tw_config(root: Path) -> dict:
    """The part of ALFWorld's `base_config.yaml` that `AlfredTWEnv` reads to list games."""
    json_dir = root / JSON_DIR
    return {
        "dataset": {"data_path": str(json_dir / "train"),
                    "eval_id_data_path": str(json_dir / "valid_seen"),
                    "eval_ood_data_path": str(json_dir / "valid_unseen"),
                    "num_train_games": -1, "num_eval_games": -1},
        "env": {"type": "AlfredTWEnv", "task_types": [1, 2, 3, 4, 5, 6],
                "goal_desc_human_anns_prob": 0, "domain_randomization": False,
                "expert_type": "handcoded"},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }


@lru_cache(maxsize=8)
def _list(root: str, split: str) -> tuple[GameRef, ...]:
    os.environ.setdefault("ALFWORLD_DATA", root)  # alfworld.info creates it on import
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    folder, train_eval = SPLITS[split]
    quiet = io.StringIO()  # AlfredTWEnv prints its counts and a progress bar
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        env = AlfredTWEnv(tw_config(Path(root)), train_eval=train_eval)
    base = Path(root) / JSON_DIR
    refs = []
    for game_file in sorted(env.game_files):
        game_dir = Path(game_file).parent
        refs.append(GameRef(id=game_dir.relative_to(base).as_posix(),
                            task_type=task_type(game_dir)))
    if not refs:
        raise RuntimeError(f"no ALFWorld games in {base / folder} (is the download complete?)")
    return tuple(refs)


def list_games(root: Path, split: str) -> list[GameRef]:
    """The games of `split` (train, dev or test) in a stable order."""
    if split not in SPLITS:
        raise ValueError(f"ALFWorld splits are train, dev and test, not {split!r}")
    return list(_list(str(root.resolve()), split))


def game_dir(root: Path, ref: GameRef | str) -> Path:
    gid = ref.id if isinstance(ref, GameRef) else ref
    return root / JSON_DIR / gid
