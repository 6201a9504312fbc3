"""Every text the agent produced or its jobs read, streamed: what the contamination check reads.

Sources, each with the evidence a flag names:

- tool calls: their whole arguments (the blob kept where the stored row was cut, issue 43),
  failed calls included;
- jobs: each whole command, and its whole output log from the supervisor's folder (the
  stored blob keeps only head and tail; it is read when the file is gone);
- revisions: their stored contents (each distinct content once; the task's initial files are
  the task's, not the agent's);
- the workspace's files: exactly those the jobs opened, read or written, as the kernel
  recorded them (`JobFile`), whatever their folder, name, size or format. Where the run has no
  such record (no root, no volume: the recording needs both), the whole workspace is walked
  instead, and the summary says which (`files.source`).

Every text goes through the decoders (`audit/decode.py`): a JSON file is read unescaped, an
archive as its members, a Parquet or Arrow table as its strings, a base64 run as what it
encodes. No file is skipped by name; the task's own inputs are recognised by their hash
(the base model's files as the grader hashed them for the baseline, `data/train.jsonl` as
the task writes it, the files recorded when the run was made), and only when unchanged.

How the workspace's files are listed, opened and read: `audit/files.py`. What could not be
read is recorded (`Reading`, with the budget's `ReadBudget`), and the check says so in a
flag: "not checked" must not read as "clean".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from a2rl.store.queries import INITIAL_SOURCE

from .decode import (
    Ctx,
    Notes,
    Out,
    bytes_texts,
    plain_texts,
)
from .fs import Walked
from .record import RunRecord

#: what one file costs the budget at least (its block on disk): a million empty files are not
#: a million free reads
MIN_FILE_COST = 4096
TRUNCATED_KEY = "_truncated"


@dataclass
class ReadBudget:
    """Bytes the audit may still read from files (None: no limit), and what it left unread.

    Allotted per file as the files are listed, smallest first (then by path), so an audit of
    the same workspace reads the same bytes whichever worker thread reads them."""

    left: int | None = None
    unread: dict[str, int] = field(default_factory=dict)  # path -> bytes not read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allot(self, rel: str, want: int) -> int | None:
        """How many bytes file `rel` may feed, of the `want` it would (None: all)."""
        if self.left is None:
            return None
        granted = min(max(want, MIN_FILE_COST), self.left)
        self.left -= granted
        return granted

    def note_unread(self, rel: str, n: int) -> None:
        if n > 0:
            with self._lock:  # readers in worker threads note what their share cut
                self.unread[rel] = self.unread.get(rel, 0) + n

    @property
    def unread_bytes(self) -> int:
        return sum(self.unread.values())


@dataclass
class Reading:
    """What reading the run's texts met besides its texts, for the check's summary and flags.
    Written by worker threads too (under the lock)."""

    budget: ReadBudget
    source: str = "none"  # access record | walk | unavailable | none
    files: int = 0  # files listed to read
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why it was not read
    gone: list[str] = field(default_factory=list)  # files jobs read that are gone
    gone_written: int = 0  # files jobs wrote that are gone (renamed, deleted): not read
    inputs: int = 0  # bytes of the task's inputs recognised by hash, unchanged
    numeric: int = 0  # bytes of numeric arrays skipped
    formats: dict[str, int] = field(default_factory=dict)  # format -> sources holding it
    errors: list[str] = field(default_factory=list)
    walked: Walked | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def absorb(self, notes: Notes) -> None:
        with self.lock:
            self.numeric += notes.numeric
            for f in notes.formats:
                self.formats[f] = self.formats.get(f, 0) + 1
            self.errors.extend(notes.errors[:max(0, 20 - len(self.errors))])

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "files": self.files,
                               "unreadable": len(self.unreadable), "gone": len(self.gone),
                               "gone_written": self.gone_written, "inputs_unchanged_bytes":
                               self.inputs, "numeric_bytes_skipped": self.numeric,
                               "formats": dict(sorted(self.formats.items()))}
        if self.walked is not None:
            out["walk"] = {"entries": self.walked.entries, "stopped": self.walked.stopped,
                           "problems": len(self.walked.problems)}
        if self.errors:
            out["decode_errors"] = self.errors[:20]
        return out


@dataclass(frozen=True)
class Source:
    """Where a text came from: a label for matches and the evidence a flag shows."""

    kind: str  # tool_call | revision | job | file
    ref: str  # the id (tool call, revision, job) or the workspace path
    path: str = ""
    #: the stored blob's sha when the text is one (a job's log): equal shas, equal texts, so
    #: a reader can match one and give its result to the others
    blob: str = ""
    #: a file's data bytes when it was listed (0 for the others)
    size: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.ref}"


# -- the record's own texts --------------------------------------------------------------------

def call_text(record: RunRecord, call: Any) -> str:
    """A tool call's arguments as the sandbox received them: the whole JSON kept where the
    stored row was cut, else the stored arguments."""
    sha = getattr(call, "arguments_blob", None)
    if sha:
        try:
            return record.blob(sha).decode(errors="replace")
        except KeyError:
            pass
    return tool_call_text(call)


def tool_call_text(call: object) -> str:
    args = getattr(call, "arguments", None) or {}
    return json.dumps(args, ensure_ascii=False) if not isinstance(args, str) else args


def arguments_not_kept(call: Any) -> int:
    """Bytes of a cut call's arguments the record does not hold whole (0: all held)."""
    cut = (getattr(call, "arguments", None) or {}).get(TRUNCATED_KEY) or {}
    if not cut or getattr(call, "arguments_blob", None):
        return 0
    return max(1, sum(int(v.get("size", 0)) for v in cut.values() if isinstance(v, dict)))


def record_texts(record: RunRecord, ctx: Callable[[], Ctx]
                 ) -> Iterator[tuple[Source, Iterator[Out]]]:
    """The texts the store holds: tool calls, commands, revisions (each through the
    decoders, with a context from `ctx()`)."""
    for call in record.tool_calls:
        yield (Source("tool_call", str(call.id)),
               plain_texts(iter((call_text(record, call).encode(),)), ctx()))
    for job in record.jobs:
        yield Source("job", job.id), plain_texts(iter((job.command.encode(),)), ctx())
    seen: set[str] = set()
    for rev in record.revisions:
        if (rev.source == INITIAL_SOURCE or not rev.blob_sha or not rev.content_stored
                or rev.blob_sha in seen):
            continue
        seen.add(rev.blob_sha)
        try:
            data = record.blob(rev.blob_sha)
        except KeyError:
            continue
        yield Source("revision", str(rev.id), rev.path, blob=rev.blob_sha), bytes_texts(data,
                                                                                        ctx())
