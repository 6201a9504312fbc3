"""The visible train split's rows for fine-tuning: the grader's prompt and the answer, in chat
form, and expert demonstrations played in an interactive task's environment.

Why shared: every task writes `messages` beside each train row (the prompt exactly as the
grader sends it, then the answer as the assistant's turn), so that an agent's SFT script trains
on what is graded; and every level-3 task with an expert (ALFWorld, WebShop, DeepSearchQA, the
toy textquest) played it the same way, one row per step. Both are here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from a2rl.grading.seam import Messages

from .envapi.a2rl_env import Env, EnvPool, Episode, Step
from .interactive import RolloutSettings


def chat_pair(prompt: Messages | str, answer: str) -> Messages:
    """The chat of one example: the prompt (a user message when it is text), then `answer`
    as the assistant's turn."""
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else \
        [dict(m) for m in prompt]
    return [*turns, {"role": "assistant", "content": answer}]


def with_messages(item: dict[str, Any], prompt: Messages | str, answer: str) -> dict[str, Any]:
    """`item` with its `messages` (`chat_pair`)."""
    return {**item, "messages": chat_pair(prompt, answer)}


#: An expert: the actions to play in order, or a function of the last step giving the next one
#: (None: it has none; ALFWorld's handcoded expert names its action in the step's info).
Expert = Iterable[str] | Callable[[Step | None], str | None]


@dataclass
class Demonstration:
    """An expert's episode: one train row per step (`id` "<instance>/<k>", `instance_id`,
    `step`, `prompt` as the grader renders it there, `answer` the action, and `messages`)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    episode: Episode | None = None

    @property
    def solved(self) -> bool:
        return self.episode is not None and self.episode.success


def demonstrate(instance_id: str, make_env: Callable[[], Env], expert: Expert,
                rollout: RolloutSettings) -> Demonstration:
    """Play `expert` in one environment under the task's rollout settings (the grader's
    prompt, history window and step limit) until it stops, the episode ends or the limit."""
    pool = EnvPool([instance_id], [make_env], instruction=rollout.instruction,
                   window=rollout.history_window, max_steps=rollout.max_steps)
    pool.reset()
    ask = expert if callable(expert) else None
    actions = None if callable(expert) else iter(expert)
    demo = Demonstration()
    while pool.active():
        action = ask(pool.last[0]) if ask is not None else next(actions, None)  # type: ignore[arg-type]
        if not action:
            break
        prompt = pool.prompts([0])[0]
        k = len(demo.rows)
        demo.rows.append({"id": f"{instance_id}/{k}", "instance_id": instance_id, "step": k,
                          "prompt": prompt, "answer": action,
                          "messages": chat_pair(prompt, action)})
        pool.step({0: action})
    demo.episode = pool.episodes[0]
    return demo
