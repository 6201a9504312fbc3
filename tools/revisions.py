"""Code revisions: every change to a workspace file becomes a row, whoever made it.

The scanner compares the workspace with the last recorded version of each file. It is run
after every command, at each job's end and after `edit_file`, so that a file changed by a
training script is recorded just like one changed through our tools. Unchanged files are
recognised by (mtime, size) and never re-hashed.

The walk goes through `workspace_fs` (directory fds, never a symlink followed, never a FIFO
opened, iterative with depth and entry caps): the workspace is the agent's, so a tower of
nested folders, a FIFO or a symlink swapped in mid-scan costs a bounded walk, not a hang, a
host file or a RecursionError.

A walk its caps stop must not lie (issue 43: 100,000 symlinks in a folder that sorts first
used up the entry cap, and every file after it was recorded as deleted). So links and special
files are passed over by their directory entry's type and not counted; a walk that still
stops (entries, or folders below its depth) is recorded (`BudgetEvent` "scan_stopped": what
it did not see has no revision), and then deletes nothing it did not see: every file it
knew is looked up by name before being called deleted, and the files the jobs wrote (the
kernel's record, `JobFile`) are looked up too, so they get their revisions wherever they are.

The task's own files are recorded once when the run is made (`record_initial`, source
"initial"), so that the first scan after the agent's first command compares with them: they
are where the agent started, not code revisions it made.

The store is shared by every run, so one run's revisions may store at most `run_max_bytes` of
content (`recording.revision_run_max_bytes`; the task's initial files do not count, content already
stored for the run counts once). Past it a change is still recorded, with its path, size and
sha256, but `content_stored=False` and no blob: a job writing thousands of distinct files per
command costs the store rows, not their bytes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from sqlalchemy import func
from sqlmodel import select

from a2rl.sandbox.workspace_fs import WalkCapped, WalkStats, WorkspaceError, WorkspaceFS, split_path
from a2rl.store import Blob, JobFile, Revision, Store
from a2rl.store.queries import INITIAL_SOURCE
from a2rl.store.records import budget
from a2rl.store.records import revisions as revision_rows
from a2rl.store.records.revisions import Change

#: The scan stops descending below this depth and after this many entries (and logs it).
SCAN_MAX_DEPTH = 32
SCAN_MAX_ENTRIES = 100_000

log = logging.getLogger(__name__)


@dataclass
class _Seen:
    mtime_ns: int
    size: int
    sha: str | None


class RevisionScanner:
    def __init__(
        self, store: Store, run_id: str, root: Path, exclude: list[str], max_bytes: int,
        run_max_bytes: int = 0,
    ) -> None:
        self.store, self.run_id, self.root = store, run_id, root
        self.exclude, self.max_bytes = exclude, max_bytes
        self.run_max_bytes = run_max_bytes  # 0: no limit
        self._stored: set[str] | None = None  # shas whose content this run stored
        self._stored_bytes = 0
        self._warned = False
        self._pruned = frozenset(p[:-2] for p in exclude
                                 if p.endswith("/*") and "*" not in p[:-2])
        self.fs = WorkspaceFS(root)
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] | None = None
        self._last_snapshot: tuple[int, dict[str, str]] | None = None  # id, {path: sha}

    def _load(self) -> dict[str, _Seen]:
        """The last recorded version of each path, from the store (the source of truth)."""
        latest = (select(func.max(Revision.id)).where(Revision.run_id == self.run_id)
                  .group_by(Revision.path))
        with self.store.session() as s:
            rows = s.exec(select(Revision.path, Revision.blob_sha)
                          .where(Revision.id.in_(latest))).all()  # type: ignore[union-attr]
        return {path: _Seen(-1, -1, sha) for path, sha in rows if sha is not None}

    def _load_stored(self) -> set[str]:
        """The contents this run's own revisions stored (distinct), and their bytes."""
        if self._stored is None:
            with self.store.session() as s:
                rows = s.exec(select(Blob.sha256, Blob.size).join(
                    Revision, Revision.blob_sha == Blob.sha256).where(  # type: ignore[arg-type]
                    Revision.run_id == self.run_id, Revision.source != INITIAL_SOURCE,
                    Revision.content_stored == True).distinct()).all()  # noqa: E712
            self._stored = {sha for sha, _ in rows}
            self._stored_bytes = sum(size for _, size in rows)
        return self._stored

    def _keep_content(self, sha: str, size: int, source: str) -> bool:
        """Whether this content may be stored: always for the task's initial files and for
        content the run already stored, else while the run's revision bytes last."""
        if source == INITIAL_SOURCE or self.run_max_bytes <= 0:
            return True
        stored = self._load_stored()
        if sha in stored:
            return True
        if self._stored_bytes + size > self.run_max_bytes:
            if not self._warned:
                self._warned = True
                log.warning("run %s: revision bytes (%d) used up; later changes are recorded "
                            "without their content", self.run_id, self.run_max_bytes)
            return False
        stored.add(sha)
        self._stored_bytes += size
        return True

    def _excluded(self, rel: str) -> bool:
        return any(fnmatch(rel, pattern) for pattern in self.exclude)

    def _walk(self) -> tuple[dict[str, os.stat_result], dict[str, object] | None]:
        """The regular files the walk found (within the size cap, not excluded), and why it
        stopped before the whole workspace (None: it saw everything)."""
        found: dict[str, os.stat_result] = {}
        stats = WalkStats()
        stopped: dict[str, object] | None = None
        try:
            for entry in self.fs.walk((), max_depth=SCAN_MAX_DEPTH,
                                      max_entries=SCAN_MAX_ENTRIES, prune=self._pruned,
                                      regular_only=True, stats=stats):
                st = entry.st
                rel = "/".join(entry.parts)
                if (stat.S_ISREG(st.st_mode) and st.st_size <= self.max_bytes
                        and not self._excluded(rel)):
                    found[rel] = st
        except WalkCapped as exc:  # what was found is recorded; the rest waits
            log.warning("run %s: revision scan stopped after %d entries", self.run_id, exc.cap)
            stopped = {"reason": "entries", "cap": exc.cap}
        if stopped is None and stats.deep:
            stopped = {"reason": "depth", "cap": SCAN_MAX_DEPTH, "folders": stats.deep}
        return found, stopped

    def _written(self) -> list[str]:
        """The workspace files the run's jobs wrote, as the kernel recorded them."""
        with self.store.session() as s:
            return list(s.exec(select(JobFile.path).where(
                JobFile.run_id == self.run_id, JobFile.written == True)  # noqa: E712
                .distinct()).all())

    def _unseen(self, current: dict[str, os.stat_result], seen: dict[str, _Seen]) -> int:
        """After a walk that stopped: the files it knew and the files jobs wrote, looked up
        by name, so nothing it did not see is called deleted or missed. How many it found."""
        more = 0
        for rel in sorted((set(seen) | set(self._written())) - set(current)):
            if self._excluded(rel):
                continue
            st = self._stat(rel)
            if st is not None:
                current[rel] = st
                more += 1
        return more

    def _record_stop(self, stopped: dict[str, object], source: str, tool_call_id: int | None,
                     job_id: str | None) -> None:
        budget.scan_stopped(self.store, self.run_id, {
            **stopped, "source": source, "tool_call_id": tool_call_id, "job_id": job_id})

    def _stat(self, rel: str) -> os.stat_result | None:
        try:
            st = self.fs.lstat(split_path(rel))
        except WorkspaceError:
            return None
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
            return None
        return st

    def _read(self, rel: str) -> bytes | None:
        """The file's bytes, if it is still a regular file within the size cap."""
        try:
            data, st = self.fs.read(split_path(rel), self.max_bytes + 1)
        except WorkspaceError:
            return None
        return data if st.st_size <= self.max_bytes else None

    def scan(
        self, source: str, tool_call_id: int | None = None, job_id: str | None = None,
        only: list[str] | None = None,
    ) -> list[Revision]:
        """Record what changed since the last scan; `only` limits the scan to given paths."""
        with self._lock:
            if self._seen is None:
                self._seen = self._load()
            seen = self._seen
            if only is None:
                current, stopped = self._walk()
                if stopped is not None:
                    stopped["looked_up"] = self._unseen(current, seen)
                    self._record_stop(stopped, source, tool_call_id, job_id)
                candidates = set(current) | set(seen)
            else:
                current = {}
                for rel in only:
                    if not self._excluded(rel) and (st_ := self._stat(rel)) is not None:
                        current[rel] = st_
                candidates = set(only)
            changes: list[tuple[str, bytes | None, str | None, str | None]] = []
            for rel in sorted(candidates):
                st = current.get(rel)
                old = seen.get(rel)
                if st is None:
                    if old is not None and old.sha is not None:
                        changes.append((rel, None, None, old.sha))
                        del seen[rel]
                    continue
                if old and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size:
                    continue
                data = self._read(rel)
                if data is None:
                    continue
                sha = hashlib.sha256(data).hexdigest()
                seen[rel] = _Seen(st.st_mtime_ns, st.st_size, sha)
                if old is None or old.sha != sha:
                    changes.append((rel, data, sha, old.sha if old else None))
            return self._record(changes, source, tool_call_id, job_id)

    def _record(
        self, changes: list[tuple[str, bytes | None, str | None, str | None]], source: str,
        tool_call_id: int | None, job_id: str | None,
    ) -> list[Revision]:
        if not changes:
            return []
        recorded = []
        for rel, data, sha, prev in changes:
            kept = True
            if data is not None and sha is not None:
                kept = self._keep_content(sha, len(data), source)
                if kept:
                    self.store.put_blob(data)
            recorded.append(Change(path=rel, blob_sha=sha,
                                   size=None if data is None else len(data),
                                   content_stored=kept, prev_blob_sha=prev))
        return revision_rows.record(self.store, self.run_id, recorded, source, tool_call_id,
                                job_id)

    def record_initial(self) -> list[Revision]:
        """The workspace as the task made it, before the agent acts (once, at creation)."""
        return self.scan(INITIAL_SOURCE)

    def snapshot(self, reason: str, tool_call_id: int | None = None) -> int:
        """Freeze the code as it is now (after a scan) and return the snapshot id."""
        self.scan("scan", tool_call_id=tool_call_id)
        return self._freeze(reason, tool_call_id, self._files())

    def code_snapshot(self, reason: str, tool_call_id: int | None = None) -> int:
        """The snapshot of the code as it is now (after a scan): the last one this scanner
        made when the code is unchanged since (a job started after another reuses its
        snapshot), else a new one. What a job ran with (`Job.snapshot_id`)."""
        self.scan("scan", tool_call_id=tool_call_id)
        files = self._files()
        if self._last_snapshot is not None and self._last_snapshot[1] == files:
            return self._last_snapshot[0]
        return self._freeze(reason, tool_call_id, files)

    def _files(self) -> dict[str, str]:
        assert self._seen is not None
        with self._lock:
            return {p: v.sha for p, v in sorted(self._seen.items()) if v.sha}

    def _freeze(self, reason: str, tool_call_id: int | None, files: dict[str, str]) -> int:
        snapshot_id = revision_rows.freeze(self.store, self.run_id, reason, tool_call_id, files)
        self._last_snapshot = (snapshot_id, files)
        return snapshot_id
