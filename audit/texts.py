"""Every text an agent produced in a run, streamed: what the text checks read.

Sources, each with the evidence a flag names: tool calls' arguments (commands, edited files'
contents, failed calls included), revisions' stored contents (each distinct content once; the
task's initial files are the task's, not the agent's), job output logs, and the files left in
the workspace that no stored revision holds (large generated training data: the revision
scanner stores files up to `revision_max_bytes`).

Why the workspace is read with care: it is the agent's. Files are opened without following
symlinks and only when they are regular files (no FIFO, no device); the sandbox is stopped
when the audit runs, and a file is read in chunks, so a huge one costs bounded memory. Its
time is bounded too, because the run's volume stays mounted until its audit ends: a file's
holes are skipped (SEEK_DATA/SEEK_HOLE: a 100 GB sparse file costs its data, not its size;
a hole reads as one boundary, which no hidden n-gram spans, exactly as its zeros would), and
all files together are read up to `Settings.audit_read_bytes` (`ReadBudget`). What the budget
leaves unread is counted per file, and the contamination check says so in a flag: "not
checked" must not read as "clean".
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.store.queries import INITIAL_SOURCE

from .ngrams import BOUNDARY
from .record import RunRecord

CHUNK = 4 << 20
#: what no agent text is: model weights and archives (read as text they only cost time)
BINARY_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy", ".npz",
                   ".img", ".so", ".pyc", ".gz", ".zip", ".tar", ".zst", ".arrow", ".parquet")
#: folders the task laid out and the agent does not write (the base model's weights)
SKIP_DIRS = {"base_model", ".git", "__pycache__", ".cache"}
#: what one file costs the budget at least (its block on disk): a million empty files are not
#: a million free reads
MIN_FILE_COST = 4096


@dataclass
class ReadBudget:
    """Workspace bytes the audit may still read (None: no limit), and what it left unread.

    Allotted per file as the files are listed, smallest data first (then by path), so an
    audit of the same workspace reads the same bytes whichever worker thread reads them."""

    left: int | None = None
    unread: dict[str, int] = field(default_factory=dict)  # workspace path -> bytes not read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allot(self, rel: str, data: int) -> int | None:
        """How many of file `rel`'s `data` bytes may be read (None: all); the rest is unread."""
        if self.left is None:
            return None
        granted = min(max(data, MIN_FILE_COST), self.left)
        self.left -= granted
        if granted == 0:
            self.note_unread(rel, data)  # a file the reader cuts notes its own rest
        return min(data, granted)

    def note_unread(self, rel: str, n: int) -> None:
        if n > 0:
            with self._lock:  # readers in worker threads note what their limit cut
                self.unread[rel] = self.unread.get(rel, 0) + n

    @property
    def unread_bytes(self) -> int:
        return sum(self.unread.values())


@dataclass(frozen=True)
class Source:
    """Where a text came from: a label for matches and the evidence a flag shows."""

    kind: str  # tool_call | revision | job | file
    ref: str  # the id (tool call, revision, job) or the workspace path
    path: str = ""
    #: the stored blob's sha when the text is one (a job's log): equal shas, equal texts, so
    #: a reader can match one and give its result to the others
    blob: str = ""
    #: a workspace file's size when it was listed (0 for the others)
    size: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.ref}"


def tool_call_text(call: object) -> str:
    args = getattr(call, "arguments", None) or {}
    return json.dumps(args, ensure_ascii=False) if not isinstance(args, str) else args


def _data_size(st: os.stat_result) -> int:
    """A file's bytes that are data, not holes (its allocated blocks, at most its size); a
    tiny file kept inline in its inode has no blocks and counts its size."""
    blocks = getattr(st, "st_blocks", 0) * 512
    return min(st.st_size, blocks) if blocks else st.st_size


def _extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of each data region of the open file, holes skipped; the whole file
    as one region where the filesystem cannot tell holes."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos: the rest is a hole
                return
            yield pos, size - pos  # SEEK_DATA unsupported: read it all
            return
        end = min(end, size)
        if end > start:
            yield start, end - start
        pos = max(end, start + 1)


