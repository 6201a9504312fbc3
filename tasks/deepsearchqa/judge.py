"""Is an answer correct? DeepSearchQA's LLM judge, over the shared judge client.

The endpoint, key, retry policy, concurrency, answer cache and the fencing of the judged text
are the model-graded scorers' (`a2rl.tasks.scorers.judge.JudgeClient`, from the `judge_*`
settings); only the question asked is this task's. The judge sees the question, the
gold answer, its type (`Single Answer` or `Set Answer`) and the response, and must answer
exactly `CORRECT` or `INCORRECT`.

Rules the scorer relies on: an empty answer is incorrect without asking; a judge failure
(transport, HTTP error, malformed verdict after the retries) is an **error**, never correct; a
set answer is correct only when it names every item of the gold set (the prompt says so).

The `paper` profile judges as the reference harness does (autorl_bench/benchmarks/deepsearchqa/
eval.py, `_judge_answer`): its own prompt and system prompt (RD-Agent's text, read from its
wheel: `a2rl.tasks.rdagent.deepsearchqa_text`, passed in as `paper_prompts`), which show the
gold answer, its type and the prediction but not the question; one request, whose reply is
read as the harness reads it (`harness_verdict`: its first line, stripped of punctuation and
lower-cased, is `correct`, or else the answer is incorrect: never asked again); an empty
prediction is judged too; and when the call fails (or the reply is empty, where the harness's
`splitlines()[0]` raises) the task falls back to the harness's string match (`string_match`).

Untrusted text (`a2rl.tasks.untrusted`), under both rules: the response is wrapped in tags
carrying a random boundary drawn per request, with the prompt's own delimiters escaped, so a
response cannot end its field and write a forged `Rules:` or verdict after it; the `a2rl`
prompt also says what the tags mean (the `paper` prompt keeps the harness's wording and adds
only the tags: docs/paper-fidelity.md). A response addressed to the judge (`addressed_to_judge`)
is still judged and its reply kept, but it is never correct: the grade is `incorrect` with
`flags` naming why. Under `paper` that holds for the string-match fallback too (the task reads
`Grade.flags`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from a2rl.llm import Reply
from a2rl.llm_cache import AnswerCache, cache_key, sha256_text
from a2rl.settings import Settings

from ..scorers.judge import Fence, JudgeClient

PROMPT_VERSION = "dsqa-correctness.2-fenced"
SYSTEM = ("You grade answers to research questions against a gold answer. You are strict and "
          "reply with one word.")
USER = """Question: {question}

Gold answer: {gold}
Answer type: {answer_type}

Response to grade: {response}

{notice}

Rules:
- Single Answer: the response is CORRECT when it states the gold answer (equivalent forms,
  spellings, units or rounding are fine) and does not also offer a conflicting answer.
- Set Answer: the gold answer is a set of items. The response is CORRECT only when it names
  EVERY item of the gold set and no item outside it; a missing or an extra item is INCORRECT.
- Anything else is INCORRECT.

Reply with exactly one word: CORRECT or INCORRECT."""

#: The paper profile's prompt version; the judge's prompt text's digest is appended, so that
#: verdicts under another text (a test fixture's) never share a cache entry.
PAPER_PROMPT_VERSION = "dsqa-harness.3-fenced"
PAPER_MAX_TOKENS = 16  # the harness sets none; a one-word verdict, with room to spare

Verdict = Literal["correct", "incorrect", "error"]
Rules = Literal["a2rl", "paper"]
MAX_TOKENS = 8  # one word, with room for a stray period or markdown


@dataclass
class Grade:
    verdict: Verdict
    raw_answers: list[str] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    #: `addressed_to_judge`'s names for a response that speaks to the judge (never correct)
    flags: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"


def harness_verdict(text: str) -> Literal["correct", "incorrect"] | None:
    """`_judge_answer`'s reading of a reply: `response.strip().lower()`, its first line
    stripped of `.!,;:` and whitespace, equal to `correct`; None for an empty reply, where the
    harness's `splitlines()[0]` raises and it falls back to the string match."""
    lines = text.strip().lower().splitlines()
    if not lines:
        return None
    return "correct" if lines[0].strip().strip(".!,;: \t\r\n").lower() == "correct" \
        else "incorrect"


def parse_grade(text: str) -> Literal["correct", "incorrect"] | None:
    word = text.strip().strip(".!*`'\" ").upper()
    return {"CORRECT": "correct", "INCORRECT": "incorrect"}.get(word)  # type: ignore[return-value]


