"""The toy task `arith` (level 1): integer arithmetic, generated, with secret hidden splits.

It is the embedded default: small enough that a short SFT run on two CPU cores takes the tiny
base model from about 0% to above 90%, so the whole harness can be exercised end to end in CI.
"""

from __future__ import annotations

from functools import cached_property
from importlib.resources import files
from typing import Any

from a2rl.settings import Settings

from ..base import Messages, Split, Task
from ..data_files import hidden_split
from ..hidden_seed import secret_seed
from ..scorers.match import AnswerMatch
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import SecretSeed
from ..train_rows import with_messages
from .generate import (
    GENERATOR_VERSION,
    OPERATIONS,
    TRAIN_SEED,
    apply_op,
    make_items,
    normalize_answer,
)

N_TRAIN, N_DEV, N_TEST = 6000, 200, 500
GRADER = GraderSettings(max_new_tokens=8, stop=["</s>"], batch_size=256)


def _description() -> str:
    template = files(__package__).joinpath("description.md").read_text()
    return template.format(n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST,
                           max_new_tokens=GRADER.max_new_tokens)


def _op(problem: str) -> str:
    return next((op for op in "+-*" if op in problem[1:]), "?")


class ArithData(SecretSeed):
    """Hidden splits from this home's secret seed `arith`; the audit's controls are the rest of
    the problem space."""

    def control_items(self, task: ArithTask, settings: Settings) -> list[dict[str, Any]]:
        """Every problem of the space in neither the train nor a hidden split (about 3,300):
        an enumeration of the space finds them as often as hidden ones, a copy of the train
        file or of the hidden items does not (the audit's short-item control)."""
        taken = {it["prompt"] for it in task._train}
        taken |= {it["prompt"] for split in task.hidden_items(settings).values() for it in split}
        items: list[dict[str, Any]] = []
        for op, _, (la, ha), (lb, hb) in OPERATIONS:
            for a in range(la, ha + 1):
                for b in range(lb, hb + 1):
                    problem = f"{a}{op}{b}"
                    if problem not in taken and (op != "-" or a >= b):
                        taken.add(problem)
                        items.append({"id": f"control-{len(items):05d}", "prompt": problem,
                                      "answer": str(apply_op(op, a, b))})
        return items


class ArithTask(Task):
    """Integer arithmetic; see `generate.py` for the distribution and `description.md`."""

    data_source = ArithData("arith")

    def __init__(self) -> None:
        self.spec = TaskSpec(
            id="arith",
            level=1,
            title="Integer arithmetic (toy)",
            description=_description(),
            version=f"1.g{GENERATOR_VERSION}",
            prompt_version="1",
            default_base_model="tiny-llama",
            default_budget="20m",
            toy=True,
            splits={
                "train": SplitInfo(n_items=N_TRAIN, visible=True,
                                   source=f"generated from public seed {TRAIN_SEED}"),
                "dev": SplitInfo(n_items=N_DEV, visible=False,
                                 source="generated from the installation's secret seed"),
                "test": SplitInfo(n_items=N_TEST, visible=False,
                                  source="generated from the installation's secret seed"),
            },
            grader=GRADER,
        )
        #: the whole output must be the integer; accuracy per operation besides
        self.scorer = AnswerMatch(parse=normalize_answer, group=lambda it: _op(it["prompt"]),
                                  group_metric="accuracy_by_op")

    @cached_property
    def _train(self) -> list[dict[str, Any]]:
        return make_items(TRAIN_SEED, N_TRAIN, "train")

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        return [with_messages(it, self.build_prompt(it), it["answer"]) for it in self._train]

    def hidden_items(self, settings: Settings) -> dict[str, list[dict[str, Any]]]:
        """Dev then test from one stream of the secret seed, both excluding every train problem,
        so the two hidden splits are disjoint from train and from each other."""
        seed = secret_seed(settings, "arith")
        exclude = [item["prompt"] for item in self._train]
        both = make_items(seed, N_DEV + N_TEST, "hidden", exclude)
        dev = [{**it, "id": f"dev-{i:04d}"} for i, it in enumerate(both[:N_DEV])]
        test = [{**it, "id": f"test-{i:04d}"} for i, it in enumerate(both[N_DEV:])]
        return {"dev": dev, "test": test}

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        hidden_split(split)
        return self.hidden_items(settings)[split]

    def build_prompt(self, item: dict[str, Any]) -> Messages:
        return [{"role": "user", "content": item["prompt"]}]
