"""AlpacaEval's pairwise annotator as the reference harness configures it (the `paper` profile).

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/__init__.py:
alpacaeval eval_config `annotators_config: annotators_gpt52_fn`) ships a config that is
`alpaca_eval`'s own `alpaca_eval_gpt4_turbo_fn` with the judge model changed to gpt-5.2: the
same prompt file (`alpaca_eval_fn.txt`, identical), the same function-calling request
(`make_partial_leaderboard`, max_tokens 100, temperature 0) and parser (`json_parser` on
`ordered_models`, then `ranking_parser` with `model_1_name: m`), batch size 1. So the config and
the prompt are read at run time from the installed `alpaca_eval` package (never copied here);
the judge model and endpoint are ours (settings `judge.model`, `judge.base_url`: the harness's
gpt-5.2 is recorded as `harness_model`).

The protocol is `alpaca_eval`'s, through its own objects: `annotate_head2head(outputs_1 =
reference, outputs_2 = model)`; the order is switched per instruction by its
`RandomSwitchTwoColumnsProcessor` (seeded on the instruction, seed 0 as `PairwiseAnnotator`
passes it) and switched back after parsing (preference 3 - p); the prompt is filled by its
`make_prompts` and split into chat messages by its `prompt_to_chatml`; the answer is the first
tool call's arguments (else the message text) parsed by its `pipeline_meta_parser`. Identical
outputs are a draw (1.5) without a request. A request failing at the HTTP level is retried
under `a2rl.llm`'s one policy (the library's OpenAI decoder retries too); an answer that does not
parse is NaN, not retried, and is left out of the win rates, as alpaca_eval leaves it out. The
requests go through the task's `Judge.client` (the shared judge client,
`a2rl.tasks.scorers.judge`) and its answer cache (one count, one key).

One deviation, for safety (docs/paper-fidelity.md): each output is fenced before the prompt is
filled (`a2rl.tasks.untrusted`: a random per-request boundary tag around it, its triple quotes and
`<|` escaped, so it can neither close its record nor open a chat turn of its own in
`prompt_to_chatml`); the template's wording is untouched. A model output addressed to the
judge is annotated as usual but never wins: its preference becomes 1 (the reference's) and
`flags` says why.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata, resources
from typing import Any

import pandas as pd
import yaml

from a2rl.llm import Reply

from ..scorers.judge import Fence, addressed_to_judge
from .judge import Judge

ANNOTATOR = "alpaca_eval_gpt4_turbo_fn"
HARNESS_MODEL = "gpt-5.2"  # annotators_gpt52_fn/configs.yaml: completions_kwargs.model_name


def _alpaca_eval() -> Any:
    with warnings.catch_warnings():  # alpaca_eval imports pkg_resources, which warns
        warnings.simplefilter("ignore")
        import alpaca_eval.completion_parsers
        import alpaca_eval.processors
        import alpaca_eval.utils

        return alpaca_eval


@lru_cache(maxsize=1)
def annotator_config() -> dict[str, Any]:
    """The annotator's config from the installed package (`evaluators_configs/<name>/`)."""
    _alpaca_eval()
    folder = resources.files("alpaca_eval").joinpath("evaluators_configs")
    return yaml.safe_load(folder.joinpath(ANNOTATOR, "configs.yaml").read_text())[ANNOTATOR]


@lru_cache(maxsize=1)
def prompt_template() -> str:
    _alpaca_eval()
    folder = resources.files("alpaca_eval").joinpath("evaluators_configs")
    return folder.joinpath(annotator_config()["prompt_template"]).read_text()


def version() -> str:
    return f"alpaca_eval {metadata.version('alpaca_eval')} {ANNOTATOR} +fenced.1"


@dataclass
class Annotation:
    """One pairwise annotation in alpaca_eval's terms: `preference` 1 (reference, output_1,
    preferred), 2 (model preferred), 1.5 (draw) or None (no parsable answer)."""

    preference: float | None
    is_switched: bool
    raw: list[str] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    #: `addressed_to_judge`'s names when the model's output speaks to the judge (never a win)
    flags: list[str] = field(default_factory=list)

    @property
    def ours(self) -> float | None:
        """Our scale: 1 model wins, 0.5 draw, 0 reference wins."""
        return None if self.preference is None else self.preference - 1.0


def switched(instructions: Sequence[str], references: Sequence[str],
             outputs: Sequence[str]) -> pd.DataFrame:
    """The rows to annotate after alpaca_eval's order switch: columns instruction, output_1,
    output_2 (as shown) and is_switched_outputs."""
    ae = _alpaca_eval()
    processor = ae.processors.RandomSwitchTwoColumnsProcessor(
        two_columns_to_switch=["output_1", "output_2"], random_seed_columns=["instruction"],
        _switch_column="is_switched_outputs", seed=0)
    df = pd.DataFrame({"instruction": list(instructions), "output_1": list(references),
                       "output_2": list(outputs)})
    return processor.preprocess(df)


