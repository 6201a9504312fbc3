"""Numbers in model answers: read and normalized, so that `18`, `18.0`, `$18` and `1,8`... compare
as the numbers they are.

Shared by the numeric tasks' answer readers: GSM8K's (`gsm8k/scoring.py`: lm-evaluation-harness's
`#### N` then last-number reading, and the dataset's own `#### N` targets) and arith's (the
whole output one integer). What a task reads as *the* answer (the first `#### `, the last
number, the whole output) is its own; normalizing what it read is this module's.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

#: lm-evaluation-harness's filter fallback: "no answer found".
FALLBACK = "[invalid]"
#: GSM8K's solutions end in `#### <answer>`.
ANSWER_MARK = "####"


def normalize_number(text: str) -> str | None:
    """Canonical form of a number: no `$` or commas, no trailing `.`, `18.50` -> `18.5`,
    `18.0` -> `18`, `-0` -> `0`. None when `text` is not a number."""
    text = text.strip().replace(",", "").replace("$", "").rstrip(".")
    if not text or text == FALLBACK:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def marked_answer(solution: str, mark: str = ANSWER_MARK) -> str:
    """The final answer of a worked solution (the text after its last `mark`), normalized as a
    number when it is one, else stripped."""
    raw = solution.split(mark)[-1].strip()
    return normalize_number(raw) or raw


def strict_integer(text: str) -> str | None:
    """The integer a whole output is, or None. Strict: the stripped output must be one integer
    (a leading '+' tolerated), for a task that asks for the number alone."""
    text = text.strip()
    if text.startswith("+"):
        text = text[1:]
    body = text[1:] if text.startswith("-") else text
    if not body.isdigit() or not body.isascii():
        return None
    return str(int(text))