class CorrectnessJudge:
    """Grades (question, gold, type, response) through the shared judge client, cached."""

    def __init__(self, judge: JudgeClient, *, rules: Rules = "a2rl",
                 paper_prompts: Mapping[str, str] | None = None) -> None:
        self.judge = judge
        #: "a2rl" (extra set items fail) or "paper" (the harness's judge)
        self.rules: Rules = rules
        #: the harness's `judge` template and `judge_system` (the paper rules need them)
        self.paper_prompts = dict(paper_prompts) if paper_prompts is not None else None
        self.prompt_version = PROMPT_VERSION
        if rules == "paper" and self.paper_prompts is not None:
            digest = sha256_text(self.paper_prompts["judge_system"] + "\0"
                                 + self.paper_prompts["judge"])[:12]
            self.prompt_version = f"{PAPER_PROMPT_VERSION}.{digest}"

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None,
                      rules: Rules = "a2rl") -> CorrectnessJudge:
        """The configured judge (`judge_*` settings), its key read from `environ`."""
        return cls(JudgeClient.from_settings(settings, environ), rules=rules)

    def with_rules(self, rules: Rules,
                   paper_prompts: Mapping[str, str] | None = None) -> CorrectnessJudge:
        """The same endpoint, client and cache under other rules (a profile's)."""
        return CorrectnessJudge(self.judge, rules=rules,
                                paper_prompts=paper_prompts or self.paper_prompts)

    @property
    def cache(self) -> AnswerCache | None:
        """The client's answer cache (None: every verdict asked for)."""
        return self.judge.cache

    @cache.setter
    def cache(self, cache: AnswerCache | None) -> None:
        self.judge.cache = cache

    @property
    def max_tokens(self) -> int:
        return PAPER_MAX_TOKENS if self.rules == "paper" else MAX_TOKENS

    @property
    def requests_made(self) -> int:
        return self.judge.requests_made

    @property
    def model_key(self) -> str:
        return f"{self.judge.model}|{self.prompt_version}"

    def public(self) -> dict[str, Any]:
        """What provenance may record (no key, only the variable's name)."""
        return self.judge.public(max_tokens=self.max_tokens, prompt_version=self.prompt_version)

    def messages(self, question: str, gold: str, answer_type: str, response: str,
                 fence: Fence | None = None) -> list[dict[str, str]]:
        """The judge's chat, the response fenced (a fresh boundary unless `fence` is given)."""
        fence = fence or Fence.new()
        if self.rules == "paper":  # the harness's prompt: no question
            prompts = self._paper()
            user = prompts["judge"].format(answer_type=answer_type or "Single Answer",
                                           gold=gold, predicted=fence.wrap(response))
            return [{"role": "system", "content": prompts["judge_system"]},
                    {"role": "user", "content": user}]
        user = USER.format(question=question, gold=gold,
                           answer_type=answer_type or "Single Answer",
                           response=fence.wrap(response),
                           notice=fence.notice().replace("Each output to evaluate is",
                                                         "The response is"))
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def _paper(self) -> dict[str, str]:
        if self.paper_prompts is None:
            raise RuntimeError("the paper profile's judge needs the harness's prompts "
                               "(paper_prompts, from RD-Agent's wheel)")
        return self.paper_prompts

    def grade_one(self, question: str, gold: str, answer_type: str, response: str) -> Grade:
        """One verdict (malformed ones asked again under the retry policy); never raises for
        judge failures: those are an `error` grade."""
        paper = self.rules == "paper"
        if not response.strip() and not paper:  # the harness judges an empty answer too
            return Grade("incorrect", ["<empty answer: incorrect without judging>"])

        def accept(reply: Reply) -> tuple[str | None, str]:
            if paper:  # read once, as the harness reads it; never asked again
                return harness_verdict(reply.text) or "error", ""
            verdict = parse_grade(reply.text)
            return verdict, "" if verdict else f"malformed answer: {reply.text[:100]!r}"

        asked = self.judge.ask(self.messages(question, gold, answer_type, response), accept,
                               max_tokens=self.max_tokens, judged=response)
        raws, attempts, flags = asked.raw_answers, len(asked.attempts), asked.flags
        if asked.value is None:
            return Grade("error", raws, asked.error, attempts, flags=flags)
        if asked.value == "error":  # the paper rules: an empty reply
            return Grade("error", raws, "empty judge reply", attempts, flags=flags)
        verdict = "incorrect" if flags else asked.value  # judged and kept; never correct
        return Grade(verdict, raws, attempts=attempts, flags=flags)  # type: ignore[arg-type]

    def grade_many(self, questions: Sequence[str], golds: Sequence[str],
                   types: Sequence[str], responses: Sequence[str]) -> list[Grade]:
        """Grades in input order; cached verdicts cost nothing, errors are never cached, and an
        empty response is graded without the cache (it needs no request)."""
        judged = (lambda r: True) if self.rules == "paper" else (lambda r: bool(r.strip()))
        keys = [cache_key(self.prompt_version, self.judge.model, q, t,
                          sha256_text(r), sha256_text(g)) if judged(r) else None
                for q, g, t, r in zip(questions, golds, types, responses, strict=True)]
        return self.judge.many(
            keys,
            lambda i: self.grade_one(questions[i], golds[i], types[i], responses[i]),
            lambda g: None if g.verdict == "error" else {"verdict": g.verdict,
                                                         "raw_answers": g.raw_answers,
                                                         "flags": g.flags},
            lambda hit: Grade(hit["verdict"], hit["raw_answers"], cached=True,
                              flags=hit.get("flags", [])),
            model_key=self.model_key)


def string_match(predicted: str, gold: str, answer_type: str) -> bool:
    """The harness's fallback when its judge call fails (deepsearchqa/eval.py,
    `_string_match`): lower-cased containment either way for a single answer; for a set,
    every comma-separated gold item is a substring of the prediction."""
    pred, gold = predicted.strip().lower(), gold.strip().lower()
    if answer_type == "Single Answer":
        return gold in pred or pred in gold
    return all(item in pred for item in (x.strip() for x in gold.split(",")))
