"""The `echo` task: answer `say: <word>` with `<word>`. Small, offline, toy-sized.

It says its spec, its data and its prompt, and hands in two parts: a shared scorer (exact match
of the first word) and the data part of hidden splits drawn from this home's secret seed."""

from __future__ import annotations

import random
from importlib.resources import files
from typing import Any

from a2rl.settings import Settings
from a2rl.tasks import Messages, SecretSeed, Split, Task, TaskSpec, secret_seed
from a2rl.tasks.scorers.match import AnswerMatch
from a2rl.tasks.spec import GraderSettings, SplitInfo

N_TRAIN, N_DEV, N_TEST = 200, 16, 24
WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean",
         "candle", "garden", "pencil", "rocket", "silver", "window", "yellow"]
GRADER = GraderSettings(max_new_tokens=4, stop=["</s>", "\n"], batch_size=64)


def _items(seed: int, n: int, prefix: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        word = rng.choice(WORDS)
        items.append({"id": f"{prefix}-{i:04d}", "prompt": f"say: {word}", "answer": word})
    return items


def first_word(output: str) -> str | None:
    """The answer read from an output: its first word, lower-cased, without punctuation."""
    words = output.split()
    return words[0].strip(".,!").lower() if words else None


class EchoTask(Task):
    """The smallest real task: visible train items, hidden dev/test from the secret seed."""

    scorer = AnswerMatch(parse=first_word)  # accuracy, with Wilson's interval
    data_source = SecretSeed("echo")  # the hidden splits come from this home's seed

    def __init__(self) -> None:
        description = files(__package__).joinpath("description.md").read_text().format(
            n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST, max_new_tokens=GRADER.max_new_tokens)
        self.spec = TaskSpec(
            id="echo", level=1, title="Echo a word (example plugin)", description=description,
            version="1", default_base_model="tiny-llama", default_budget="10m", toy=True,
            splits={
                "train": SplitInfo(n_items=N_TRAIN, visible=True, source="public seed 7"),
                "dev": SplitInfo(n_items=N_DEV, visible=False, source="secret seed"),
                "test": SplitInfo(n_items=N_TEST, visible=False, source="secret seed"),
            },
            grader=GRADER,
        )

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        return [{**item, "messages": [*self.build_prompt(item),
                                      {"role": "assistant", "content": item["answer"]}]}
                for item in _items(7, N_TRAIN, "train")]

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        both = _items(secret_seed(settings, "echo"), N_DEV + N_TEST, "hidden")
        return both[:N_DEV] if split == "dev" else both[N_DEV:]

    def build_prompt(self, item: dict[str, Any]) -> Messages:
        return [{"role": "user", "content": item["prompt"]}]
