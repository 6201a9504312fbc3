"""The `echo` task: answer `say: <word>` with `<word>`. Small, offline, toy-sized."""

from __future__ import annotations

import random
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

from a2rl.settings import Settings
from a2rl.tasks import (
    ItemResult,
    Messages,
    Split,
    Task,
    TaskScore,
    TaskSpec,
    secret_seed,
    seed_digest,
)
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


class EchoTask(Task):
    """The smallest real task: visible train items, hidden dev/test from the secret seed."""

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

    def hidden_split_identity(self, settings: Settings) -> str | None:
        return seed_digest(settings, "echo")  # the hidden splits come from this home's seed

    def build_prompt(self, item: dict[str, Any]) -> Messages:
        return [{"role": "user", "content": item["prompt"]}]

    def score_outputs(
        self, items: Sequence[dict[str, Any]], outputs: Sequence[str]
    ) -> TaskScore:
        results = []
        for item, output in zip(items, outputs, strict=True):
            words = output.split()
            parsed = words[0].strip(".,!").lower() if words else None
            results.append(ItemResult(id=item["id"], prompt=item["prompt"], output=output,
                                      expected=item["answer"], parsed=parsed,
                                      correct=parsed == item["answer"]))
        return TaskScore.from_items(results)  # accuracy, with Wilson's interval
