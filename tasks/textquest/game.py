"""The textquest game: escape a row of rooms by taking the exit each lamp's colour points to.

Standard library only, and no package-relative imports: this file is also written into the
workspace as `env/textquest_game.py`, the backend of `env/a2rl_env.py` (docs/level3.md).

Why this game: the colour -> exit rule is fixed but arbitrary, and the expert demonstrations
(`data/train.jsonl`) only show games lit in `DEMO_COLORS`. Supervised fine-tuning on them
cannot tell the model where the other four colours lead; the reward of online rollouts can.
A wrong or unknown action ends the episode (a trap), so success needs every room right; each
room passed is worth 1/N_ROOMS of reward, so partial progress is visible to RL.
The game is small on purpose: prompts stay under 100 characters for the character-level
tiny model.
"""

from __future__ import annotations

import random
from typing import Any

try:  # inside the workspace: env/a2rl_env.py is a sibling module
    from a2rl_env import Step  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Step

#: Bump when the rule, the texts or the instance generation change.
GAME_VERSION = 1
#: Public seed of the training instances.
TRAIN_SEED = 20260307
N_TRAIN = 2000
N_ROOMS = 3
#: Exits, each written as its initial (the demonstrations' form) or in full.
DIRECTIONS = {"n": "north", "e": "east", "s": "south", "w": "west"}
#: The fixed rule (colour -> exit initial). Demonstrations only show the first four colours.
RULE: dict[str, str] = {
    "red": "n", "blue": "e", "green": "s", "white": "w",
    "pink": "e", "gray": "w", "black": "n", "brown": "s",
}
DEMO_COLORS = ("red", "blue", "green", "white")
INSTRUCTION = "Escape the maze."


def rooms_for(seed: str) -> list[str]:
    """The lamp colours of one game, a deterministic function of its seed string."""
    rng = random.Random(seed)
    colors = sorted(RULE)
    return [rng.choice(colors) for _ in range(N_ROOMS)]


def room_text(k: int, color: str) -> str:
    return f"Room {k}/{N_ROOMS}: a {color} lamp."


class Quest:
    """One game (an `a2rl_env.Env`): `rooms[k]` is the lamp colour of room k+1."""

    def __init__(self, rooms: list[str]) -> None:
        if not rooms or any(c not in RULE for c in rooms):
            raise ValueError(f"bad rooms {rooms!r}")
        self.rooms, self.k, self.over = list(rooms), 0, True

    def reset(self) -> Step:
        self.k, self.over = 0, False
        return Step(room_text(1, self.rooms[0]), admissible=None)

    def step(self, action: str) -> Step:
        if self.over:
            raise RuntimeError("the episode is over: call reset()")
        right = RULE[self.rooms[self.k]]
        if action not in (right, DIRECTIONS[right]):
            self.over = True
            known = action in DIRECTIONS or action in DIRECTIONS.values()
            what = "A trap!" if known else "Unknown action. A trap!"
            return Step(what, reward=0.0, done=True, info={"success": False})
        self.k += 1
        reward = 1.0 / len(self.rooms)  # per room passed: escaping is worth 1 in all
        if self.k == len(self.rooms):
            self.over = True
            return Step("You escaped!", reward=reward, done=True, info={"success": True})
        return Step(room_text(self.k + 1, self.rooms[self.k]), reward=reward)


def expert_actions(rooms: list[str]) -> list[str]:
    return [RULE[c] for c in rooms]


# --- the backend contract of a2rl_env (training instances only) ----------------------------------
def train_ids() -> list[str]:
    return [f"train-{i:05d}" for i in range(N_TRAIN)]


def train_rooms(instance_id: str) -> list[str]:
    return rooms_for(f"{TRAIN_SEED}:{instance_id}")


def make_train_env(instance_id: str) -> Any:
    return Quest(train_rooms(instance_id))
