"""What the recorder keeps: one row per (job, path), and the journal the server ingests.

A row says whether the job's processes closed the file after reading it (opened without
write access) or after writing it (opened with write access), when first and last, and the
size and sha256 of the file at its last write-close. The hash is read by a thread from the
event's own descriptor (reading it raises no event), then the file is looked at again: if it
changed meanwhile (another write), the hash is dropped, never given to the wrong write.

Rows changed since the last flush are appended to the journal, whole, as one JSON line
{"rows": [[job, path, read, written, first, last, size, sha256], ...], "at": t}; start and end
lines say when this recorder watched. The server reads the journal from where it stopped
(`a2rl.tools.access_record`), so a row seen twice is simply its later state.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import stat
import threading
import time
from typing import Any

CHUNK = 1 << 20
#: a written file up to this size is hashed at once; a larger one by the hashing thread, at
#: most QUEUED waiting (each holds a descriptor), so a job writing 100,000 files costs time,
#: never the recorder's descriptors
INLINE_BYTES = 256 << 10
QUEUED = 64
#: what a run's writes may make the recorder read to hash them, a token bucket: a burst of
#: HASH_BURST bytes, refilled at HASH_RATE bytes a second. The recorder runs outside the
#: run's cgroup, so a job that rewrites one byte of a 10 GB file in a loop must not make it
#: hash 10 GB each time without bound: past it a write is recorded without its hash (never a
#: guessed one), as is a sparse file (holes no checkpoint has: a 100 GB file of nothing)
HASH_BURST = 64 << 30
HASH_RATE = 256 << 20


class Row:
    __slots__ = ("job", "path", "read", "written", "first", "last", "size", "sha", "writes")

    def __init__(self, job: str | None, path: str, at: float) -> None:
        self.job, self.path = job, path
        self.read = self.written = False
        self.first = self.last = at
        self.size: int | None = None
        self.sha: str | None = None
        self.writes = 0  # write-closes seen: a hash is kept only for the latest

    def as_list(self) -> list[Any]:
        return [self.job, self.path, self.read, self.written, round(self.first, 6),
                round(self.last, 6), self.size, self.sha]


class Ledger:
    def __init__(self, journal: str) -> None:
        self._fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.rows: dict[tuple[str | None, str], Row] = {}
        self._dirty: set[tuple[str | None, str]] = set()
        self._lock = threading.Lock()
        self._hashes: queue.Queue[tuple[tuple[str | None, str], int, int, os.stat_result]] = (
            queue.Queue(QUEUED))
        self.events = 0
        #: (device, inode, size, mtime, ctime) -> sha256 of files hashed: a close after an
        #: open for writing that changed nothing is not hashed again
        self._known: dict[tuple[int, int, int, int, int], str] = {}
        self._tokens, self._filled = float(HASH_BURST), time.monotonic()
        threading.Thread(target=self._hash_forever, name="hasher", daemon=True).start()

    def _may_hash(self, st: os.stat_result) -> bool:
        """Whether a file of `st` is hashed: not sparse, and within the hashing budget."""
        if st.st_blocks * 512 < st.st_size // 2:  # mostly holes
            return False
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(HASH_BURST),
                               self._tokens + (now - self._filled) * HASH_RATE)
            self._filled = now
            if self._tokens < st.st_size:
                return False
            self._tokens -= st.st_size
            return True

    def line(self, kind: str, **fields: Any) -> None:
        """A start, end or error line."""
        self._write({"t": kind, "at": time.time(), **fields})

    def _write(self, record: dict[str, Any]) -> None:
        data = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def note(self, job: str | None, path: str, written: bool, fd: int,
             st: os.stat_result) -> None:
        """A close of `path` by `job`'s process; a written regular file is hashed from a
        copy of `fd` (the caller keeps its own)."""
        now = time.time()
        key = (job, path)
        with self._lock:
            self.events += 1
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = Row(job, path, now)
            row.last = now
            if written:
                row.written = True
                row.writes += 1
                row.size, row.sha = st.st_size, None
            else:
                row.read = True
            self._dirty.add(key)
            writes = row.writes
        if not written or not stat.S_ISREG(st.st_mode):
            return
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if (known := self._known.get(ident)) is not None:
            self._hashed(key, writes, known)
            return
        if not self._may_hash(st):
            return
        if st.st_size <= INLINE_BYTES:
            self._hashed(key, writes, _digest(fd, st), st)
        else:
            self._hashes.put((key, writes, os.dup(fd), st))  # waits while QUEUED are queued

    def _hashed(self, key: tuple[str | None, str], writes: int, digest: str | None,
                st: os.stat_result | None = None) -> None:
        with self._lock:
            if digest is not None and st is not None:
                if len(self._known) > 100_000:  # bounded: forget, hash again if need be
                    self._known.clear()
                self._known[(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                             st.st_ctime_ns)] = digest
            row = self.rows.get(key)
            if row is not None and row.writes == writes and digest is not None:
                row.sha = digest
                self._dirty.add(key)

    def flush(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            rows = [self.rows[k].as_list() for k in sorted(self._dirty, key=_order)]
            self._dirty.clear()
        self._write({"t": "rows", "at": time.time(), "rows": rows})

    def hashes_done(self, timeout: float) -> bool:
        """Wait until every queued hash is done (or `timeout` passes)."""
        end = time.monotonic() + timeout
        while self._hashes.unfinished_tasks:
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

    def _hash_forever(self) -> None:
        while True:
            key, writes, fd, before = self._hashes.get()
            try:
                self._hashed(key, writes, _digest(fd, before), before)
            finally:
                os.close(fd)
                self._hashes.task_done()


def _order(key: tuple[str | None, str]) -> tuple[str, str]:
    return (key[0] or "", key[1])


def _digest(fd: int, before: os.stat_result) -> str | None:
    """The file's sha256 if it did not change since `before` (its size, mtime and ctime at
    the close) while it was read; None otherwise, or if it cannot be read."""
    h = hashlib.sha256()
    offset = 0
    try:
        while chunk := os.pread(fd, CHUNK, offset):
            h.update(chunk)
            offset += len(chunk)
        after = os.fstat(fd)
    except OSError:
        return None
    unchanged = (offset == before.st_size == after.st_size
                 and after.st_mtime_ns == before.st_mtime_ns
                 and after.st_ctime_ns == before.st_ctime_ns)
    return h.hexdigest() if unchanged else None
