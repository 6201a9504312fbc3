"""ALFWorld's `paper` profile: the ReAct agent loop of the reference harness.

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py:
`alfworld_run`, `TASK_PREFIXES`, `ALFWorldEvaluator.run_eval`; itself the loop of the ReAct
authors' alfworld.ipynb) plays each game so:

- the observation at reset is TextWorld's text without its first paragraph (the welcome
  banner): `"\\n".join(ob.split("\\n\\n")[1:])`;
- the prompt is `"Interact with a household to solve a task. Here are two examples.\\n"` +
  the ReAct authors' examples `react_<type>_1` and `react_<type>_0` of the game's task type +
  `"\\nHere is the task.\\n"` + that observation + `"\\n>"`, followed by the **whole** history,
  one `" <action>\\n<observation>\\n>"` per step;
- the model completes that text raw (no chat template), greedily, at most 100 new tokens,
  stopped at a newline; the action is the completion stripped of surrounding whitespace (not
  lower-cased, not checked against the admissible commands);
- an observation starting `"You arrive at loc "` loses everything up to its first `". "`; the
  observation of an action starting `"think:"` is `"OK."` (the env is stepped all the same);
- the episode ends when the env says done, and succeeds when the game is won at that step; at
  most 50 steps (eval_config `max_steps`), else it fails;
- the model's context is 4,096 tokens (`max_model_len`): before each generation a prompt
  whose tokens and the 100 new ones do not fit keeps only its last 3,995 tokens
  (`_truncate_prompt_to_fit`, in RD-Agent 1.0.0's wheel: the header and the examples go
  first), decoded back to text (`fit_context`).

The examples are the ReAct authors' `prompts/alfworld_3prompts.json` (the harness ships the same
file as `react_prompts.json`); it is not copied here: `a2rl alfworld download` fetches it
(`download.py`) into the game folder, where `load_prompts` reads it.

No package-relative imports: under the `paper` profile this file is also written into the
workspace as `env/alfworld_react.py`, so the agent can play training games with the grader's
very loop (`play`, with its own `generate`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

try:  # inside the workspace (env/alfworld_react.py): env/a2rl_env.py is a sibling module
    from a2rl_env import Env, Episode, Step, play_together  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Env, Episode, Step, play_together

PROMPTS_FILE = "alfworld_3prompts.json"
#: The ReAct authors' file at a fixed commit (ysymyth/ReAct), and its sha256.
PROMPTS_COMMIT = "6bdb3a1fd38b8188fc7ba4102969fe483df8fdc9"
PROMPTS_URL = ("https://raw.githubusercontent.com/ysymyth/ReAct/"
               f"{PROMPTS_COMMIT}/prompts/{PROMPTS_FILE}")
PROMPTS_SHA256 = "a10976b4ae99f4802aa9e621933bb71065ae103f2bd273a24466ab1005fbc45a"
#: Game-name prefix -> the examples' key (harness eval.py TASK_PREFIXES, in its order).
TASK_PREFIXES: dict[str, str] = {
    "pick_and_place": "put",
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
    "look_at_obj": "examine",
    "pick_two_obj": "puttwo",
}
HEADER = "Interact with a household to solve a task. Here are two examples.\n"
TASK_HEADER = "\nHere is the task.\n"
THINK = "think:"
MAX_STEPS = 50  # harness benchmarks/__init__.py: alfworld eval_config max_steps
MAX_NEW_TOKENS = 100  # harness eval.py: SamplingParams(max_tokens=100, stop=["\n"])
MAX_MODEL_LEN = 4096  # harness eval.py: LLM(max_model_len=4096), the context it truncates to


def load_prompts(folder: Path) -> dict[str, str]:
    """The ReAct examples (`alfworld_3prompts.json`) from the game folder."""
    path = folder / PROMPTS_FILE
    if not path.is_file():
        raise RuntimeError(f"the ReAct examples {PROMPTS_FILE} are not in {folder}: run "
                           "`a2rl alfworld download` (ALFWorld's paper profile needs them)")
    prompts = json.loads(path.read_text())
    missing = [f"react_{v}_{k}" for v in TASK_PREFIXES.values() for k in (0, 1)
               if not isinstance(prompts.get(f"react_{v}_{k}"), str)]
    if missing:
        raise ValueError(f"{path} lacks the ReAct examples {', '.join(missing)}")
    return prompts


def game_name(game_dir: Path) -> str:
    """`<task folder>/<trial>`: the harness's name of a game (its `extra.gamefile` path's last
    two folders), whose prefix selects the examples."""
    return "/".join(game_dir.parts[-2:])


def few_shot_prefix(prompts: dict[str, str], name: str) -> str | None:
    """The text before the game's first observation; None for a task type the harness does
    not know (it skips such a game)."""
    for prefix, key in TASK_PREFIXES.items():
        if name.startswith(prefix):
            return HEADER + prompts[f"react_{key}_1"] + prompts[f"react_{key}_0"] + TASK_HEADER
    return None


def initial_observation(feedback: str) -> str:
    """The reset text without its first paragraph (the banner)."""
    return "\n".join(feedback.split("\n\n")[1:])


def process_ob(ob: str) -> str:
    if ob.startswith("You arrive at loc "):
        ob = ob[ob.find(". ") + 2:]
    return ob


def fit_context(prompt: str, tokenizer: Any, max_context_tokens: int = MAX_MODEL_LEN,
                max_output_tokens: int = MAX_NEW_TOKENS) -> str:
    """The prompt the model sees: whole when its tokens and `max_output_tokens` fit in
    `max_context_tokens`, else its last `max_context_tokens - max_output_tokens - 1` tokens
    decoded back to text (the oldest text goes first: the header, then the examples, then the
    earliest steps). `tokenizer` is a transformers tokenizer (`encode`, `decode`)."""
    ids = tokenizer.encode(prompt)
    if len(ids) + max_output_tokens <= max_context_tokens:
        return prompt
    keep = max(max_context_tokens - max_output_tokens - 1, 1)
    return str(tokenizer.decode(ids[-keep:]))


def action_of(completion: str) -> str:
    """The action: the completion up to its first newline (the stop string, which our engines
    cut too), stripped."""
    return completion.split("\n", 1)[0].strip()


class ReActEpisode:
    """One game under the ReAct loop: its prompt text and its record."""

    def __init__(self, episode_id: str, env: Env, prefix: str, first: Step) -> None:
        self.env = env
        self.init_prompt = prefix + initial_observation(first.observation) + "\n>"
        self.history = ""
        self.record = Episode(id=episode_id, observations=[first.observation])

    def prompt(self) -> str:
        return self.init_prompt + self.history

    def act(self, completion: str) -> None:
        action = action_of(completion)
        ep = self.record
        ep.outputs.append(completion)
        ep.actions.append(action)
        step = self.env.step(action)
        observation = process_ob(step.observation)
        if action.startswith(THINK):
            observation = "OK."
        won = bool(step.info.get("won"))
        ep.observations.append(observation)
        ep.rewards.append(1.0 if won else 0.0)
        self.history += f" {action}\n{observation}\n>"
        if step.done:
            ep.done, ep.success = True, won


def play(ids: Sequence[str], factories: Sequence[Callable[[], Env]], names: Sequence[str],
         prompts: dict[str, str], generate: Callable[[list[str]], list[str]],
         max_steps: int = MAX_STEPS) -> list[Episode]:
    """Play every game with the ReAct loop, all stepped together: one `generate` call per step
    over the prompts of the episodes still running. An env that raises fails its own episode;
    a game of an unknown task type fails at once (the harness skips it)."""
    def start(eid: str, factory: Callable[[], Env], name: str) -> ReActEpisode:
        prefix = few_shot_prefix(prompts, name)
        if prefix is None:
            raise ValueError(f"unknown task type of game {name!r}")
        env = factory()
        return ReActEpisode(eid, env, prefix, env.reset())

    starts = [partial(start, eid, factory, name)
              for eid, factory, name in zip(ids, factories, names, strict=True)]
    return play_together(ids, starts, generate, max_steps)
