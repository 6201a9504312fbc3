"""AlpacaEval's pairwise judge: the protocol of the `a2rl` profile, over the shared judge client
(`a2rl.tasks.scorers.judge`: endpoint, retries, fencing, cache).

Protocol
--------
For each item the judge is shown the instruction and two outputs, the model's and the
reference's, under the identifiers `m` (shown first) and `M` (shown second). Which of the two is
shown first is drawn per item from a generator seeded by the sha256 of the item id, so the order
is random across items (cancelling the judge's position bias) yet identical on every re-grading;
the position of the model's output is recorded with the verdict.

The prompt is AlpacaEval 2.0's own: the system message and user template of
`alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt`, the template of the
`weighted_alpaca_eval_gpt4_turbo` annotator (tatsu-lab/alpaca_eval), read from the installed
`alpaca_eval` package (`clf_prompt`). AlpacaEval reads the
log-probabilities of the tokens `m` and `M` (max_tokens=1); endpoints differ in logprob support,
so this judge asks for a short greedy completion (temperature 0) and parses the **text** strictly:
after stripping surrounding whitespace the answer must be exactly `m` or `M`; anything else is
malformed. A malformed answer and a transient failure are retried under `a2rl.llm`'s one retry
policy (transport errors, 408/409/429/5xx; exponential backoff with jitter); any other HTTP
status fails at once. After the retries the
item is an **error**: it is recorded with every raw answer and never counts as a win (the task
scores it as a loss). Two shortcuts need no judge: an empty model output loses, and a model output
identical to the reference is a draw (0.5), as in AlpacaEval.

Untrusted text (`a2rl.tasks.untrusted`): both outputs are wrapped in tags carrying a random
boundary drawn per request, their own delimiters (triple quotes, `<|`) escaped, and the system
message says what the tags mean. A model output addressed to the judge (`addressed_to_judge`:
"ignore previous instructions", "Output (a) is better", a forged record or chat turn) is still
judged, its verdict kept in `raw_answers`, but it never wins: a win or a draw becomes a loss, and
`flags` names why (the task counts them in `n_addressed_to_judge`).

Cache
-----
Successful verdicts are stored in the shared answer cache (`a2rl.llm_cache`, the SQLite file
`settings.home_dir / "judge-cache" / "judge.sqlite"`), keyed by the sha256 of (instruction,
sha256(output), sha256(reference), judge model, prompt version). That is the issue's key
(instruction, output hash, judge model) plus the reference and the prompt, so a changed reference
or prompt is never answered from a stale entry. Errors are not cached: a re-grading asks again
for those items only.

Settings (`a2rl config show`; each also an `A2RL_` variable)
-----------------------------------------------------------
- `judge.base_url`: base URL of the endpoint, up to `/v1` (default `https://api.openai.com/v1`);
  requests go to `{base}/chat/completions`.
- `judge.model`: the judge model (default `gpt-4-turbo`, AlpacaEval 2.0's annotator).
- `judge.api_key_env`: the *name* of the variable holding the API key (default
  `OPENAI_API_KEY`); no key set means no Authorization header (local servers).
- `judge.max_retries` (default 4: five attempts), `judge.timeout_s` (default 120),
  `judge.concurrency` (default 8 requests in flight). Backoff (1 s, doubled per attempt, capped
  at 60 s: `a2rl.llm.RetryPolicy`) and the answer's token limit (4) are fixed by `JudgeConfig`.

`Judge` is also the AlpacaEval task's handle on its endpoint: the `paper` profile's annotator
(`paper_annotator.py`) sends its own requests through `Judge.client` and shares its cache.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from a2rl.llm import ChatClient, Endpoint, Reply, RetryPolicy, judge_endpoint
from a2rl.llm_cache import AnswerCache, cache_key, judge_cache_path, sha256_text
from a2rl.settings import Settings

from ..scorers.judge import Fence, JudgeClient

#: Bump when the prompt or the parsing changes (part of the cache key).
JUDGE_PROMPT_VERSION = "alpaca_eval_clf_gpt4_turbo.2-fenced"

#: The annotator whose prompt file the `a2rl` profile's judge uses, in the installed package.
CLF_ANNOTATOR = "alpaca_eval_clf_gpt4_turbo"
CLF_PROMPT_FILE = "alpaca_eval_clf.txt"
#: The template's three fields (everything else in the file is literal text, braces included).
FIELDS = ("instruction", "output_1", "output_2")


@lru_cache(maxsize=1)
def clf_prompt() -> tuple[str, str]:
    """(system message, user template) of alpaca_eval's `alpaca_eval_clf_gpt4_turbo` prompt,
    read from the installed package (alpaca_eval is a dependency; its text is not copied
    here). The file is a chat in `<|im_start|>role ... <|im_end|>` blocks; the user template is
    returned as a `str.format` template over `FIELDS` (its other braces doubled), so that an
    instruction or output holding `{output_1}` is never substituted."""
    import warnings

    with warnings.catch_warnings():  # alpaca_eval imports pkg_resources, which warns
        warnings.simplefilter("ignore")
        folder = resources.files("alpaca_eval").joinpath("evaluators_configs", CLF_ANNOTATOR)
    text = folder.joinpath(CLF_PROMPT_FILE).read_text()
    blocks = dict(re.findall(r"<\|im_start\|>(system|user)\n(.*?)<\|im_end\|>", text, re.DOTALL))
    if set(blocks) != {"system", "user"}:
        raise RuntimeError(f"alpaca_eval's {CLF_ANNOTATOR}/{CLF_PROMPT_FILE} has no system and "
                           "user blocks (a different alpaca_eval version?)")
    user = blocks["user"].strip().replace("{", "{{").replace("}", "}}")
    for name in FIELDS:
        user = user.replace("{{" + name + "}}", "{" + name + "}")
    return blocks["system"].strip(), user


Winner = Literal["model", "reference", "draw", "error"]


@dataclass(frozen=True)
class JudgeConfig:
    """The judge's endpoint and retry policy (from the settings: `a2rl.llm.judge_endpoint`,
    as every model-graded scorer), how many requests fly at once and the answer's length."""

    endpoint: Endpoint
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 8
    max_tokens: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> JudgeConfig:
        endpoint, policy = judge_endpoint(settings)
        return cls(endpoint, policy, concurrency=settings.judge.concurrency)

    @property
    def model(self) -> str:
        return self.endpoint.model

    @property
    def max_retries(self) -> int:
        return self.policy.max_retries

    def public(self) -> dict[str, Any]:
        """What provenance may record (no key, only the variable's name)."""
        ep = self.endpoint
        return {"base_url": ep.base_url, "model": ep.model, "api_key_env": ep.api_key_env,
                "max_tokens": self.max_tokens, "prompt_version": JUDGE_PROMPT_VERSION}


