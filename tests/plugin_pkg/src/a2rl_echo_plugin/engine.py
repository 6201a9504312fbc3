"""The `plain-twice` grading engine: transformers' plain `generate` under a name and a version
of its own, which says each completion twice (or `times` times).

An engine is a driver (a2rl's `grading/engine_select.py`: `EngineDriver`) that says its name and
version without loading a model, and builds the engine for one evaluation. Both are frozen
with every run made under it and kept on each evaluation's provenance, so a test can see that
`grading.engine = "plain-twice"` graded a run's baseline here.

Its settings are its own section (`settings_section`), declared here with its place:
`[grading.plain-twice] times = 3` in config.toml, or `A2RL_GRADING__PLAIN_TWICE__TIMES=3`; the
driver reads it from the settings the evaluation runs under. Saying a completion again after a
space leaves its first word, which is all the echo task reads, so scores are as `generate`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from a2rl.grading.engine import TransformersEngine, transformers_engine_version
from a2rl.grading.engine_select import EngineRequest
from a2rl.sections import Section

NAME = "plain-twice"


class PlainTwiceSettings(Section, place=f"grading.{NAME}"):
    times: int = Field(2, ge=1, description="how many times the engine says each completion")


def version() -> str:
    return f"0.1.0+{transformers_engine_version()}"


class PlainTwiceEngine(TransformersEngine):
    engine_name = NAME

    def __init__(self, *args: Any, times: int = 2, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine_version = version()
        self.times = times

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        return [" ".join([text] * self.times)
                for text in super().generate(prompts, max_new_tokens, stop)]


class PlainTwiceDriver:
    settings_section = PlainTwiceSettings

    def identity(self, *, cuda: bool) -> tuple[str, str]:
        return PlainTwiceEngine.engine_name, version()

    def build(self, request: EngineRequest) -> PlainTwiceEngine:
        ours = request.settings.grading.section(PlainTwiceSettings)
        return PlainTwiceEngine(request.checkpoint_dir, batch_size=request.batch_size,
                                chat_template=request.chat_template,
                                tokenizer_dir=request.tokenizer_dir, times=ours.times)
