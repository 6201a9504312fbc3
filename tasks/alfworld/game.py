"""One ALFWorld game as an `a2rl_env` environment, played by the real TextWorld engine.

No package-relative imports: this file is also written into the workspace as
`env/alfworld_game.py`, next to `env/a2rl_env.py`, and runs inside the sandbox with the
`alfworld` package of the Python environment (docs/level3.md).

Why not `AlfredTWEnv.init_env`: that builds one gym vector env over a fixed batch of games in
worker processes, and a crash there loses the whole batch. Here every episode is its own
TextWorld env with the wrappers `AlfredTWEnv` uses for evaluation (`AlfredDemangler` without
shuffling, `AlfredInfos`), so the grader's rollout engine steps them together and a failing game
loses only its own episode. Observations are ALFWorld's text with the welcome banner dropped,
whitespace collapsed to one line, and the task sentence repeated after every step's feedback
(the grader's prompt keeps only a few earlier steps, and the goal is stated at reset only).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

try:  # inside the workspace: env/a2rl_env.py is a sibling module
    from a2rl_env import Step  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Step

#: Bump when the observation text or the step rules change.
GAME_VERSION = 1
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
#: ALFWorld's six task types (`alfred_tw_env.TASK_TYPES`) -> the short group names reported.
TASK_GROUPS: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick_two",
}
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
TASK_MARK = "Your task is to: "


def one_line(text: str) -> str:
    """ALFWorld text on one line (the prompt format has no newlines)."""
    return " ".join(text.replace(WELCOME, " ").split())


def task_type(game_dir: str | Path) -> str:
    """The ALFRED task type of a game folder (from its `traj_data.json`)."""
    return str(json.loads((Path(game_dir) / TRAJ_FILE).read_text())["task_type"])


def _alfworld() -> Any:
    """The alfworld wrappers, imported on first use. `alfworld.info` creates $ALFWORLD_DATA
    (default ~/.cache/alfworld) on import, which fails on a read-only home inside the sandbox,
    so it is pointed at a writable or existing folder first."""
    if not os.environ.get("ALFWORLD_DATA"):
        import tempfile

        os.environ["ALFWORLD_DATA"] = tempfile.gettempdir()
    from alfworld.agents.environment import alfred_tw_env

    return alfred_tw_env


class AlfWorldEnv:
    """One ALFWorld game (a folder with `game.tw-pddl` and `traj_data.json`).

    `reward` is 1 on the step that wins the game; `done` when TextWorld says so (won) — the
    step limit is the rollout's (`max_steps`). `admissible` is ALFWorld's list of valid
    commands. With `expert=True` the handcoded expert's next action is in
    `info["expert_action"]` (used for demonstrations; the grader never asks for it). With
    `raw=True` observations are TextWorld's feedback unchanged (banner, blank lines and all), as
    the `paper` profile's ReAct loop reads them (`react.py`).
    """

    def __init__(self, game_dir: str | Path, *, expert: bool = False, seed: int = 0,
                 raw: bool = False) -> None:
        self.game_dir = Path(game_dir)
        self.game_file = self.game_dir / GAME_FILE
        if not self.game_file.is_file():
            raise FileNotFoundError(f"no {GAME_FILE} in {self.game_dir}")
        self.expert, self.seed, self.raw = expert, seed, raw
        self.task = ""
        self._env: Any = None

    def _start(self) -> Any:
        import textworld

        tw = _alfworld()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        wrappers: list[Any] = [tw.AlfredDemangler(shuffle=False), tw.AlfredInfos]
        if self.expert:
            wrappers.append(tw.AlfredExpert(tw.AlfredExpertType.HANDCODED))
            infos.extras.append("expert_plan")
        return textworld.start(str(self.game_file), request_infos=infos, wrappers=wrappers)

    def _step(self, state: Any, feedback: str, reward: float, done: bool) -> Step:
        won = bool(state.get("won"))
        text = feedback if self.raw else one_line(feedback)
        if self.task and TASK_MARK not in text and not self.raw:
            text = f"{text} {TASK_MARK}{self.task}"
        info: dict[str, Any] = {"won": won}
        if done or won:
            info["success"] = won
        if self.expert:
            plan = state.get("extra.expert_plan") or []
            info["expert_action"] = plan[0] if plan else None
        admissible = [str(c) for c in state.get("admissible_commands") or []]
        return Step(observation=text, reward=reward, done=done or won,
                    admissible=admissible or None, info=info)

    def reset(self) -> Step:
        if self._env is None:
            self._env = self._start()
        random.seed(self.seed)  # the handcoded expert breaks ties with `random`
        state = self._env.reset()
        feedback = str(state.get("feedback") or state.get("description") or "")
        if TASK_MARK in feedback:
            self.task = one_line(feedback.split(TASK_MARK, 1)[1])
        return self._step(state, feedback, 0.0, False)

    def step(self, action: str) -> Step:
        if self._env is None:
            raise RuntimeError("reset() first")
        state, _score, done = self._env.step(action)
        won = bool(state.get("won"))
        return self._step(state, str(state.get("feedback") or ""), 1.0 if won else 0.0,
                          bool(done))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
