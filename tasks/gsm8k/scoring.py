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
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE_RES = [re.compile(p) for p in (r",", r"\$", r"(?s).*#### ", r"\.$")]
FALLBACK = "[invalid]"


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
    raw = answer.split("####")[-1].strip()
    return normalize_number(raw) or raw


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


def extract_answer(output: str) -> tuple[str | None, str]:
    """(normalized answer, how): strict `#### N` first, else the last number in the output."""
    strict = strict_extract(output)
    if strict != FALLBACK and (num := normalize_number(strict)) is not None:
        return num, "strict"
    flexible = flexible_extract(output)
    if flexible != FALLBACK and (num := normalize_number(flexible)) is not None:
        return num, "flexible"
    return None, "none"
