"""Is an answer correct? An LLM judge over the AlpacaEval task's OpenAI-compatible endpoint.

Why reuse `a2rl.grading.judge.Judge`: the endpoint, key, retries with backoff, concurrency and
the SQLite cache are the same settings (`judge_*`) and the same code; only the question asked
differs. The judge sees the question, the gold answer, its type (`Single Answer` or
`Set Answer`) and the response, and must answer exactly `CORRECT` or `INCORRECT`.

Rules the scorer relies on: an empty answer is incorrect without asking; a judge failure
(transport, HTTP error, malformed verdict after the retries) is an **error**, never correct; a
set answer is correct only when it names every item of the gold set (the prompt says so).

The `paper` profile's rules are the reference harness's (autorl_bench/benchmarks/deepsearchqa/
eval.py, `_judge_answer`), in our words: a single answer is correct when it holds the gold
answer's key information; a set answer when it contains every gold item, in any order, with
minor wording variations, extra items allowed. Where its judge call fails the harness falls back
to a string match (`string_match`); so does the paper profile.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import httpx

from a2rl.grading.judge import RETRY_STATUSES, Judge, JudgeCache

PROMPT_VERSION = "dsqa-correctness.1"
SYSTEM = ("You grade answers to research questions against a gold answer. You are strict and "
          "reply with one word.")
USER = """Question: {question}

Gold answer: {gold}
Answer type: {answer_type}

Response to grade: {response}

Rules:
- Single Answer: the response is CORRECT when it states the gold answer (equivalent forms,
  spellings, units or rounding are fine) and does not also offer a conflicting answer.
- Set Answer: the gold answer is a set of items. The response is CORRECT only when it names
  EVERY item of the gold set and no item outside it; a missing or an extra item is INCORRECT.
- Anything else is INCORRECT.

Reply with exactly one word: CORRECT or INCORRECT."""

PAPER_PROMPT_VERSION = "dsqa-correctness.paper.1"
USER_PAPER = """Question: {question}

Gold answer: {gold}
Answer type: {answer_type}

Response to grade: {response}

Rules:
- Single Answer: the response is CORRECT when it carries the same key information as the gold
  answer.
- Set Answer: the response is CORRECT when it contains ALL items of the gold answer, in any
  order; minor differences in wording are fine, and items beyond the gold ones do not make it
  incorrect.
- Anything else is INCORRECT.

Reply with exactly one word: CORRECT or INCORRECT."""

Verdict = Literal["correct", "incorrect", "error"]


@dataclass
class Grade:
    verdict: Verdict
    raw_answers: list[str] = field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    cached: bool = False

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"


def parse_grade(text: str) -> Literal["correct", "incorrect"] | None:
    word = text.strip().strip(".!*`'\" ").upper()
    return {"CORRECT": "correct", "INCORRECT": "incorrect"}.get(word)  # type: ignore[return-value]


class CorrectnessJudge:
    """Grades (question, gold, type, response) with a `Judge`'s endpoint, retries and cache."""

    def __init__(self, judge: Judge, rules: str = "a2rl") -> None:
        # a copy sharing the endpoint, key and cache; the verdict needs more tokens than m/M
        self.judge = copy.copy(judge)
        self.judge.config = self.config = dataclasses.replace(judge.config, max_tokens=8)
        self.requests_made = 0
        #: "a2rl" (extra set items fail) or "paper" (the harness's rules)
        self.rules = rules
        self.prompt_version = PAPER_PROMPT_VERSION if rules == "paper" else PROMPT_VERSION

    @property
    def model_key(self) -> str:
        return f"{self.config.model}|{self.prompt_version}"

    def messages(self, question: str, gold: str, answer_type: str, response: str
                 ) -> list[dict[str, str]]:
        template = USER_PAPER if self.rules == "paper" else USER
        user = template.format(question=question, gold=gold,
                               answer_type=answer_type or "Single Answer", response=response)
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def grade_one(self, client: httpx.Client, question: str, gold: str, answer_type: str,
                  response: str) -> Grade:
        if not response.strip():
            return Grade("incorrect", ["<empty answer: incorrect without judging>"])
        messages = self.messages(question, gold, answer_type, response)
        raws: list[str] = []
        error = ""
        for attempt in range(self.config.max_retries + 1):
            text, error = self.judge._ask(client, messages)
            self.requests_made += 1
            if text is not None:
                raws.append(text)
                verdict = parse_grade(text)
                if verdict is not None:
                    return Grade(verdict, raws, attempts=attempt + 1)
                error = f"malformed answer: {text[:100]!r}"
            else:
                raws.append(f"<error: {error}>")
                retriable = (error.startswith(("transport", "bad response"))
                             or any(error.startswith(f"http {s}") for s in RETRY_STATUSES))
                if not retriable:
                    return Grade("error", raws, error, attempt + 1)
            if attempt < self.config.max_retries:
                self.judge._sleep(attempt)
        return Grade("error", raws, error, self.config.max_retries + 1)

    def grade_many(self, questions: Sequence[str], golds: Sequence[str],
                   types: Sequence[str], responses: Sequence[str]) -> list[Grade]:
        """Grades in input order; cached verdicts cost nothing, errors are never cached, and an
        empty response is graded without the cache (it needs no request)."""
        keys = [JudgeCache.key(f"{q}\n{t}", r, g, self.model_key) if r.strip() else None
                for q, g, t, r in zip(questions, golds, types, responses, strict=True)]
        return self.judge.cached_map(
            keys,
            lambda client, i: self.grade_one(client, questions[i], golds[i], types[i],
                                             responses[i]),
            lambda g: None if g.verdict == "error" else {"verdict": g.verdict,
                                                         "raw_answers": g.raw_answers},
            lambda hit: Grade(hit["verdict"], hit["raw_answers"], cached=True))


def string_match(predicted: str, gold: str, answer_type: str) -> bool:
    """The harness's fallback when its judge call fails (deepsearchqa/eval.py,
    `_string_match`): lower-cased containment either way for a single answer; for a set,
    every comma-separated gold item is a substring of the prediction."""
    pred, gold = predicted.strip().lower(), gold.strip().lower()
    if answer_type == "Single Answer":
        return gold in pred or pred in gold
    return all(item in pred for item in (x.strip() for x in gold.split(",")))