def messages_for(row: pd.Series, fence: Fence | None = None) -> list[dict[str, str]]:
    """alpaca_eval's chat for one row, each output fenced (a fresh boundary unless given)."""
    ae = _alpaca_eval()
    fence = fence or Fence.new()
    frame = pd.DataFrame([{"instruction": row["instruction"],
                           "output_1": fence.wrap(row["output_1"]),
                           "output_2": fence.wrap(row["output_2"])}])
    prompts, _ = ae.utils.make_prompts(frame, prompt_template())
    return ae.utils.prompt_to_chatml(prompts[0])


def parse(completion: str) -> float | None:
    """The shown-order preference (1: output shown as `m` wins, 2: `M` wins), or None."""
    ae = _alpaca_eval()
    kwargs = annotator_config()["completion_parser_kwargs"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = ae.completion_parsers.pipeline_meta_parser(completion, **kwargs)
    except Exception:  # noqa: BLE001 - alpaca_eval logs and leaves it unannotated
        return None
    value = out[0] if out else None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value) if float(value) in (1.0, 2.0) else None


def request_body(model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    """The chat completions request of the config's `completions_kwargs` (model_name is the
    model; max_tokens, temperature, tools, tool_choice as given)."""
    kwargs = dict(annotator_config()["completions_kwargs"])
    kwargs.pop("model_name", None)
    return {"model": model, "messages": messages, **kwargs}


def completion_text(message: dict[str, Any]) -> str:
    """As alpaca_eval's OpenAI decoder reads a choice's message: the first tool call's
    arguments, else the message content."""
    calls = message.get("tool_calls") or []
    if calls:
        return str(calls[0]["function"]["arguments"])
    return str(message.get("content") or " ")


class PaperAnnotator:
    """Pairwise annotations over the configured judge (`Judge`: endpoint, key, retries,
    concurrency and cache), with alpaca_eval's annotator config."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def public(self) -> dict[str, Any]:
        return {**self.judge.config.public(), "prompt_version": version(),
                "annotator": ANNOTATOR, "harness_model": HARNESS_MODEL,
                "max_tokens": annotator_config()["completions_kwargs"]["max_tokens"]}

    def _key(self, row: pd.Series) -> str:
        parts = [version(), self.judge.config.model, row["instruction"],
                 hashlib.sha256(row["output_1"].encode()).hexdigest(),
                 hashlib.sha256(row["output_2"].encode()).hexdigest()]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def _ask(self, row: pd.Series) -> Annotation:
        is_switched = bool(row["is_switched_outputs"])
        if row["output_1"] == row["output_2"]:
            return Annotation(preference=1.5, is_switched=is_switched,
                              raw=["<identical outputs: draw without judging>"])
        body = request_body(self.judge.config.model, messages_for(row))

        def accept(reply: Reply) -> tuple[str | None, str]:
            try:
                return completion_text(reply.message), ""
            except (KeyError, IndexError, TypeError) as exc:
                return None, f"bad response body: {type(exc).__name__}: {exc}"

        # an unparsable answer is accepted (and NaN): alpaca_eval does not ask again
        asked = self.judge.client.send(body, accept)
        raws = [f"<error: {a.failure.describe()}>" if a.failure else a.text or ""
                for a in asked.attempts]
        if asked.value is None:
            return Annotation(None, is_switched, raws, asked.error, len(asked.attempts))
        raws[-1] = asked.value
        shown = parse(asked.value)
        if shown is None:
            return Annotation(preference=None, is_switched=is_switched, raw=raws,
                              error=f"unparsable answer: {asked.value[:100]!r}",
                              attempts=len(asked.attempts))
        pref = 3.0 - shown if is_switched else shown
        return Annotation(preference=pref, is_switched=is_switched, raw=raws,
                          attempts=len(asked.attempts))

    def annotate(self, instructions: Sequence[str], outputs: Sequence[str],
                 references: Sequence[str]) -> list[Annotation]:
        """One annotation per item, in input order; cached ones cost no request."""
        if not (len(instructions) == len(outputs) == len(references)):
            raise ValueError("instructions, outputs and references differ in length")
        df = switched(instructions, references, outputs)
        rows = [df.iloc[i] for i in range(len(df))]
        annotations = self.judge.client.many(
            [self._key(r) for r in rows], lambda i: self._ask(rows[i]),
            lambda a: None if a.preference is None else asdict(a),
            lambda hit: Annotation(**{**hit, "attempts": 0, "cached": True}))
        for annotation, output in zip(annotations, outputs, strict=True):
            annotation.flags = addressed_to_judge(output)
            if annotation.flags and annotation.preference is not None:
                annotation.preference = 1.0  # judged and recorded; never a win or a draw
        return annotations
