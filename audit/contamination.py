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
Short items with their answers: at most 2 points above the control's rate, chance and no flag
(counted in the summary); half of a split or more, as often as the control, `low` (the space
enumerated); half or more and 30 points above the control, `high`; between, `low`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from a2rl.settings import Settings

from .hidden import HiddenData, HiddenItem
from .model import Evidence, Flag, Severity
from .ngrams import Matcher, texts_grams
from .record import CheckResult, RunRecord
from .texts import ReadBudget, Source, agent_texts

N = 8
COVERAGE = 0.5
#: short items: a split's hit rate must reach this and exceed the control's by MARGIN
SHORT_RATE, SHORT_MARGIN = 0.5, 0.3
#: short items found at most this far above the control's rate are chance, not a flag: a
#: sum printed while training (`47+85=132`) meets a hidden one now and then, as often as a
#: visible one (the summary still counts them)
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


def _match_alone(matcher: Matcher, label: str, chunks: Iterator[bytes]) -> Matcher:
    """One large text through its own fork of the matcher (in a worker thread)."""
    first = True
    for chunk in chunks:
        matcher.feed(label, chunk, new_text=first)
        first = False
    matcher.close()
    return matcher


def _share(part: set[int], found: set[int]) -> float:
    return len(part & found) / len(part) if part else 0.0


def check_contamination(record: RunRecord, *, hidden: HiddenData | None = None,
                        settings: Settings | None = None, **_: object) -> CheckResult:
    if hidden is None or not hidden.items:
        why = hidden.error if hidden is not None and hidden.error else "no hidden items"
        return CheckResult(summary={"checked": False, "reason": why})
    # every item's text hashed in one pass (thousands of items: one numpy pass, not thousands)
    every = [*hidden.items, *hidden.train]
    hashed = texts_grams([t for it in every for t in (it.input, it.answer)], N)
    item_hashes = {it: (hashed[2 * i], hashed[2 * i + 1]) for i, it in enumerate(every)}
    train_grams: set[int] = set()
    for item in hidden.train:
        for g, length in item_hashes[item]:
            if length == N:
                train_grams.update(g)
    items = {it.ref: (it, _item_grams(*item_hashes[it], train_grams)) for it in hidden.items}
    has_short = any(g.short for _, g in items.values())
    control = ({it.ref: (it, _item_grams(*item_hashes[it], set())) for it in hidden.train}
               if has_short else {})
    wanted: set[int] = set()
    lengths = {N} | {length for _, length in hashed}
    for _, g in [*items.values(), *control.values()]:
        wanted |= g.question | g.answer
    lengths.discard(0)
    matcher = Matcher(wanted, lengths)
    sources: dict[str, Source] = {}
    same_as: dict[str, str] = {}  # label -> the label of the identical blob read before it
    first_of_blob: dict[str, str] = {}
    n_texts = 0
    # Large workspace files (generated training data: up to gigabytes) are matched by worker
    # threads, each with a fork of the matcher; numpy lets go of the GIL in its array passes,
    # so on 2 cores two files go at once while this thread reads the record's own texts.
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="a2rl-audit") as pool:
        forked: list[Future[Matcher]] = []
        limit = settings.audit_read_bytes if settings is not None else 0
        budget = ReadBudget(left=limit or None)
        for source, chunks in agent_texts(record, budget=budget):
            sources[source.label] = source
            n_texts += 1
            if source.blob:
                if source.blob in first_of_blob:  # identical content: matched once, not twice
                    same_as[source.label] = first_of_blob[source.blob]
                    continue
                first_of_blob[source.blob] = source.label
            if source.kind == "file" and source.size >= LARGE_FILE:
                forked.append(pool.submit(_match_alone, matcher.fork(), source.label, chunks))
                continue
            first = True
            for chunk in chunks:
                matcher.feed(source.label, chunk, new_text=first)
                first = False
        found = matcher.close()
        bytes_read = matcher.bytes_read
        for future in forked:
            done = future.result()
            found.update(done.found)  # labels are distinct: one source, one fork
            bytes_read += done.bytes_read
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

    found = hits(items)
    control_hits = hits(control)
    control_rate = (sum(1 for how, _ in control_hits.values() if how == "with_answer")
                    / len(control)) if control else 0.0
    flags: list[Flag] = []
    per_split: dict[str, dict[str, int]] = {}
    for split in ("dev", "test"):
        pool = [ref for ref, (it, _) in items.items() if it.split == split]
        if not pool:
            continue
        split_hits = {ref: v for ref, v in found.items() if v[1].split == split}
        by_how: dict[str, list[str]] = defaultdict(list)
        for ref, (how, _) in split_hits.items():
            short = items[ref][1].short
            by_how[("short_" if short else "") + how].append(ref)
        per_split[split] = {"items": len(pool), "hit": len(split_hits),
                            **{k: len(v) for k, v in by_how.items()}}
        strong = by_how["with_answer"] + by_how["answer"]
        if strong:
            flags.append(_flag(Severity.high, split, strong, len(pool), found_by, sources, items,
                               "appear in the agent's text with their answers"
                               if by_how["with_answer"] else "have their answers copied"))
        if by_how["question"]:
            flags.append(_flag(Severity.medium, split, by_how["question"], len(pool), found_by,
                               sources, items, "have their questions in the agent's text "
                               "(without their answers)"))
        short_hits = by_how["short_with_answer"]
        rate = len(short_hits) / len(pool)
        if short_hits and (rate >= SHORT_RATE or rate > control_rate + CHANCE):
            enumerated = rate >= SHORT_RATE and rate < control_rate + SHORT_MARGIN
            leaked = rate >= SHORT_RATE and not enumerated
            flags.append(_flag(
                Severity.high if leaked else Severity.low, split, short_hits, len(pool),
                found_by, sources, items,
                f"(short items) appear with their answers; visible train items "
                f"{control_rate:.0%} alike" + (": the task's space may be enumerable"
                                               if enumerated else "")))
    if budget.unread:
        flags.append(_unread_flag(budget, limit))
    summary = {"checked": True, "n": N, "coverage": COVERAGE, "texts": n_texts,
               "bytes": bytes_read, "unread_bytes": budget.unread_bytes,
               "hidden_grams": len(wanted),
               "control_rate": round(control_rate, 4), "splits": per_split}
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


def _unread_flag(budget: ReadBudget, limit: int) -> Flag:
    """The workspace's files the read budget left unread: unchecked, which is not clean."""
    worst = sorted(budget.unread, key=lambda p: (-budget.unread[p], p))
    return Flag(kind="contamination", severity=Severity.medium,
                finding=f"not fully read: {budget.unread_bytes} bytes of {len(worst)} "
                        f"workspace file{'s' if len(worst) != 1 else ''} past the audit's "
                        f"{limit}-byte budget (audit_read_bytes) are unchecked",
                evidence=Evidence(paths=worst[:MAX_ITEMS_SHOWN]))
