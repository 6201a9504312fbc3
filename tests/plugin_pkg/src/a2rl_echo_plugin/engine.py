"""The `plain-twice` grading engine: transformers' plain `generate` under a name and a version
of its own.

An engine is a driver (a2rl's `grading/engine_select.py`: `EngineDriver`) that says its name and
version without loading a model, and builds the engine for one evaluation. Both are frozen
with every run made under it and kept on each evaluation's provenance, so a test can see that
`grading_engine = "plain-twice"` graded a run's baseline here.
"""

from __future__ import annotations

from typing import Any

from a2rl.grading.engine import TransformersEngine, transformers_engine_version
from a2rl.grading.engine_select import EngineRequest


def version() -> str:
    return f"0.1.0+{transformers_engine_version()}"


class PlainTwiceEngine(TransformersEngine):
    engine_name = "plain-twice"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine_version = version()


class PlainTwiceDriver:
    def identity(self, *, cuda: bool) -> tuple[str, str]:
        return PlainTwiceEngine.engine_name, version()

    def build(self, request: EngineRequest) -> PlainTwiceEngine:
        return PlainTwiceEngine(request.checkpoint_dir, batch_size=request.batch_size,
                                chat_template=request.chat_template,
                                tokenizer_dir=request.tokenizer_dir)
