"""The store: blobs, schema versioning, and concurrent writers in threads and processes."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest
from sqlalchemy import func
from sqlmodel import select

from a2rl.store import SCHEMA_VERSION, Blob, Meta, Run, Store, StoreVersionError, ToolCall


def _run(store: Store, run_id: str = "r-test") -> None:
    with store.session() as s:
        s.add(Run(id=run_id, task_id="fixture", workspace="/nonexistent/ws", budget_s=60))


def test_blobs_are_deduplicated_and_round_trip(store: Store) -> None:
    data = b"print('hello')\n" * 100
    a, b = store.put_blob(data), store.put_blob(data)
    assert a == b and store.get_blob(a) == data
    incompressible = bytes(range(256))
    assert store.get_blob(store.put_blob(incompressible)) == incompressible
    with store.session() as s:
        assert s.exec(select(func.count()).select_from(Blob)).one() == 2
    with pytest.raises(KeyError):
        store.get_blob("0" * 64)


def test_sqlite_is_in_wal_mode(store: Store) -> None:
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    Store(url).close()
    s = Store(url)
    with s.session() as session:
        row = session.get(Meta, "schema_version")
        row.value = str(SCHEMA_VERSION + 1)
        session.add(row)
    s.close()
    with pytest.raises(StoreVersionError, match="newer than this a2rl"):
        Store(url)


def test_older_schema_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2rl.store import db, models

    url = f"sqlite:///{tmp_path / 'x.db'}"
    Store(url).close()
    applied = []
    monkeypatch.setattr(models, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(db.MIGRATIONS, SCHEMA_VERSION, lambda conn: applied.append(conn))
    s = Store(url)
    with s.session() as session:
        assert session.get(Meta, "schema_version").value == str(SCHEMA_VERSION + 1)
    assert len(applied) == 1


def test_concurrent_writers_in_threads(store: Store) -> None:
    _run(store)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(40):
                with store.session() as s:
                    s.add(ToolCall(run_id="r-test", tool=f"t{n}", arguments={"i": i}))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with store.session() as s:
        assert s.exec(select(func.count()).select_from(ToolCall)).one() == 320


def _write_in_process(url: str, n: int) -> None:
    store = Store(url)
    for i in range(50):
        with store.session() as s:
            s.add(ToolCall(run_id="r-test", tool=f"p{n}", arguments={"i": i}))
        store.put_blob(f"shared blob {i}".encode())


def test_concurrent_writers_across_processes(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    _run(store)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_in_process, args=(settings.database_url, n))
             for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with store.session() as s:
        assert s.exec(select(func.count()).select_from(ToolCall)).one() == 200
        assert s.exec(select(func.count()).select_from(Blob)).one() == 50


def test_v1_store_is_migrated_to_v2(tmp_path: Path) -> None:
    """A store written before runs recorded their agent keeps its rows and gains the columns."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).close()
    db = sqlite3.connect(tmp_path / "old.db")
    for column in ("agent_status", "agent_exit_code", "agent_transcript_sha", "agent_stderr_sha"):
        db.execute(f"ALTER TABLE run DROP COLUMN {column}")
    db.execute("INSERT INTO run (id, task_id, status, backend, protocol, workspace, budget_s, "
               "grading_clock, created_at, config) VALUES ('r-old', 'arith', 'finished', "
               "'local', 'heldout', '/x', 60, 'counted', '2026-01-01', '{}')")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    store = Store(url)
    with store.session() as s:
        run = s.get(Run, "r-old")
        assert run is not None and run.agent_status is None
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
