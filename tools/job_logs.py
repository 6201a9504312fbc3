"""Job logs kept in the store: each log's head and tail as a blob, within the run's allowance.

Why a part of its own: the store is shared by every run, so a run's jobs together keep at
most `recording.job_log_run_keep_bytes` of log (`recording.job_log_keep_bytes` each); the count
of what the run kept is read from the store once per process and then kept here, under a lock,
as logs are added (two jobs settled at once must not both take the last bytes). Past the
allowance a job keeps its log's size only; the file stays in the run's folder, where the
agent reads it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from sqlmodel import col, select

from a2rl.layout import LOGS
from a2rl.store import Blob, Job, Store

from .output import log_size, read_head_tail

#: Bytes left for the marker `read_head_tail` puts between a log's head and tail.
MARKER_ROOM = 64


class JobLogs:
    """A run's job logs: where the supervisor writes them, and what the store keeps of them."""

    def __init__(self, store: Store, run_id: str, folder: Path, keep_bytes: int,
                 run_keep_bytes: int) -> None:
        """`folder`: the supervisor's folder of the run's job logs (outside the workspace;
        jobs see it read-only). `keep_bytes` per log, `run_keep_bytes` for the run's logs
        together (0: no cap)."""
        self.store, self.run_id, self.folder = store, run_id, folder
        self.keep_bytes, self.run_keep_bytes = keep_bytes, run_keep_bytes
        self._lock = threading.Lock()
        self._kept: int | None = None  # loaded from the store on first use

    def file_of(self, log_path: str) -> Path:
        """Where a job's log is on the host: `logs/<job>.log` names a file of the supervisor's
        folder (jobs cannot write it); any other path (rows of older versions) is not read."""
        folder, _, name = log_path.partition("/")
        if folder != LOGS or not name or "/" in name or name.startswith("."):
            return self.folder / ".none"
        return self.folder / name

    def keep(self, log_path: str) -> tuple[str | None, int]:
        """Store the head and tail of a job's log (never read whole); its blob and size. The
        log that reaches the run's allowance keeps a shorter head and tail, later ones their
        size only (no blob)."""
        with self._lock:
            if self._kept is None:
                self._kept = self._kept_so_far()
            keep = self.keep_bytes
            if self.run_keep_bytes > 0:  # room for the "[... omitted ...]" line too
                keep = min(keep, self.run_keep_bytes - self._kept - MARKER_ROOM)
            path = self.file_of(log_path)
            if keep <= 0:
                return None, log_size(path)
            data, size = read_head_tail(path, keep // 2, keep - keep // 2)
            if size == 0:
                return None, 0
            self._kept += len(data)
            return self.store.put_blob(data), size

    def _kept_so_far(self) -> int:
        """Job log bytes the run's rows already hold (distinct blobs), from the store."""
        with self.store.session() as s:
            rows = s.exec(select(Blob.size).where(Blob.sha256.in_(  # type: ignore[attr-defined]
                select(Job.log_blob_sha).where(Job.run_id == self.run_id,
                                               col(Job.log_blob_sha).is_not(None))))).all()
        return sum(rows)
