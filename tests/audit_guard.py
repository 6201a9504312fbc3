"""No run the suite makes may raise a high audit flag, unless its test cheats on purpose.

The audit runs at every run's end (`finish_run`) and stores its flags. A high flag on an honest
run is a false accusation, and every aggregate with `--exclude-flagged` would drop that run; so
the suite holds the audit to its promise on every run it makes, not only on a chosen corpus:
at the session's end each store the session wrote (SQLite files under its temporary folder,
the databases of its PostgreSQL server) is read, and a run whose stored audit has a high flag
fails the session, unless its test is marked `@pytest.mark.cheats("why")`, which leaves a
`CHEATS_MARK` file in the test's temporary folder (or, for a store a shared fixture made, the
fixture calls `expect_cheating(folder)` itself; `expect_cheating(folder, run_id)` excuses that
one run only, where honest and cheating runs share a store).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

CHEATS_MARK = ".a2rl-cheats"
HIGH_SQL = "SELECT run_id, flags FROM audit WHERE high > 0"
#: folders that hold a run's files, never a store: not walked
_NOT_STORES = {"workspace", "base_model", "checkpoints", "node_modules", ".venv", "blobs"}


def expect_cheating(folder: Path, run_id: str | None = None) -> None:
    """Stores under `folder` belong to runs that cheat on purpose (all of them, or only
    `run_id`): their high flags are the point of the test."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / CHEATS_MARK).open("a") as f:
        f.write(f"{run_id or '*'}\n")


def _stores(root: Path) -> Iterator[tuple[Path, set[str]]]:
    """Every SQLite file under `root`, with the run ids excused for it."""
    excused: dict[str, set[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = set(excused.get(str(Path(dirpath).parent), set()))
        if CHEATS_MARK in filenames:
            here |= set((Path(dirpath) / CHEATS_MARK).read_text().split())
        if "*" in here:
            dirnames[:] = []
            continue
        excused[dirpath] = here
        dirnames[:] = [d for d in dirnames if d not in _NOT_STORES]
        for name in filenames:
            if name.endswith(".db"):
                yield Path(dirpath) / name, here


def _describe(where: str, rows: list[tuple[str, str]]) -> list[str]:
    out = []
    for run_id, flags in rows:
        high = [f"{f.get('kind')}: {f.get('finding')}" for f in json.loads(flags or "[]")
                if f.get("severity") == "high"]
        out.append(f"{where} run {run_id}: " + "; ".join(high))
    return out


def sqlite_findings(root: Path) -> list[str]:
    """The high flags of the runs in every SQLite store under `root`, but under a folder
    marked as cheating."""
    found: list[str] = []
    for db, excused in _stores(root):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                rows = conn.execute(HIGH_SQL).fetchall()
        except sqlite3.Error:  # not a store, or one from before audits
            continue
        rows = [(run_id, flags) for run_id, flags in rows if run_id not in excused]
        found += _describe(str(db.relative_to(root)), rows)
    return found


def postgres_findings(port: int, user: str, skip: set[str]) -> list[str]:
    """The same over every database of the session's PostgreSQL server, but `skip`."""
    import psycopg

    found: list[str] = []
    with psycopg.connect(host="127.0.0.1", port=port, user=user, dbname="postgres",
                         autocommit=True) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT datname FROM pg_database WHERE NOT datistemplate")]
    for name in sorted(set(names) - skip - {"postgres"}):
        try:
            with psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=name) as conn:
                rows = [(r[0], json.dumps(r[1]) if not isinstance(r[1], str) else r[1])
                        for r in conn.execute(HIGH_SQL)]
        except psycopg.Error:
            continue
        found += _describe(f"postgresql database {name}", rows)
    return found
