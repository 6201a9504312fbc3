"""`revision`, `snapshot` and `snapshotfile` rows: the workspace's code, appended only.

A revision is one change to one file (the scanner of `a2rl.tools.revisions` finds them,
whoever made them); a snapshot is the code at one moment, its files by content. Neither
changes once written: a later change is a new revision, a later moment a new snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..db import Store
from ..models import Revision, Snapshot, SnapshotFile


@dataclass(frozen=True)
class Change:
    """One file's change: its new content's sha256 and size (None, None: deleted), whether
    the content is stored as a blob, and the sha256 it replaced."""

    path: str
    blob_sha: str | None
    size: int | None
    content_stored: bool
    prev_blob_sha: str | None


def record(store: Store, run_id: str, changes: list[Change], source: str,
           tool_call_id: int | None, job_id: str | None) -> list[Revision]:
    """The changes as the run's revisions from `source` (one transaction); their rows."""
    revisions = [Revision(run_id=run_id, path=c.path, blob_sha=c.blob_sha, size=c.size,
                          content_stored=c.content_stored, prev_blob_sha=c.prev_blob_sha,
                          source=source, tool_call_id=tool_call_id, job_id=job_id)
                 for c in changes]
    if revisions:
        with store.session() as s:
            s.add_all(revisions)
    return revisions


def freeze(store: Store, run_id: str, reason: str, tool_call_id: int | None,
           files: dict[str, str]) -> int:
    """A snapshot of `files` (path -> blob sha256), for `reason`; its id."""
    with store.session() as s:
        snap = Snapshot(run_id=run_id, reason=reason, tool_call_id=tool_call_id)
        s.add(snap)
        s.flush()
        assert snap.id is not None
        s.add_all(SnapshotFile(snapshot_id=snap.id, path=p, blob_sha=sha)
                  for p, sha in files.items())
        return snap.id
