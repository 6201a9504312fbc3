"""`jobfile` rows: the workspace files a run's jobs opened, as the kernel reported them.

Written from the run's access journal (`a2rl.tools.access_record.ingest`): one row per (job,
path), inserted when first seen and merged with what later lines say (read or written ever,
the first and last access, the size and sha256 at the last write-close).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ..db import Store
from ..models import JobFile

CHUNK = 500  # paths per lookup of existing rows


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _when(ts: Any) -> datetime:
    return datetime.fromtimestamp(float(ts), UTC)


def upsert(store: Store, run_id: str, rows: dict[tuple[str | None, str], list[Any]]) -> None:
    """New rows inserted, known ones updated, in bulk (a job writing 100,000 files is one
    statement of each, not 100,000 objects)."""
    if not rows:
        return
    table = JobFile.__table__  # type: ignore[attr-defined]
    paths = sorted({path for _, path in rows})
    new: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    with store.session() as s:
        existing: dict[tuple[str | None, str], Any] = {}
        for i in range(0, len(paths), CHUNK):
            for found in s.execute(sa.select(
                    table.c.id, table.c.job_id, table.c.path, table.c.read, table.c.written,
                    table.c.first_at, table.c.last_at, table.c.size, table.c.sha256).where(
                    table.c.run_id == run_id, table.c.path.in_(paths[i:i + CHUNK]))):
                existing[(found.job_id, found.path)] = found
        for key, (job, path, read, written, first, last, size, sha) in rows.items():
            row = existing.get(key)
            if row is None:
                new.append({"run_id": run_id, "job_id": job, "path": path, "read": bool(read),
                            "written": bool(written), "first_at": _when(first),
                            "last_at": _when(last), "size": size if written else None,
                            "sha256": sha if written else None})
                continue
            merged = {"row_id": row.id, "read": row.read or bool(read),
                      "written": row.written or bool(written),
                      "first_at": min(_aware(row.first_at), _when(first)),
                      "last_at": max(_aware(row.last_at), _when(last)),
                      "size": size if written else row.size,
                      "sha256": sha if written else row.sha256}
            changed.append(merged)
        if new:
            s.execute(sa.insert(table), new)
        if changed:
            s.execute(sa.update(table).where(table.c.id == sa.bindparam("row_id")).values(
                read=sa.bindparam("read"), written=sa.bindparam("written"),
                first_at=sa.bindparam("first_at"), last_at=sa.bindparam("last_at"),
                size=sa.bindparam("size"), sha256=sa.bindparam("sha256")), changed)