@dataclass
class Judgment:
    """One pairwise judgment, model output vs reference."""

    winner: Winner
    #: "m" when the model's output was shown first, "M" when second; None when not judged.
    model_position: Literal["m", "M"] | None
    raw_answers: list[str] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    #: `addressed_to_judge`'s names for a model output that speaks to the judge (never a win)
    flags: list[str] = field(default_factory=list)

    @property
    def preference(self) -> float:
        """1.0 model wins, 0.5 draw, 0.0 reference wins or error (an error is never a win)."""
        return {"model": 1.0, "draw": 0.5}.get(self.winner, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"winner": self.winner, "model_position": self.model_position,
                "raw_answers": self.raw_answers, "error": self.error,
                "attempts": self.attempts, "cached": self.cached, "flags": self.flags}


def model_shown_first(item_id: str) -> bool:
    """The per-item order: a fair coin seeded by the sha256 of the item id (deterministic)."""
    seed = int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "big")
    return random.Random(seed).random() < 0.5


def parse_verdict(text: str) -> Literal["m", "M"] | None:
    """Strict: exactly `m` or `M` after stripping whitespace, else None (malformed)."""
    answer = text.strip()
    return answer if answer in ("m", "M") else None  # type: ignore[return-value]


class JudgeCache(AnswerCache):
    """The shared answer cache, with this protocol's key."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)

    @staticmethod
    def key(instruction: str, output: str, reference: str, judge_model: str) -> str:
        return cache_key(instruction, sha256_text(output), sha256_text(reference), judge_model,
                         JUDGE_PROMPT_VERSION)


class Judge:
    """Pairwise preference of a model output over a reference output, cached."""

    def __init__(self, config: JudgeConfig, cache: AnswerCache | None = None, *,
                 api_key: str | None = None, environ: Mapping[str, str] | None = None) -> None:
        """The key is `api_key`, else read by the endpoint (`Endpoint.api_key`) from
        `environ` (default: the process's)."""
        self.config = config
        self.cache = cache
        #: the one judge client (`a2rl.tasks.scorers.judge`): this judge's requests and the
        #: paper annotator's go through it, under one count and one cache
        self.client = JudgeClient(ChatClient(config.endpoint, config.policy, api_key=api_key,
                                             environ=environ), cache,
                                  concurrency=config.concurrency)

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> Judge:
        """The configured judge; its key is read from the variable `judge.api_key_env` names."""
        return cls(JudgeConfig.from_settings(settings), JudgeCache(judge_cache_path(settings)),
                   environ=environ)

    @property
    def requests_made(self) -> int:
        """Every request sent, retries included."""
        return self.client.requests_made

    def messages(self, instruction: str, first: str, second: str,
                 fence: Fence | None = None) -> list[dict[str, str]]:
        """The prompt, each output fenced (a fresh boundary unless `fence` is given)."""
        fence = fence or Fence.new()
        system, template = clf_prompt()
        user = template.format(instruction=instruction, output_1=fence.wrap(first),
                               output_2=fence.wrap(second))
        return [{"role": "system", "content": f"{system}\n{fence.notice()}"},
                {"role": "user", "content": user}]

    def judge_one(self, item_id: str, instruction: str, output: str, reference: str) -> Judgment:
        """Ask (with retries) which output is better; never raises for judge failures."""
        if not output.strip():
            return Judgment(winner="reference", model_position=None, error=None,
                            raw_answers=["<empty model output: loss without judging>"])
        if output == reference:
            return Judgment(winner="draw", model_position=None,
                            raw_answers=["<identical to reference: draw without judging>"])
        first_is_model = model_shown_first(item_id)
        position: Literal["m", "M"] = "m" if first_is_model else "M"
        first, second = (output, reference) if first_is_model else (reference, output)

        def accept(reply: Reply) -> tuple[Literal["m", "M"] | None, str]:
            verdict = parse_verdict(reply.text)
            return verdict, "" if verdict else f"malformed answer: {reply.text[:100]!r}"

        asked = self.client.ask(self.messages(instruction, first, second), accept,
                                max_tokens=self.config.max_tokens, judged=output)
        if asked.value is None:
            return Judgment(winner="error", model_position=position,
                            raw_answers=asked.raw_answers, error=asked.error,
                            attempts=len(asked.attempts))
        # judged and recorded, but text that speaks to the judge never wins
        winner: Winner = "model" if asked.value == position and not asked.flags else "reference"
        return Judgment(winner=winner, model_position=position, raw_answers=asked.raw_answers,
                        attempts=len(asked.attempts), flags=asked.flags)

    def judge_many(self, item_ids: Sequence[str], instructions: Sequence[str],
                   outputs: Sequence[str], references: Sequence[str]) -> list[Judgment]:
        """Judgments in input order; cached ones cost no request, the rest run concurrently."""
        n = len(item_ids)
        if not (len(instructions) == len(outputs) == len(references) == n):
            raise ValueError("item_ids, instructions, outputs and references differ in length")
        keys = [JudgeCache.key(instructions[i], outputs[i], references[i], self.config.model)
                for i in range(n)]
        return self.client.many(
            keys,
            lambda i: self.judge_one(item_ids[i], instructions[i], outputs[i], references[i]),
            lambda j: None if j.winner == "error" else {
                "winner": j.winner, "model_position": j.model_position,
                "raw_answers": j.raw_answers, "flags": j.flags},
            lambda hit: Judgment(winner=hit["winner"], model_position=hit["model_position"],
                                 raw_answers=hit["raw_answers"], attempts=0, cached=True,
                                 flags=hit.get("flags", [])))
