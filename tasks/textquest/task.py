"""The toy level-3 task `textquest`: a generated text game, graded by rollouts.

Why it exists: it exercises the whole level-3 path offline on two CPU cores (the environment
API in the workspace, online RL by the agent, rollouts by the grader) and it is built so that
imitation is not enough: the expert demonstrations only show half of the lamp colours, and
only rollouts with reward reveal where the other half lead (see `game.py`).
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from typing import Any

from a2rl.settings import Settings

from ..base import Split
from ..data_files import hidden_split
from ..envapi.a2rl_env import Env, render_prompt
from ..hidden_seed import secret_seed
from ..interactive import READONLY_PATHS, InteractiveTask, RolloutSettings
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import SecretSeed
from ..train_rows import demonstrate
from . import game

N_DEV, N_TEST = 200, 500
GRADER = GraderSettings(max_new_tokens=6, stop=["</s>"], batch_size=256)
ROLLOUT = RolloutSettings(instruction=game.INSTRUCTION, max_steps=game.N_ROOMS + 1,
                          history_window=1)


def demo_rows() -> list[dict[str, Any]]:
    """One row per expert step of every training game lit only in `DEMO_COLORS`: the prompt
    the grader would send there, the expert's action, and the chat form of the pair."""
    rows: list[dict[str, Any]] = []
    for iid in game.train_ids():
        rooms = game.train_rooms(iid)
        if any(c not in game.DEMO_COLORS for c in rooms):
            continue
        demo = demonstrate(iid, lambda r=rooms: game.Quest(r), game.expert_actions(rooms),
                           ROLLOUT)
        assert demo.solved, iid
        rows += demo.rows
    return rows


def _description(n_demo_steps: int) -> str:
    template = resources.files(__package__).joinpath("description.md").read_text()
    example = render_prompt(ROLLOUT.instruction, [(game.room_text(1, "red"), "n")],
                            game.room_text(2, "blue"), None, ROLLOUT.history_window)
    return template.format(
        n_train=game.N_TRAIN, n_dev=N_DEV, n_test=N_TEST, n_rows=n_demo_steps,
        n_rooms=game.N_ROOMS, max_steps=ROLLOUT.max_steps, example=example,
        max_new_tokens=GRADER.max_new_tokens, demo_colors=", ".join(game.DEMO_COLORS),
        n_colors=len(game.RULE))


class TextQuestTask(InteractiveTask):
    """Escape three rooms by following the lamps; see `game.py` and `description.md`."""

    rollout = ROLLOUT
    backend_name = "textquest_game"
    #: the hidden games are drawn from this home's secret seed
    data_source = SecretSeed("textquest")

    def __init__(self) -> None:
        self.spec = TaskSpec(
            id="textquest",
            level=3,
            title="Lamp maze: a text game learnt by online RL (toy)",
            description=_description(len(self._demos)),
            version=f"1.g{game.GAME_VERSION}",
            prompt_version="1",
            default_base_model="tiny-llama",
            default_budget="20m",
            toy=True,
            splits={
                "train": SplitInfo(n_items=game.N_TRAIN, visible=True,
                                   source=f"games from public seed {game.TRAIN_SEED}; expert "
                                          f"demonstrations of {len(self._demos)} steps"),
                "dev": SplitInfo(n_items=N_DEV, visible=False,
                                 source="games from the installation's secret seed"),
                "test": SplitInfo(n_items=N_TEST, visible=False,
                                  source="games from the installation's secret seed"),
            },
            grader=GRADER,
            readonly_paths=READONLY_PATHS,
        )

    @cached_property
    def _demos(self) -> list[dict[str, Any]]:
        return demo_rows()

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        return list(self._demos)

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        """Games drawn from the secret seed: `{"id", "rooms"}` per instance."""
        hidden_split(split)
        seed = secret_seed(settings, "textquest")
        n = N_DEV if split == "dev" else N_TEST
        return [{"id": f"{split}-{i:04d}", "rooms": game.rooms_for(f"{seed}:{split}:{i}")}
                for i in range(n)]

    def make_env(self, item: dict[str, Any]) -> Env:
        return game.Quest(item["rooms"])

    def episode_group(self, item: dict[str, Any]) -> str | None:
        """'demo' when every lamp is a demonstrated colour, else 'new' (the part RL must find)."""
        return "demo" if all(c in game.DEMO_COLORS for c in item["rooms"]) else "new"

    def env_backend_files(self) -> dict[str, str]:
        text = resources.files(__package__).joinpath("game.py").read_text()
        return {f"{self.backend_name}.py": text}
