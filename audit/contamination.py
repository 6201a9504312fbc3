"""Contamination: the hidden dev and test items, found in what the agent produced.

Choice of n and normalization, after the field's decontamination practice: GPT-3 dropped
training documents sharing a 13-gram with a test set; Llama 2 matched token n-grams and called
an item contaminated when a large share of its tokens were covered; PostTrainBench uses a 5-gram
overlap with a 0.8 threshold. a2rl holds the hidden items themselves, so it can ask per item:
what share of the item's n-grams occur in the agent's text (its coverage)? n = 8 tokens
(words and single punctuation marks, lowercased: audit/ngrams.py): 13 is longer than many
hidden questions (AlpacaEval instructions, HumanEval signatures), 5 matches common phrases;
8-grams of normalized tokens are long enough that a chance match is rare and short enough for
short items. An item is hit when its coverage reaches 50% (Llama 2's kind of threshold: a
paraphrase or a truncated copy still counts, a shared phrase does not). Every n-gram that also
occurs in the visible train split is removed first: text the agent was given is no evidence.

Short items need care. An item shorter than n tokens (arith's `47+85`) is matched whole, and so
is a short answer (GSM8K's `72`, arith's `132`): a number alone is no evidence, a hidden item's
question with its answer is. Even that can be made without the hidden data when a task's space
is small and public (arith's 10,000 additions can be enumerated), so short items are judged
against a control: the visible train items, matched the same way. Text that enumerates the
space finds both alike; text made from the hidden split finds hidden items far more often.

Severity: a hidden item's question with its answer, or a long answer copied (≥ 50% of its
n-grams), is `high`; questions without their answers are `medium` (a person should read it).
Short items with their answers are judged against the control by an exact one-sided test
(Fisher's, `a2rl.stats.exact_greater`: are the split's items found more often than the
control's, beyond what chance does?): p ≤ 1e-6 is `high` (200 of arith's 500 test items and
no control item: p ≈ 1e-242; the same 8 of 10 items of a toy pool: p ≈ 4e-4, not proof);
p ≤ 1e-3 is `low`; otherwise half of a split or more is `low` (the space enumerated, found
as often as the control), and less is chance and no flag (counted in the summary). The control
is the task's own (`a2rl.tasks.audit_control_items`: arith's problems in neither split, which an
enumeration finds and a copy of the hidden items does not), else the visible train items.

What is read, and how: `audit/texts.py` (the sources) and `audit/decode.py` (the formats).
What could not be read is a flag of its own: `medium` for files past the read budget, not
readable (a link on the way, a name too deep) or a walk that stopped; `low` for files the
jobs read that were gone by the audit. A workspace that is not there while the run had one
(a recomputed audit after the volume was detached) leaves the check incomplete (`complete`:
false in its summary), which the audit reports as such, never as clean.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from a2rl.settings import Settings
from a2rl.stats import binomial_tail, exact_greater

from .decode import PIECE, TEXT, UNESCAPED, Ctx, Cut, Notes, Out, Quota
from .files import Files
from .hidden import HiddenData, HiddenItem
from .model import Evidence, Flag, Severity
from .ngrams import Matcher, texts_grams
from .record import CheckResult, RunRecord
from .texts import ReadBudget, Reading, Source, record_texts

N = 8
COVERAGE = 0.5
#: short items: p-values of the one-sided exact test against the control for `high` and `low`
LEAK_P, SUSPECT_P = 1e-6, 1e-3
#: short items: half a split or more, found as often as the control: the space enumerated
SHORT_RATE = 0.5
#: the control rate assumed where a task has no control items
CHANCE = 0.02
MAX_ITEMS_SHOWN = 20
#: a workspace file this large is matched in a worker thread, WORKERS at once
LARGE_FILE = 16 << 20
WORKERS = max(1, min(4, len(os.sched_getaffinity(0))))


@dataclass
class _Grams:
    question: set[int] = field(default_factory=set)
    answer: set[int] = field(default_factory=set)
    short: bool = False  # the question is shorter than N tokens: matched whole
    long_answer: bool = False


def _item_grams(q_grams: tuple[list[int], int], a_grams: tuple[list[int], int],
                train_grams: set[int]) -> _Grams:
    (q, q_len), (a, a_len) = q_grams, a_grams
    q_short, a_short = q_len < N, a_len < N
    return _Grams(question={g for g in q if q_short or g not in train_grams},
                  answer={g for g in a if a_short or g not in train_grams},
                  short=q_short, long_answer=bool(a) and not a_short)


class _Sinks:
    """A matcher per role of a decoded text (the text, its unescaped form, pieces found in
    it): each role's chunks stream contiguously, so no gram joins two forms of one text."""

    def __init__(self, matcher: Matcher) -> None:
        self.by_role = {TEXT: matcher, UNESCAPED: matcher.fork(), PIECE: matcher.fork()}

    def fork(self) -> _Sinks:
        return _Sinks(self.by_role[TEXT].fork())

    def feed(self, label: str, outs: Iterator[Out]) -> None:
        started: set[int] = set()
        for role, data, new in outs:
            self.by_role[role].feed(label, data, new_text=new or role not in started)
            started.add(role)

    def close(self) -> tuple[dict[str, set[int]], int]:
        found: dict[str, set[int]] = {}
        for m in self.by_role.values():
            for label, grams in m.close().items():
                found.setdefault(label, set()).update(grams)
        return found, sum(m.bytes_read for m in self.by_role.values())