def _read_chunks(path: Path, *, limit: int | None = None, rel: str = "",
                 budget: ReadBudget | None = None) -> Iterator[bytes]:
    """A regular file's data in chunks of about CHUNK bytes, each hole read as one BOUNDARY
    and at most `limit` data bytes (the rest noted unread in `budget`); nothing for a link,
    FIFO or device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        left = st.st_size if limit is None else limit
        read = held = 0
        pending: list[bytes] = []
        at = 0  # where the last region read ended: a gap before the next one is a hole
        for start, length in _extents(fd, st.st_size):
            if left <= 0:  # cut before this region: the rest of its data (a byte at least)
                if budget is not None:
                    budget.note_unread(rel, max(length, _data_size(st) - read))
                break
            if start > at and (pending or at):
                pending.append(BOUNDARY)
            pos, end = start, start + min(length, left)
            while pos < end:
                data = os.pread(fd, min(CHUNK, end - pos), pos)
                if not data:  # shorter than listed: nothing is left to read
                    length = pos - start
                    break
                pending.append(data)
                held += len(data)
                read += len(data)
                pos += len(data)
                left -= len(data)
                if held >= CHUNK:  # many small regions coalesce: few, large feeds
                    yield b"".join(pending)
                    pending, held = [], 0
            at = pos
            if pos < start + length:  # cut inside this region
                if budget is not None:
                    budget.note_unread(rel, max(start + length - pos, _data_size(st) - read))
                break
        if pending:
            yield b"".join(pending)
    finally:
        os.close(fd)


def workspace_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every regular file under `root`, not following links."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS
                             and not (base / d).is_symlink())
        for name in sorted(filenames):
            if name.endswith(BINARY_SUFFIXES):
                continue
            path = base / name
            yield path.relative_to(root).as_posix(), path


def workspace_root(record: RunRecord) -> Path | None:
    """The run's workspace folder on the host while its files are there (a run being
    finished, a plain-folder workspace); None once its volume is detached (the files are then
    in workspace.img, and the stored revisions are what the audit reads)."""
    if not record.run.workspace:
        return None
    root = Path(record.run.workspace)
    try:
        if root.is_symlink() or not root.is_dir() or not any(root.iterdir()):
            return None
    except OSError:
        return None
    return root


def agent_texts(record: RunRecord, *, tool_calls: bool = True, workspace: bool = True,
                budget: ReadBudget | None = None) -> Iterator[tuple[Source, Iterator[bytes]]]:
    """Every text of the run's agent, as (source, its bytes in chunks); the workspace's files
    within `budget` (None: read whole)."""
    if tool_calls:
        for call in record.tool_calls:
            yield Source("tool_call", str(call.id)), iter((tool_call_text(call).encode(),))
    stored: dict[str, set[int | None]] = {}
    seen_blobs: set[str] = set()
    for rev in record.revisions:
        if rev.source == INITIAL_SOURCE or not rev.blob_sha:
            continue
        stored.setdefault(rev.path, set()).add(rev.size)
        if not rev.content_stored or rev.blob_sha in seen_blobs:
            continue
        seen_blobs.add(rev.blob_sha)
        try:
            data = record.blob(rev.blob_sha)
        except KeyError:
            continue
        yield Source("revision", str(rev.id), rev.path), iter((data,))
    for job in record.jobs:
        log, sha = _job_log(record, job)
        if log is not None:
            yield Source("job", job.id, blob=sha), log
    root = workspace_root(record) if workspace else None
    if root is not None:
        initial = {r.path for r in record.revisions if r.source == INITIAL_SOURCE}
        # the task's inputs, mounted read-only in the sandbox: the agent cannot have written them
        given = [p.strip("/") for p in record.run.readonly_paths or []]
        files: list[tuple[int, str, Path]] = []
        for rel, path in workspace_files(root):
            if any(rel == g or rel.startswith(g + "/") for g in given):
                continue
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            stored_sizes = stored.get(rel, set())
            if st.st_size in stored_sizes and st.st_size <= CHUNK:
                continue  # the stored revision of that content was read
            if rel in initial and not stored_sizes:
                continue  # the task's file, unchanged since creation
            files.append((_data_size(st), rel, path))
        # smallest first: a budget cut then leaves out the fewest files, and one huge filler
        # file cannot use up the budget before the small files beside it are read
        for data, rel, path in sorted(files):
            limit = budget.allot(rel, data) if budget is not None else None
            if limit == 0:
                continue
            yield (Source("file", rel, rel, size=data),
                   _read_chunks(path, limit=limit, rel=rel, budget=budget))


def _job_log(record: RunRecord, job: object) -> tuple[Iterator[bytes] | None, str]:
    """The job's output and the sha of the blob it came from ("" when read from its file)."""
    sha = getattr(job, "log_blob_sha", None)
    if sha:
        try:
            return iter((record.blob(sha),)), sha
        except KeyError:
            pass
    log_path = getattr(job, "log_path", "")
    if log_path and Path(log_path).is_file():
        return _read_chunks(Path(log_path)), ""
    return None, ""
