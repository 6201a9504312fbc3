"""The LLM judge every model-graded scorer asks: one endpoint, its retries, its cache, and the
fencing of the judged text.

Why one client: AlpacaEval's pairwise judge and its paper annotator, and DeepSearchQA's
correctness judge, differ only in the question they ask and how they read the reply. What they
share is said once here:

- **Endpoint and retries**: the `judge_*` settings (`a2rl.llm.judge_endpoint`), one
  `a2rl.llm.ChatClient` whose retry policy retries transient failures and answers the caller
  refuses (a malformed verdict); every attempt is kept (`Asked.attempts`) and shown in the
  record as its text or `<error: ...>` (`Asked.raw_answers`).
- **Cache**: successful verdicts in the shared answer cache (`a2rl.llm_cache`, one SQLite file
  under A2RL_HOME), asked for the rest concurrently (`JudgeClient.many`); errors are never
  cached, so a re-grading asks again for those items only. The key is the protocol's.
- **Fencing** (`a2rl.tasks.untrusted`): the judged text goes into the prompt only inside a
  `Fence` (a boundary drawn per request, the prompt's delimiters escaped), and a text that
  speaks to the judge is still judged but flagged (`Asked.flags`): a protocol never lets a
  flagged text win or be correct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from a2rl.llm import Accept, Attempt, ChatClient, judge_endpoint
from a2rl.llm_cache import AnswerCache, cached_map, judge_cache_path

from ..untrusted import Fence, addressed_to_judge

if TYPE_CHECKING:
    from a2rl.settings import Settings

__all__ = ["Asked", "Fence", "JudgeClient", "addressed_to_judge"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Asked(Generic[T]):
    """One judged request: the accepted value (None when every attempt failed), each attempt,
    the last failure, and the fencing's flags on the judged text."""

    value: T | None
    attempts: list[Attempt] = field(default_factory=list)
    error: str = ""
    #: `addressed_to_judge`'s names for the judged text (never a win, never correct)
    flags: list[str] = field(default_factory=list)

    @property
    def raw_answers(self) -> list[str]:
        """What each attempt answered: its text, or `<error: ...>` when none came back."""
        return [a.text if a.text is not None else f"<error: {a.failure.describe()}>"  # type: ignore[union-attr]
                for a in self.attempts]


class JudgeClient:
    """The configured judge endpoint, its answer cache and how many requests fly at once."""

    def __init__(self, client: ChatClient, cache: AnswerCache | None = None, *,
                 concurrency: int = 8) -> None:
        self.chat = client
        self.cache = cache
        self.concurrency = concurrency

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None, *,
                      api_key: str | None = None) -> JudgeClient:
        """The `judge_*` settings' endpoint (its key read from the variable
        `judge.api_key_env` names, in `environ`) and the shared cache under A2RL_HOME."""
        endpoint, policy = judge_endpoint(settings)
        return cls(ChatClient(endpoint, policy, api_key=api_key, environ=environ),
                   AnswerCache(judge_cache_path(settings)),
                   concurrency=settings.judge.concurrency)

    @property
    def model(self) -> str:
        return self.chat.endpoint.model

    @property
    def requests_made(self) -> int:
        """Every request sent, retries included."""
        return self.chat.requests_made

    def public(self, **fields: Any) -> dict[str, Any]:
        """What provenance may record (no key, only the variable's name), with the protocol's
        own `fields` (its prompt version, token limit)."""
        ep = self.chat.endpoint
        return {"base_url": ep.base_url, "model": ep.model, "api_key_env": ep.api_key_env,
                **fields}

    def send(self, body: Mapping[str, Any], accept: Accept[T],
             judged: str | None = None) -> Asked[T]:
        """`body` (the JSON sent; `model` defaults to the endpoint's) under the retry policy
        until `accept` takes an answer; never raises for a judge failure. `judged`: the text
        under judgment, checked for words to the judge."""
        outcome = self.chat.complete(body, accept)
        return Asked(outcome.value, outcome.attempts, outcome.error,
                     addressed_to_judge(judged) if judged is not None else [])

    def ask(self, messages: list[dict[str, str]], accept: Accept[T], *, max_tokens: int,
            judged: str | None = None) -> Asked[T]:
        """A greedy (temperature 0) chat of `messages`, at most `max_tokens` answered."""
        return self.send({"model": self.model, "messages": messages, "temperature": 0,
                          "max_tokens": max_tokens}, accept, judged)

    def many(self, keys: Sequence[str | None], ask: Callable[[int], R],
             save: Callable[[R], dict[str, Any] | None], load: Callable[[dict[str, Any]], R],
             *, model_key: str | None = None) -> list[R]:
        """`ask(i)` for every item without a cached answer under `keys[i]` (None: never
        cached), `concurrency` at a time; results in input order. `save` gives what to cache
        (None for an error: asked again next time), `load` rebuilds a result from it;
        `model_key` is recorded with each entry (the model by default)."""
        return cached_map(self.cache, model_key or self.model, keys, ask, save, load,
                          concurrency=self.concurrency)
