"""WebShop's `paper` profile: the reference harness's episode loop and prompt format.

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/webshop/eval.py:
`create_llm_fn`, `_format_available_actions`, `build_react_prompt`, `webshop_run`) plays each
goal so:

- every step is one chat with two messages: the system message `_vllm_sys_msg` and the user
  prompt; greedy, at most 100 new tokens, stopped at a newline (`SamplingParams(temperature=0,
  max_tokens=100, stop=["\\n"])`, `llm.chat`);
- the user prompt is `build_react_prompt`'s head (its instruction and rules text, over the
  session's instruction and the available actions) followed by the last 5 steps, each
  `"\\nObservation {k}: {obs}\\n"` + `"Action {k}: {action}\\n"` numbered from the episode's
  start, then `"\\nObservation {n}: {observation}\\n"` + `"Action {n}:"` for the current step;
- the available actions are the page's (`env.get_available_actions()`), one per line indented
  by two spaces: `search[<your query>]` when the page has the search bar, then
  `click[<text>]` for every clickable;
- the instruction is `env.get_instruction_text()`, the page's instruction heading, which reads
  `"Instruction: "` + the goal's text (the head then shows "Instruction: Instruction: ...",
  as the harness's prompt does);
- the action is the completion stripped; a leading `Action:` is dropped and `choose[` becomes
  `click[` (both case-sensitive), and the env gets it as it is (the site lower-cases the
  argument itself);
- the episode ends when the env says done, successful when its reward is at least 0.5; after
  50 steps without, it fails with reward 0.

The head and the system message are RD-Agent's text: they are read from its wheel at run time
(`a2rl.tasks.rdagent.webshop_text`) and passed in as `text` ({"system", "prompt"}).

Standard library only, no package-relative imports: under the `paper` profile this file is
also written into the workspace as `env/webshop_paper.py` with the text in
`env/webshop_paper_text.json`, so the agent can roll out training goals with the grader's
very loop (`play`, with its own `generate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

try:  # inside the workspace (env/webshop_paper.py): env/a2rl_env.py is a sibling module
    from a2rl_env import Env, Episode, Step, play_together  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Env, Episode, Step, play_together

MAX_STEPS = 50  # harness benchmarks/__init__.py: webshop eval_config max_steps
HISTORY_WINDOW = 5  # webshop_run / build_react_prompt: history_window=5
MAX_NEW_TOKENS = 100  # create_llm_fn: SamplingParams(max_tokens=100, stop=["\n"])
SUCCESS_AT = 0.5  # webshop_run: success = reward >= 0.5
STOP = ("\n",)  # webshop_run: llm_fn(prompt, stop=["\n"])
#: The site's buttons (lower case, as `get_available_actions` keys them). The original lists
#: a page's buttons (`class="btn"`) and product links in page order, then the item's options.
BUTTONS = ("back to search", "< prev", "next >", "description", "features", "reviews",
           "buy now")
#: The search page's one button, listed by the original beside its search bar.
SEARCH_BUTTON = "search"
TextDict = Mapping[str, str]
Messages = list[dict[str, str]]


def available_actions(step: Step) -> dict[str, Any]:
    """The original's `get_available_actions()` for the page `step` shows: `has_search_bar`
    and the clickables in its order (buttons and product links, then option values)."""
    avail = step.info.get("available_actions") or {"has_search_bar": False, "clickables": []}
    clickables = list(avail.get("clickables") or [])
    if avail.get("has_search_bar") and SEARCH_BUTTON not in clickables:
        clickables.insert(0, SEARCH_BUTTON)
    # a page has product links (results) or options (an item), never both: after the buttons
    buttons = [c for c in clickables if c in BUTTONS or c == SEARCH_BUTTON]
    return {"has_search_bar": bool(avail.get("has_search_bar")),
            "clickables": buttons + [c for c in clickables if c not in buttons]}


def format_available_actions(avail: Mapping[str, Any]) -> str:
    """`_format_available_actions`: one action a line, two spaces in."""
    lines = []
    if avail.get("has_search_bar"):
        lines.append("search[<your query>]")
    for txt in avail.get("clickables", []):
        lines.append(f"click[{txt}]")
    return "\n".join(f"  {a}" for a in lines)


def build_prompt(text: TextDict, instruction: str, history: Sequence[tuple[str, str]],
                 observation: str, actions: str, window: int = HISTORY_WINDOW) -> str:
    """`build_react_prompt`: the head, the last `window` steps numbered from the start, and
    the current observation."""
    prompt = text["prompt"].format(instruction=instruction, available_actions=actions)
    recent = list(history[-window:]) if len(history) > window else list(history)
    offset = len(history) - len(recent)
    for i, (action, obs) in enumerate(recent):
        step_num = offset + i + 1
        prompt += f"\nObservation {step_num}: {obs}\n"
        prompt += f"Action {step_num}: {action}\n"
    prompt += f"\nObservation {len(history) + 1}: {observation}\n"
    prompt += f"Action {len(history) + 1}:"
    return prompt


def messages(text: TextDict, prompt: str) -> Messages:
    """`create_llm_fn`'s chat: the system message, then the prompt."""
    return [{"role": "system", "content": text["system"]}, {"role": "user", "content": prompt}]


def clean_action(completion: str) -> str:
    """`webshop_run`'s clean-up of a completion into the action sent to the env."""
    action = completion.strip()
    if action.startswith("Action:"):
        action = action[7:].strip()
    if action.startswith("choose["):
        action = "click[" + action[7:]
    return action


def instruction_of(env: Any) -> str:
    """`env.get_instruction_text()`: the page's instruction heading."""
    return str(env.instruction_text())


class PaperEpisode:
    """One goal under the harness's loop: its history, prompt and record."""

    def __init__(self, episode_id: str, env: Env, first: Step, text: TextDict,
                 window: int = HISTORY_WINDOW) -> None:
        self.env, self.text, self.window = env, text, window
        self.instruction = instruction_of(env)
        self.last = first
        self.history: list[tuple[str, str]] = []
        self.record = Episode(id=episode_id, observations=[first.observation])

    def prompt(self) -> Messages:
        actions = format_available_actions(available_actions(self.last))
        return messages(self.text, build_prompt(self.text, self.instruction, self.history,
                                                self.last.observation, actions, self.window))

    def act(self, completion: str) -> None:
        action = clean_action(completion)
        ep = self.record
        ep.outputs.append(completion)
        ep.actions.append(action)
        step = self.env.step(action)
        self.last = step
        ep.observations.append(step.observation)
        ep.rewards.append(float(step.reward))
        self.history.append((action, step.observation))
        if step.done:
            ep.done, ep.success = True, float(step.reward) >= SUCCESS_AT


def play(ids: Sequence[str], factories: Sequence[Callable[[], Env]], text: TextDict,
         generate: Callable[[list[Messages]], list[str]], max_steps: int = MAX_STEPS,
         window: int = HISTORY_WINDOW) -> list[Episode]:
    """Play every goal with the harness's loop, all stepped together: one `generate` call per
    step over the chats of the episodes still running. An env that raises fails its own
    episode (the harness logs it and counts a failure)."""
    def start(eid: str, factory: Callable[[], Env]) -> PaperEpisode:
        env = factory()
        return PaperEpisode(eid, env, env.reset(), text, window)

    starts = [partial(start, eid, factory) for eid, factory in zip(ids, factories, strict=True)]
    return play_together(ids, starts, generate, max_steps)
