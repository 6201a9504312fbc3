"""The DeepSearchQA episode: a question, `search[query]` actions, one `answer[text]`.

Standard library only, and no package-relative imports: this file is also written into the
workspace as `env/deepsearchqa_game.py`. Search and reward are injected: the grader passes its
host-side search backend (and judges answers afterwards, in batch); the workspace backend
passes a client of the run's search service socket and a lexical reward on training answers.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any

try:  # inside the workspace: env/a2rl_env.py is a sibling module
    from a2rl_env import Step  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Step

SEP = " [SEP] "
HINT = "Act with search[query] or answer[text]."
SearchFn = Callable[[str], list[dict[str, Any]]]
RewardFn = Callable[[str], float]
SNIPPET_CHARS = 240
ACTION = re.compile(r"^(search|answer)\[(.*)\]$", re.DOTALL)


def clean(text: Any) -> str:
    return " ".join(str(text).split())


def render_results(query: str, results: list[dict[str, Any]]) -> str:
    """Search results as one line: `[k] title: snippet`."""
    if not results:
        return SEP.join([f"Search: {query}", "No results."])
    parts = [f"Search: {query}"]
    for k, r in enumerate(results, 1):
        text = clean(r.get("snippet") or r.get("text") or "")[:SNIPPET_CHARS]
        parts.append(f"[{k}] {clean(r.get('title', ''))}: {text}")
    return SEP.join(parts)


def parse(action: str) -> tuple[str, str] | None:
    """("search"|"answer", argument) or None for anything else."""
    m = ACTION.match(action.strip())
    return (m.group(1), m.group(2).strip()) if m else None


class QAEnv:
    """One question (an `a2rl_env.Env`). `reward_fn(answer)` scores a non-empty answer when
    given; without it the episode ends with reward 0 and the answer in `info["answer"]` for a
    judge to score later. An empty answer is never correct and is never judged."""

    def __init__(self, question: str, search: SearchFn, reward_fn: RewardFn | None = None
                 ) -> None:
        self.question, self.search, self.reward_fn = clean(question), search, reward_fn
        self.over = True

    def _header(self) -> list[str]:
        return [f"Question: {self.question}"]

    def reset(self) -> Step:
        self.over = False
        return Step(SEP.join([*self._header(), HINT]))

    def step(self, action: str) -> Step:
        if self.over:
            raise RuntimeError("the episode is over: call reset()")
        parsed = parse(action)
        if parsed is None:
            return Step(SEP.join([*self._header(), "Invalid action.", HINT]))
        kind, arg = parsed
        if kind == "search":
            if not arg:
                return Step(SEP.join([*self._header(), "Empty search.", HINT]))
            results = self.search(arg)
            return Step(SEP.join([*self._header(), render_results(arg, results)]))
        self.over = True
        if not arg:
            return Step("Answered: (empty)", reward=0.0, done=True,
                        info={"success": False, "answer": ""})
        reward = float(self.reward_fn(arg)) if self.reward_fn is not None else 0.0
        info: dict[str, Any] = {"answer": arg}
        if self.reward_fn is not None:
            info["success"] = reward >= 1.0
        return Step(f"Answered: {clean(arg)}", reward=reward, done=True, info=info)


# --- a lexical reward for training answers (the grader uses an LLM judge) -------------------
def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def gold_items(answer: str, answer_type: str) -> list[str]:
    """The items of a set answer (split on commas, semicolons, newlines), else the answer."""
    if "set" in answer_type.lower():
        items = [normalize(x) for x in re.split(r"[,;\n]", answer)]
        return [x for x in items if x]
    return [normalize(answer)]


def lexical_reward(answer: str, gold: str, answer_type: str) -> float:
    """1.0 when every gold item appears in the normalized answer, else 0.0. A cheap proxy of
    the judge for training rollouts only."""
    got = f" {normalize(answer)} "
    items = gold_items(gold, answer_type)
    return 1.0 if items and all(f" {item} " in got for item in items) else 0.0
