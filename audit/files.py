"""The workspace files the jobs opened (and the jobs' logs), listed, allotted and read: the
file half of what the contamination check reads (`audit/texts.py` has the record's own texts).

Why the workspace is read with care: it is the agent's. Files are opened from directory fds,
one name at a time, never through a link, only when regular (`audit/fs.py`): no depth or
name crashes the reader, no FIFO hangs it. A file's holes are skipped (SEEK_DATA/SEEK_HOLE:
a 100 GB sparse file costs its data; a hole reads as one boundary no n-gram spans). Its time
is bounded too, because the run's volume stays mounted until its audit ends: files and logs
together are read up to `recording.audit_read_bytes` (`ReadBudget`), allotted smallest first
(a compressed file by sixteen times its size: its text is what costs); what a file's share
leaves unread, and what could not be opened, is recorded per path (`Reading`). A file a
decoder fails on is read as it is. The task's own inputs are recognised by their hash and
skipped only when unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.layout import BASE_MODEL
from a2rl.store.queries import INITIAL_SOURCE, baseline_evaluation

from .decode import (
    COMPRESSED,
    Ctx,
    Cut,
    Notes,
    Out,
    Quota,
    bytes_texts,
    plain_texts,
    random_access_texts,
    sniff,
    stream_texts,
)
from .fs import Tree, Walked, open_at, open_file, split, why
from .ngrams import BOUNDARY
from .record import RunRecord
from .texts import ReadBudget, Reading, Source

CHUNK = 4 << 20
#: a compressed file is allotted this many times its size (its decoded text is what costs)
EXPANSION = 16


@dataclass
class Listed:
    """A file to read: its label, where it is, its data bytes and format."""

    source: Source
    parts: tuple[str, ...] | None = None  # in the workspace; None: a host file (`host`)
    host: Path | None = None
    blob_sha: str = ""  # a job's stored log, read when its file is gone
    data: int = 0
    kind: str = "plain"
    grant: int | None = None


def whole_record(record: RunRecord) -> bool:
    """Whether the kernel's access record saw every job whole (`Job.files_recorded`
    "complete") and named every file (a row of `/unnamed/inode/N` is a file it could not
    name, past PATH_MAX say): only then do the files it names stand for all the jobs read and
    wrote. Otherwise a job may have read anything, so the audit walks the whole workspace."""
    return (all(job.files_recorded == "complete" for job in record.jobs)
            and not any(row.path.startswith("/") for row in record.job_files))


def workspace_root(record: RunRecord) -> Path | None:
    """The run's workspace folder on the host while its files are there (a run being
    finished, a plain-folder workspace); None once its volume is detached (the files are then
    in workspace.img, and the stored texts are what the audit reads)."""
    if not record.run.workspace:
        return None
    root = Path(record.run.workspace)
    try:
        if root.is_symlink() or not root.is_dir() or not any(os.scandir(root)):
            return None
    except OSError:
        return None
    return root


def known_inputs(record: RunRecord, shipped: dict[str, str]) -> dict[str, tuple[str, int | None]]:
    """workspace path -> (sha256, size or None) of the task's own files as given: the initial
    revisions, the base model's files as the grader hashed them for the baseline, and
    `shipped` (the task's data files, from its loader)."""
    known: dict[str, tuple[str, int | None]] = {
        path: (sha, None) for path, sha in shipped.items()}
    with record.store.session() as s:
        for split_name in ("test", "dev"):
            ev = baseline_evaluation(s, record.run, split_name)
            hashes = (ev.provenance or {}).get("checkpoint_hashes") if ev is not None else None
            if hashes:
                known.update({f"{BASE_MODEL}/{rel}": (sha, None) for rel, sha in hashes.items()})
                break
    for rev in record.revisions:
        if rev.source == INITIAL_SOURCE and rev.blob_sha:
            known[rev.path] = (rev.blob_sha, rev.size)
    return known


def _data_size(st: os.stat_result) -> int:
    """A file's bytes that are data, not holes (its allocated blocks, at most its size); a
    tiny file kept inline in its inode has no blocks and counts its size."""
    blocks = getattr(st, "st_blocks", 0) * 512
    return min(st.st_size, blocks) if blocks else st.st_size


def _sha256(fd: int, size: int) -> str:
    h = hashlib.sha256()
    pos = 0
    while pos < size:
        data = os.pread(fd, min(CHUNK, size - pos), pos)
        if not data:
            break
        h.update(data)
        pos += len(data)
    return h.hexdigest()


def _head_kind(fd: int, size: int) -> str:
    head = os.pread(fd, 512, 0)
    return sniff(head, os.pread(fd, 8, max(size - 8, 0)) if size > 8 else b"")


class Files:
    """The workspace files (and job logs) to read, listed and allotted their budget."""

    def __init__(self, record: RunRecord, reading: Reading,
                 shipped: dict[str, str] | None = None) -> None:
        self.record, self.reading = record, reading
        self.root = workspace_root(record)
        self.known = known_inputs(record, shipped or {}) if self.root else {}
        self.readonly = tuple(p.strip("/") for p in record.run.readonly_paths or [])

    def _given(self, rel: str, fd: int, st: os.stat_result) -> bool:
        """Whether the open file is one of the task's inputs, unchanged (by its hash)."""
        want = self.known.get(rel)
        if want is None or (want[1] is not None and want[1] != st.st_size):
            return False
        if want[1] is None and not any(rel.startswith(p + "/") for p in self.readonly):
            return False  # a size unknown: hashed only where the sandbox mounts it read-only
        if _sha256(fd, st.st_size) != want[0]:
            return False
        with self.reading.lock:
            self.reading.inputs += st.st_size
        return True

    def _entry(self, rel: str, parts: tuple[str, ...], fd: int, st: os.stat_result
               ) -> Listed | None:
        if self._given(rel, fd, st):
            return None
        return Listed(Source("file", rel, rel, size=_data_size(st)), parts=parts,
                      data=_data_size(st), kind=_head_kind(fd, st.st_size))

    def listed(self) -> list[Listed]:
        """Every file to read, allotted: the jobs' logs, and the workspace's files the jobs
        opened (or, with no access record, all of them)."""
        out = self._logs()
        if self.root is None:
            self.reading.source = "unavailable" if self.record.run.workspace else "none"
        else:
            with Tree(self.root) as tree:
                if self.record.job_files and whole_record(self.record):
                    self.reading.source = "access record"
                    out += self._recorded(tree)
                else:  # no record, or a job it did not watch whole: every file is read
                    self.reading.source = "walk"
                    self.reading.walked = Walked()
                    for parts, _, dir_fd in tree.walk(self.reading.walked):
                        rel = "/".join(parts)
                        try:
                            fd, st = open_at(dir_fd, parts[-1])
                        except OSError as exc:
                            self.reading.unreadable[rel] = why(exc)
                            continue
                        try:
                            entry = self._entry(rel, parts, fd, st)
                        finally:
                            os.close(fd)
                        if entry is not None:
                            out.append(entry)
                    for rel, reason in self.reading.walked.problems.items():
                        self.reading.unreadable[rel] = reason
        self.reading.files = len(out)
        # smallest first: a cut then leaves out the fewest files, and one huge filler file
        # cannot use up the budget before the small files beside it are read
        for item in sorted(out, key=lambda x: (x.data, x.source.label)):
            if item.host is None and item.parts is None:
                continue  # a stored log: the store's, bounded by its own cap
            factor = EXPANSION if item.kind in COMPRESSED else 1
            item.grant = self.reading.budget.allot(item.source.ref, item.data * factor)
        return out

    def _recorded(self, tree: Tree) -> list[Listed]:
        rows = self.record.job_files
        read = {r.path for r in rows if r.read}
        out: list[Listed] = []
        for rel in sorted({r.path for r in rows if r.read or r.written}):
            parts = split(rel)
            if parts is None:
                self.reading.unreadable[rel] = "not a path in the workspace"
                continue
            try:
                fd, st = tree.open(parts)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    if rel in read:
                        self.reading.gone.append(rel)
                    else:
                        self.reading.gone_written += 1
                elif exc.errno == errno.EINVAL and _is_dir(tree, parts):
                    pass  # a folder the job listed: its files have rows of their own
                else:
                    self.reading.unreadable[rel] = why(exc)
                continue
            try:
                entry = self._entry(rel, parts, fd, st)
            finally:
                os.close(fd)
            if entry is not None:
                out.append(entry)
        return out

    def _logs(self) -> list[Listed]:
        """Each job's whole log from the supervisor's folder, or its stored head and tail."""
        folder = self.record.home / "control" / "joblogs" if self.record.home else None
        out: list[Listed] = []
        for job in self.record.jobs:
            name = (job.log_path or "").partition("/")[2]
            host = folder / name if folder and name and "/" not in name else None
            size = 0
            if host is not None:
                try:
                    fd, st = open_file(host)
                    os.close(fd)
                    size = _data_size(st)
                except OSError:
                    host = None
            if host is None and not job.log_blob_sha:
                continue
            out.append(Listed(Source("job", job.id, blob="" if host else job.log_blob_sha or ""),
                              host=host, blob_sha=job.log_blob_sha or "",
                              data=size if host else 0))
        return out

    def opened(self, items: list[Listed]) -> Iterator[tuple[Listed, int | None]]:
        """Each item to read (allotted something) with an open fd (None: not found; its
        stored log is read instead), in the order listed: the workspace's files opened from
        a second walk or one chain of folder fds, so that no depth costs a re-walk per file."""
        todo = [it for it in items if it.grant != 0]
        for it in (it for it in items if it.grant == 0):
            self.reading.budget.note_unread(it.source.ref, it.data)
        for item in (it for it in todo if it.parts is None):
            try:
                fd = open_file(item.host)[0] if item.host is not None else None
            except OSError:
                fd = None
            yield item, fd
        in_ws = {it.parts: it for it in todo if it.parts is not None}
        if not in_ws or self.root is None:
            return
        with Tree(self.root) as tree:
            if self.reading.walked is not None:
                for parts, _, dir_fd in tree.walk(Walked()):
                    item = in_ws.pop(parts, None)
                    if item is not None:
                        yield item, self._open(item, functools.partial(_open_in, dir_fd))
            for item in sorted(in_ws.values(), key=lambda x: x.parts or ()):
                yield item, self._open(item, tree.open)

    def _open(self, item: Listed, opener: Callable[[tuple[str, ...]], tuple[int, Any]]
              ) -> int | None:
        assert item.parts is not None
        try:
            return opener(item.parts)[0]
        except OSError as exc:
            self.reading.unreadable[item.source.ref] = why(exc)
            return None

    def texts(self, item: Listed, fd: int | None) -> Iterator[Out]:
        """The texts of one listed file from its open fd (closed here), within its grant: run
        where it is consumed, so a worker thread decodes its own."""
        notes = Notes()
        ctx = Ctx(Quota(item.grant), notes, Quota(item.grant))
        rel = item.source.ref
        if fd is None:
            if item.blob_sha:  # a job's log whose file is gone: its stored head and tail
                with contextlib.suppress(KeyError, Cut):
                    yield from bytes_texts(self.record.blob(item.blob_sha), ctx)
            return
        f = os.fdopen(fd, "rb", buffering=0)
        try:
            yield from file_texts(f, os.fstat(fd), item, ctx, self.reading.budget)
        except Cut:
            notes.cut = True
            self.reading.budget.note_unread(rel, max(1, item.data - _tell(f)))
        except Exception as exc:  # noqa: BLE001 - what the decoders cannot read is read raw
            notes.error(rel[:80], exc)
            # read raw within what is left of its grant: a decoder that fails late must not
            # make the file cost its grant twice
            left = item.grant if ctx.pieces.left is None else max(ctx.pieces.left, 0)
            try:
                yield from plain_texts(read_chunks(fd, os.fstat(fd), limit=left, rel=rel),
                                       Ctx(Quota(), notes, Quota(left)))
            except (OSError, Cut) as again:
                with self.reading.lock:
                    self.reading.unreadable.setdefault(rel, f"not read: {why(again)}"
                                                       if isinstance(again, OSError) else
                                                       "not read")
        finally:
            f.close()
            self.reading.absorb(notes)


def _open_in(dir_fd: int, parts: tuple[str, ...]) -> tuple[int, os.stat_result]:
    return open_at(dir_fd, parts[-1])


def _is_dir(tree: Tree, parts: tuple[str, ...]) -> bool:
    try:
        return stat.S_ISDIR(tree.lstat(parts).st_mode)
    except OSError:
        return False


def _tell(f: Any) -> int:
    try:
        return int(f.tell())
    except (OSError, ValueError):
        return 0


def file_texts(f: Any, st: os.stat_result, item: Listed, ctx: Ctx,
               budget: ReadBudget) -> Iterator[Out]:
    """An open file's texts by its format: plain files read by their data regions (holes
    skipped), containers decoded."""
    fd = f.fileno()
    kind = item.kind if item.source.kind == "file" else _head_kind(fd, st.st_size)
    if kind == "plain":  # its grant bounds the bytes read (holes' boundaries are free)
        plain = Ctx(Quota(), ctx.notes, ctx.pieces)
        yield from plain_texts(read_chunks(fd, st, limit=item.grant, rel=item.source.ref,
                                           budget=budget), plain)
        return
    ctx.notes.formats.add(kind)
    if kind in ("gzip", "zstd", "bz2", "xz", "tar"):
        yield from stream_texts(f, ctx)
        return
    yield from random_access_texts(kind, f, st.st_size, ctx, lambda: _mapped(fd))


def _mapped(fd: int) -> object:
    """The open file as pyarrow maps it (its own fd's /proc entry: no path of the agent's)."""
    import pyarrow as pa  # ~50 ms, only for a container that needs it (`audit/arrays.py`)

    return pa.memory_map(f"/proc/self/fd/{fd}")


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


def read_chunks(fd: int, st: os.stat_result, *, limit: int | None = None, rel: str = "",
                budget: ReadBudget | None = None) -> Iterator[bytes]:
    """A regular file's data in chunks of about CHUNK bytes, each hole read as one BOUNDARY
    and at most `limit` data bytes (the rest noted unread in `budget`)."""
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


def file_chunks(path: Path) -> Iterator[bytes]:
    """A host file's data (holes skipped), for tests and tools: nothing for a link or FIFO."""
    try:
        fd, st = open_file(path)
    except OSError:
        return
    try:
        yield from read_chunks(fd, st)
    finally:
        os.close(fd)