def _match_alone(sinks: _Sinks, label: str, outs: Iterator[Out]
                 ) -> tuple[dict[str, set[int]], int]:
    """One large text through its own matchers (in a worker thread)."""
    sinks.feed(label, outs)
    return sinks.close()


def _guarded(outs: Iterator[Out], label: str, reading: Reading) -> Iterator[Out]:
    """A record text's outputs; a decoding error or cut is noted (a cut as unread: what it
    decompressed to passed the budget), the rest still matched."""
    notes = Notes()
    try:
        yield from outs
    except Cut:
        notes.cut = True
        reading.budget.note_unread(label, 1)
    except Exception as exc:  # noqa: BLE001 - one text the decoders cannot read is noted
        notes.error(label, exc)
    reading.absorb(notes)


def _share(part: set[int], found: set[int]) -> float:
    return len(part & found) / len(part) if part else 0.0


def check_contamination(record: RunRecord, *, hidden: HiddenData | None = None,
                        settings: Settings | None = None, **_: object) -> CheckResult:
    if hidden is None or not hidden.items:
        why = hidden.error if hidden is not None and hidden.error else "no hidden items"
        if hidden is None or not hidden.error:
            return CheckResult(summary={"checked": False, "reason": why, "complete": True})
        return CheckResult(  # the items exist but could not be read here: unchecked, not clean
            flags=[Flag(kind="contamination", severity=Severity.medium,
                        finding=f"not checked: the task's hidden items could not be read here "
                                f"({why})")],
            summary={"checked": False, "reason": why, "complete": False})
    # every item's text hashed in one pass (thousands of items: one numpy pass, not thousands)
    control_items = hidden.control or hidden.train
    every = [*hidden.items, *hidden.train, *hidden.control]
    hashed = texts_grams([t for it in every for t in (it.input, it.answer)], N)
    item_hashes = {it: (hashed[2 * i], hashed[2 * i + 1]) for i, it in enumerate(every)}
    train_grams: set[int] = set()
    for item in hidden.train:
        for g, length in item_hashes[item]:
            if length == N:
                train_grams.update(g)
    items = {it.ref: (it, _item_grams(*item_hashes[it], train_grams)) for it in hidden.items}
    has_short = any(g.short for _, g in items.values())
    control = ({it.ref: (it, _item_grams(*item_hashes[it], set())) for it in control_items}
               if has_short else {})
    wanted: set[int] = set()
    lengths = {N} | {length for _, length in hashed}
    for _, g in [*items.values(), *control.values()]:
        wanted |= g.question | g.answer
    lengths.discard(0)
    sinks = _Sinks(Matcher(wanted, lengths))
    sources: dict[str, Source] = {}
    same_as: dict[str, str] = {}  # label -> the label of the identical blob read before it
    first_of_blob: dict[str, str] = {}
    limit = settings.recording.audit_read_bytes if settings is not None else 0
    reading = Reading(budget=ReadBudget(left=limit or None))
    pieces = Quota(limit or None)  # what base64 runs in the record's texts decode to

    def seen(source: Source) -> bool:
        sources[source.label] = source
        if source.blob:
            if source.blob in first_of_blob:  # identical content: matched once, not twice
                same_as[source.label] = first_of_blob[source.blob]
                return True
            first_of_blob[source.blob] = source.label
        return False

    # Large workspace files (generated training data: up to gigabytes) are matched by worker
    # threads, each with forks of the matchers; numpy lets go of the GIL in its array passes,
    # so on 2 cores two files go at once while this thread reads the others.
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="a2rl-audit") as pool:
        forked: list[Future[tuple[dict[str, set[int]], int]]] = []
        for source, outs in record_texts(record, lambda: Ctx(Quota(), Notes(), pieces)):
            if not seen(source):
                sinks.feed(source.label, _guarded(outs, source.label, reading))
        files = Files(record, reading, hidden.shipped)
        listed = files.listed()
        for item, fd in files.opened(listed):
            if seen(item.source):
                if fd is not None:
                    os.close(fd)
                continue
            outs = files.texts(item, fd)
            if item.data >= LARGE_FILE:
                forked.append(pool.submit(_match_alone, sinks.fork(), item.source.label, outs))
            else:
                sinks.feed(item.source.label, outs)
        found, bytes_read = sinks.close()
        for future in forked:
            got, n = future.result()
            for label, grams in got.items():  # labels are distinct: one source, one fork
                found.setdefault(label, set()).update(grams)
            bytes_read += n
    # in the record's order (evidence lists it so), whatever order the chunks found them in
    found_by = {label: found[same_as.get(label, label)] for label in sources
                if same_as.get(label, label) in found}
    everywhere: set[int] = set().union(*found_by.values()) if found_by else set()

    def hits(pool: dict[str, tuple[HiddenItem, _Grams]]) -> dict[str, tuple[str, HiddenItem]]:
        """ref -> (how it was found: with_answer | answer | question, item)."""
        out: dict[str, tuple[str, HiddenItem]] = {}
        for ref, (item, g) in pool.items():
            q = _share(g.question, everywhere)
            a = _share(g.answer, everywhere)
            if g.long_answer and a >= COVERAGE:
                out[ref] = ("with_answer" if q >= COVERAGE else "answer", item)
            elif q >= COVERAGE:
                out[ref] = ("with_answer" if g.answer and a >= COVERAGE else "question", item)
        return out

    found_items = hits(items)
    short_control = [ref for ref, (_, g) in control.items() if g.short]
    control_hits = sum(1 for ref, (how, _) in hits(control).items()
                       if how == "with_answer" and ref in set(short_control))
    control_rate = control_hits / len(short_control) if short_control else 0.0
    flags: list[Flag] = []
    per_split: dict[str, dict[str, Any]] = {}
    for split in ("dev", "test"):
        pool_refs = [ref for ref, (it, _) in items.items() if it.split == split]
        if not pool_refs:
            continue
        split_hits = {ref: v for ref, v in found_items.items() if v[1].split == split}
        by_how: dict[str, list[str]] = defaultdict(list)
        for ref, (how, _) in split_hits.items():
            short = items[ref][1].short
            by_how[("short_" if short else "") + how].append(ref)
        per_split[split] = {"items": len(pool_refs), "hit": len(split_hits),
                            **{k: len(v) for k, v in by_how.items()}}
        strong = by_how["with_answer"] + by_how["answer"]
        if strong:
            flags.append(_flag(Severity.high, split, strong, len(pool_refs), found_by, sources,
                               items, "appear in the agent's text with their answers"
                               if by_how["with_answer"] else "have their answers copied"))
        if by_how["question"]:
            flags.append(_flag(Severity.medium, split, by_how["question"], len(pool_refs),
                               found_by, sources, items, "have their questions in the agent's "
                               "text (without their answers)"))
        short_hits = by_how["short_with_answer"]
        n_short = sum(1 for ref in pool_refs if items[ref][1].short)
        if short_hits:
            k = len(short_hits)
            p = (exact_greater(k, n_short, control_hits, len(short_control)) if short_control
                 else binomial_tail(k, n_short, CHANCE))
            per_split[split]["short_p"] = float(f"{p:.3g}")
            rate = k / n_short
            enumerated = p > SUSPECT_P and rate >= SHORT_RATE
            if p <= SUSPECT_P or enumerated:
                flags.append(_flag(
                    Severity.high if p <= LEAK_P else Severity.low, split, short_hits,
                    len(pool_refs), found_by, sources, items,
                    f"(short items) appear with their answers; the control's items "
                    f"{control_rate:.0%} alike (one-sided exact test: p = {p:.2g})"
                    + (": the task's space may be enumerable" if enumerated else "")))
    flags += _unread_flags(reading, limit)
    complete = reading.source != "unavailable"
    summary = {"checked": True, "complete": complete, "n": N, "coverage": COVERAGE,
               "texts": len(sources), "bytes": bytes_read,
               "unread_bytes": reading.budget.unread_bytes, "hidden_grams": len(wanted),
               "control": "task" if hidden.control else "train",
               "control_rate": round(control_rate, 4), "splits": per_split,
               "files": reading.summary()}
    return CheckResult(flags=flags, summary=summary)


