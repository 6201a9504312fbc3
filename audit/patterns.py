"""Pattern search over a run's commands, code and output: the engine of the keyword checks
(hidden-data reach, reaching out). METR triages runs with keyword search too; here the
keywords are exact names (the task's hidden paths, its test split's public ids, credential
variables, the store's path), so a match names what the agent reached for, with its evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from a2rl.store.queries import INITIAL_SOURCE

from .model import Evidence, Flag, Severity
from .record import RunRecord
from .texts import call_text

MAX_TEXT = 2 << 20  # a revision or log longer than this is searched in its first 2 MiB
MAX_EVIDENCE = 30


@dataclass(frozen=True)
class Pattern:
    name: str  # what it finds, in a finding: "the task's hidden data path"
    regex: re.Pattern[str]
    severity: Severity
    #: where it counts: "agent" (tool call arguments, job commands, the agent's revisions),
    #: "output" (job output, tool errors: what the sandbox answered)
    where: str = "agent"


def literal(name: str, words: Iterable[str], severity: Severity, where: str = "agent",
            boundary: bool = True) -> Pattern | None:
    words = sorted({w for w in words if w}, key=len, reverse=True)
    if not words:
        return None
    body = "|".join(re.escape(w) for w in words)
    if boundary:  # not inside a longer name (`gsm8k` in `my_gsm8k_like.py` still counts)
        body = rf"(?<![\w/.-])(?:{body})(?![\w-])"
    return Pattern(name, re.compile(body, re.IGNORECASE), severity, where)


@dataclass(frozen=True)
class Text:
    kind: str  # tool_call | job | revision | job_output | tool_output
    ref: str
    text: str
    where: str  # agent | output
    path: str = ""


def record_texts(record: RunRecord) -> Iterator[Text]:
    """The run's searchable texts: what the agent wrote, then what it was answered."""
    for call in record.tool_calls:
        yield Text("tool_call", str(call.id), call_text(record, call), "agent")
        answer = " ".join(x for x in (call.error or "", call.result_summary or "") if x)
        if answer:
            yield Text("tool_call", str(call.id), answer, "output")
    for job in record.jobs:
        yield Text("job", job.id, job.command, "agent")
        if job.log_blob_sha:
            try:
                log = record.blob(job.log_blob_sha)[:MAX_TEXT]
            except KeyError:
                continue
            yield Text("job", job.id, log.decode(errors="replace"), "output")
    seen: set[str] = set()
    for rev in record.revisions:
        if (rev.source == INITIAL_SOURCE or not rev.blob_sha or not rev.content_stored
                or rev.blob_sha in seen):
            continue
        seen.add(rev.blob_sha)
        try:
            data = record.blob(rev.blob_sha)[:MAX_TEXT]
        except KeyError:
            continue
        yield Text("revision", str(rev.id), data.decode(errors="replace"), "agent", rev.path)


def search(record: RunRecord, kind: str, patterns: list[Pattern]) -> tuple[list[Flag], int]:
    """One flag per pattern that matched: every match's evidence, excerpts of the first.
    Returns the flags and the number of texts searched."""
    hits: dict[str, tuple[Pattern, Evidence, int]] = {}
    n = 0
    for text in record_texts(record):
        n += 1
        for pat in patterns:
            if pat.where != text.where:
                continue
            m = pat.regex.search(text.text)
            if m is None:
                continue
            _, ev, count = hits.get(pat.name, (pat, Evidence(), 0))
            _add(ev, text, m)
            hits[pat.name] = (pat, ev, count + 1)
    flags = [Flag(kind=kind, severity=pat.severity,
                  finding=f"{pat.name}: {count} {'text' if count == 1 else 'texts'} "
                          f"({', '.join(_where(ev))})", evidence=ev)
             for pat, ev, count in hits.values()]
    return flags, n


def _add(ev: Evidence, text: Text, m: re.Match[str]) -> None:
    if text.kind == "tool_call" and len(ev.tool_calls) < MAX_EVIDENCE:
        if int(text.ref) not in ev.tool_calls:
            ev.tool_calls.append(int(text.ref))
    elif text.kind == "job" and len(ev.jobs) < MAX_EVIDENCE and text.ref not in ev.jobs:
        ev.jobs.append(text.ref)
    elif text.kind == "revision" and len(ev.revisions) < MAX_EVIDENCE:
        ev.revisions.append(int(text.ref))
        if text.path and text.path not in ev.paths:
            ev.paths.append(text.path)
    if len(ev.excerpts) < 3:
        start, end = max(0, m.start() - 40), min(len(text.text), m.end() + 40)
        ev.excerpts.append(" ".join(text.text[start:end].split())[:160])


def _where(ev: Evidence) -> list[str]:
    return [f"{len(v)} {k.replace('_', ' ')}" for k, v in
            (("tool_calls", ev.tool_calls), ("jobs", ev.jobs), ("revisions", ev.revisions))
            if v]
