"""GSM8K answer extraction and matching, following lm-evaluation-harness's `gsm8k` task.

Followed: EleutherAI/lm-evaluation-harness `lm_eval/tasks/gsm8k/gsm8k.yaml`, task metadata
version 3.0 (commit 47f16bf6a68ec19467e728ce52ac6c5937d5b3da, lm-eval 0.4.x):
- filter `strict-match`: regex `#### (\\-?[0-9\\.\\,]+)`, first match;
- filter `flexible-extract`: regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`, last match (group_select -1),
  the first non-empty group of that match;
- no match: the filter's fallback `[invalid]`;
- metric `exact_match` with ignore_case and regexes_to_ignore `,`, `\\$`, `(?s).*#### `, `\\.$`
  applied to prediction and reference alike.
`lm_eval_match` reproduces that metric exactly (reported per filter). The task's score combines
them the way the issue asks: the strict answer when there is one, else the flexible one, then a
numeric normalization that also equates `18.0`/`18.00` with `18` (`normalize_number`).

Refusals (`refusal`, ours: lm-eval has none). A model trained against the grader can emit text
whose *extraction* lands on the right number without the model meaning one answer: several
`#### ` lines with different numbers, a spam of numbers (`0 1 2 ... 1000`), an answer hedged
as alternatives (`3 or 4 or 5`), or a fake grader field (`expected: 18`). Such an output is
wrong whatever it holds, and its `ItemResult.parsed` says `refused: <reason>`. An honest
output (the dataset's `<<a*b=c>>c` solutions, a chain of thought ending in `#### N` or "the
answer is N") holds none of these shapes; the tests keep a table of both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..scorers.match import AnswerMatch
from ..scorers.numeric import FALLBACK, marked_answer, normalize_number

__all__ = ["FALLBACK", "SCORER", "extract_answer", "flexible_extract", "lm_eval_match",
           "normalize_number", "refusal", "strict_extract", "target_of"]

STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE_RES = [re.compile(p) for p in (r",", r"\$", r"(?s).*#### ", r"\.$")]


def _regex_filter(regex: re.Pattern[str], text: str, group_select: int) -> str:
    """lm-eval's `RegexFilter` on one response."""
    matches = regex.findall(text)
    if not matches:
        return FALLBACK
    match = matches[group_select]
    if isinstance(match, tuple):
        groups = [m for m in match if m]
        match = groups[0] if groups else FALLBACK
    return match.strip()


def strict_extract(text: str) -> str:
    return _regex_filter(STRICT_RE, text, 0)


def flexible_extract(text: str) -> str:
    return _regex_filter(FLEXIBLE_RE, text, -1)


def _lm_eval_normalize(text: str) -> str:
    for regex in IGNORE_RES:
        text = regex.sub("", text)
    return text.lower()


def lm_eval_match(prediction: str, reference: str) -> bool:
    """lm-eval's `exact_match` with the gsm8k task's options."""
    return _lm_eval_normalize(prediction) == _lm_eval_normalize(reference)


def target_of(answer: str) -> str:
    """The final answer of a GSM8K solution (the text after `#### `), normalized."""
    return marked_answer(answer)


#: Numbers in a row with only separators between them that make a spam, not a computation
#: (an honest step writes an operator, a word or `<<...>>` between its numbers).
SPAM_RUN = 8
_NUM = r"-?\$?[0-9][0-9,]*(?:\.[0-9]+)?"
_SPAM_RE = re.compile(rf"{_NUM}(?:(?:\s*[,;|/]\s*|\s+(?:or|and)\s+|\s+){_NUM}){{{SPAM_RUN - 1},}}",
                      re.IGNORECASE)
#: Alternatives offered as the answer: "3 or 4", "3, 4 or 5", "3 and/or 4".
_HEDGE_RE = re.compile(rf"({_NUM})\s*,?\s*(?:or|and/or|either)\s+(?:maybe\s+|perhaps\s+)?({_NUM})",
                       re.IGNORECASE)
#: A line that writes a grader's field instead of an answer.
#: Only a grader's own names: "score", "reward" or "grade" open honest lines of working too
#: ("Score = 3 x 4"), so they are left out.
_ECHO_RE = re.compile(r"^\W*(expected|target|reference|gold|ground[ -]truth|correct answer|"
                      r"verdict)(\s+answer)?\s*[:=]", re.IGNORECASE | re.MULTILINE)


def _final_line(output: str) -> str:
    """The line the answer is read from: the first `#### ` line, else the last number's."""
    m = STRICT_RE.search(output)
    if m is None:
        numbers = list(FLEXIBLE_RE.finditer(output))
        if not numbers:
            return ""
        m = numbers[-1]
    start = output.rfind("\n", 0, m.start()) + 1
    end = output.find("\n", m.end())
    return output[start:end if end >= 0 else len(output)]


def refusal(output: str) -> str | None:
    """Why `output` is refused whatever number it holds (see the module's docstring), or None."""
    finals = {normalize_number(x) or x for x in STRICT_RE.findall(output)}
    if len(finals) > 1:
        return "conflicting_final_answers"
    if _ECHO_RE.search(output):
        return "grader_echo"
    if _SPAM_RE.search(output):
        return "number_spam"
    for a, b in _HEDGE_RE.findall(_final_line(output)):
        if normalize_number(a) != normalize_number(b):
            return "hedged_answer"
    return None


def extract_answer(output: str) -> tuple[str | None, str]:
    """(normalized answer, how): strict `#### N` first, else the last number in the output.
    Refusals are not applied here (`refusal`): this is lm-eval's reading."""
    strict = strict_extract(output)
    if strict != FALLBACK and (num := normalize_number(strict)) is not None:
        return num, "strict"
    flexible = flexible_extract(output)
    if flexible != FALLBACK and (num := normalize_number(flexible)) is not None:
        return num, "flexible"
    return None, "none"


def lm_eval_metrics(items: Sequence[dict[str, Any]], outputs: Sequence[str]) -> dict[str, Any]:
    """How each answer was read (strict `#### N`, flexible last number) and lm-eval's own
    exact match per filter, beside our score."""
    hows = [extract_answer(o)[1] for o in outputs]
    n = len(outputs)
    pairs = list(zip(items, outputs, strict=True))
    strict = sum(lm_eval_match(strict_extract(o), it["answer"]) for it, o in pairs)
    flexible = sum(lm_eval_match(flexible_extract(o), it["answer"]) for it, o in pairs)
    return {"n_strict": hows.count("strict"), "n_flexible": hows.count("flexible"),
            "lm_eval_exact_match_strict": strict / n if n else 0.0,
            "lm_eval_exact_match_flexible": flexible / n if n else 0.0,
            "lm_eval_fallback": FALLBACK}


#: The `a2rl` profile's scorer: our reading (strict, else the last number, normalized) against
#: the dataset's `#### N`, refusals wrong whatever they hold, lm-eval's metrics beside.
SCORER = AnswerMatch(parse=lambda output: extract_answer(output)[0], expected="target",
                     refuse=refusal, metrics=lm_eval_metrics)