def _flag(severity: Severity, split: str, refs: list[str], total: int,
          found_by: dict[str, set[int]], sources: dict[str, Source],
          items: dict[str, tuple[HiddenItem, _Grams]], what: str) -> Flag:
    grams_of = set().union(*(items[r][1].question | items[r][1].answer for r in refs))
    where = [sources[label] for label, got in found_by.items() if got & grams_of]
    ev = Evidence(items=sorted(refs)[:MAX_ITEMS_SHOWN])
    for src in where[:50]:
        if src.kind == "tool_call":
            ev.tool_calls.append(int(src.ref))
        elif src.kind == "revision":
            ev.revisions.append(int(src.ref))
        elif src.kind == "job":
            ev.jobs.append(src.ref)
        if src.path and src.path not in ev.paths:
            ev.paths.append(src.path)
    finding = f"{len(refs)} of {total} hidden {split} items {what}"
    return Flag(kind="contamination", severity=severity, finding=finding, evidence=ev)


def _unread_flags(reading: Reading, limit: int) -> list[Flag]:
    """What the check could not read: unchecked, which is not clean."""
    flags: list[Flag] = []
    budget = reading.budget
    parts: list[str] = []
    paths: list[str] = []
    if budget.unread:
        worst = sorted(budget.unread, key=lambda p: (-budget.unread[p], p))
        parts.append(f"{budget.unread_bytes} bytes of {len(worst)} file"
                     f"{'s' if len(worst) != 1 else ''} past the audit's {limit}-byte budget "
                     "(recording.audit_read_bytes)")
        paths += worst
    if reading.unreadable:
        reasons = sorted(set(reading.unreadable.values()))
        parts.append(f"{len(reading.unreadable)} file{'s' if len(reading.unreadable) != 1 else ''}"
                     f" not readable ({', '.join(reasons[:4])})")
        paths += sorted(reading.unreadable)
    if reading.walked is not None and reading.walked.stopped:
        parts.append(f"the workspace walk stopped after {reading.walked.entries - 1} entries")
    if reading.source == "unavailable":
        parts.append("the workspace is not mounted (a finished run's volume is detached): the "
                     "files the jobs read were not read again")
    if parts:
        flags.append(Flag(kind="contamination", severity=Severity.medium,
                          finding="not fully read: " + "; ".join(parts) + ": unchecked",
                          evidence=Evidence(paths=list(dict.fromkeys(paths))[
                              :MAX_ITEMS_SHOWN])))
    if reading.gone:
        flags.append(Flag(kind="contamination", severity=Severity.low,
                          finding=f"{len(reading.gone)} file{'s' if len(reading.gone) != 1 else ''}"
                                  " the jobs read were gone by the audit: unchecked",
                          evidence=Evidence(paths=sorted(reading.gone)[:MAX_ITEMS_SHOWN])))
    return flags
