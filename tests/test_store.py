"""The store: blobs, schema versioning, and concurrent writers in threads and processes.

Every test that takes `db_url` or `store` runs on SQLite and on PostgreSQL (tests/pg.py).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, text
from sqlmodel import select

from a2rl.store import (
    SCHEMA_VERSION,
    Blob,
    Meta,
    Revision,
    Run,
    Store,
    StoreVersionError,
    ToolCall,
)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()


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


def test_a_run_and_its_rows_in_one_transaction(store: Store) -> None:
    """Flush order is SQLAlchemy's; foreign keys are checked at commit (PostgreSQL enforces
    them), so a child added with its parent in one session is fine, and an orphan is not."""
    from sqlalchemy.exc import IntegrityError

    from a2rl.store import BudgetEvent

    with store.session() as s:
        s.add(Run(id="r-1", task_id="arith", workspace="/x", budget_s=60))
        s.add(BudgetEvent(run_id="r-1", kind="clock_start"))
    if store.dialect == "postgresql":
        with pytest.raises(IntegrityError), store.session() as s:
            s.add(BudgetEvent(run_id="r-missing", kind="clock_start"))


def test_sqlite_is_in_wal_mode(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_postgres_sessions_run_in_utc(db_url: str) -> None:
    store = Store(db_url)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW timezone").scalar() == "UTC"
    _run(store)
    with store.session() as s:
        stored = s.exec(select(Run.created_at)).one()
        drift = abs((stored - datetime.now(UTC)).total_seconds())
        assert stored.utcoffset().total_seconds() == 0 and drift < 60  # aware, in UTC


def test_newer_schema_is_a_clear_error(db_url: str) -> None:
    url = db_url
    Store(url).close()
    s = Store(url)
    with s.session() as session:
        row = session.get(Meta, "schema_version")
        row.value = str(SCHEMA_VERSION + 1)
        session.add(row)
    s.close()
    with pytest.raises(StoreVersionError, match="newer than this a2rl"):
        Store(url)


def test_older_schema_is_migrated(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2rl.store import db, models

    url = db_url
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


def test_concurrent_writers_across_processes(store: Store) -> None:
    """Four processes write rows and the same 50 blobs (same content: one row each)."""
    _run(store)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_in_process, args=(store.url, n))
             for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with store.session() as s:
        assert s.exec(select(func.count()).select_from(ToolCall)).one() == 200
        assert s.exec(select(func.count()).select_from(Blob)).one() == 50


def _open(url: str) -> None:
    Store(url).close()


def test_processes_opening_a_new_store_at_once(db_url: str) -> None:
    """Nodes starting together all create (or find) the schema; none fails on a race."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open, args=(db_url,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = Store(db_url)
    with store.session() as s:
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)


# the columns each schema version added to `run`
_ADDED = {2: ("agent_status", "agent_exit_code", "agent_transcript_sha", "agent_stderr_sha"),
          3: ("fleet_id", "fleet_repeat", "fleet_node"),
          4: ("profile",)}


def test_v1_store_is_migrated(db_url: str) -> None:
    """A store written before runs recorded their agent (v1) and their fleet (v2) keeps its
    rows and gains the columns."""
    url = db_url
    Store(url).close()
    old = Store(url)
    with old.engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_run_fleet_id"))
        for columns in _ADDED.values():
            for column in columns:
                conn.execute(text(f"ALTER TABLE run DROP COLUMN {column}"))
        conn.execute(text(
            "INSERT INTO run (id, task_id, status, backend, protocol, workspace, budget_s, "
            "grading_clock, created_at, config) VALUES ('r-old', 'arith', 'finished', "
            "'local', 'heldout', '/x', 60, 'counted', '2026-01-01', '{}')"))
        conn.execute(text("UPDATE meta SET value = '1' WHERE key = 'schema_version'"))
    old.close()
    store = Store(url)
    with store.session() as s:
        run = s.get(Run, "r-old")
        assert run is not None and run.agent_status is None and run.fleet_id is None
        assert run.profile == "a2rl"
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
    _run(store, "r-new")
    with store.session() as s:
        s.get(Run, "r-new").fleet_id = "f1"
    with store.session() as s:
        assert s.exec(select(Run.id).where(Run.fleet_id == "f1")).all() == ["r-new"]


def test_v3_store_is_migrated(db_url: str) -> None:
    """A store written before runs recorded their evaluation profile (v3) keeps its rows, and
    each of them reads as evaluated under the `a2rl` profile (the only one there was)."""
    url = db_url
    Store(url).close()
    old = Store(url)
    with old.engine.begin() as conn:
        conn.execute(text("ALTER TABLE run DROP COLUMN profile"))
        conn.execute(text(
            "INSERT INTO run (id, task_id, status, backend, protocol, workspace, budget_s, "
            "grading_clock, created_at, config, fleet_id) VALUES ('r-v3', 'gsm8k', "
            "'finished', 'local', 'paper', '/x', 60, 'counted', '2026-01-01', '{}', 'f0')"))
        conn.execute(text("UPDATE meta SET value = '3' WHERE key = 'schema_version'"))
    old.close()
    store = Store(url)
    with store.session() as s:
        run = s.get(Run, "r-v3")
        assert run is not None and run.profile == "a2rl" and run.protocol == "paper"
        assert run.fleet_id == "f0"
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION) == "6"
    _run(store, "r-paper")
    with store.session() as s:
        s.get(Run, "r-paper").profile = "paper"
    with store.session() as s:
        assert s.exec(select(Run.id).where(Run.profile == "paper")).all() == ["r-paper"]


def test_v4_store_is_migrated(db_url: str) -> None:
    """A store written before revisions recorded their size and whether their content was
    stored (v4) keeps its revisions, each with its content stored (there was no run cap)."""
    url = db_url
    Store(url).close()
    old = Store(url)
    _run(old, "r-v4")
    with old.engine.begin() as conn:
        conn.execute(text("ALTER TABLE revision DROP COLUMN size"))
        conn.execute(text("ALTER TABLE revision DROP COLUMN content_stored"))
        conn.execute(text("INSERT INTO revision (run_id, path, blob_sha, source, created_at) "
                          "VALUES ('r-v4', 'code/a.py', 'abc', 'command', '2026-01-01')"))
        conn.execute(text("UPDATE meta SET value = '4' WHERE key = 'schema_version'"))
    old.close()
    store = Store(url)
    with store.session() as s:
        (rev,) = s.exec(select(Revision).where(Revision.run_id == "r-v4")).all()
        assert rev.path == "code/a.py" and rev.blob_sha == "abc"
        assert rev.content_stored is True and rev.size is None
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION) == "6"
        s.add(Revision(run_id="r-v4", path="code/b.py", blob_sha="def", size=9,
                       content_stored=False))
    with store.session() as s:
        assert s.exec(select(Revision.path).where(
            Revision.run_id == "r-v4", Revision.content_stored == False)  # noqa: E712
        ).all() == ["code/b.py"]
    store.close()


def test_v5_tool_calls_are_numbered_per_run(db_url: str) -> None:
    """A store from before calls had a number within their run (v5): each older call gets its
    number by the order of its id, run by run, and new calls go on from there."""
    from a2rl.server.recording import start_call

    url = db_url
    Store(url).close()
    old = Store(url)
    _run(old, "r-a")
    _run(old, "r-b")
    with old.engine.begin() as conn:
        conn.execute(text("ALTER TABLE toolcall DROP COLUMN seq"))
        for run_id in ("r-a", "r-b", "r-a", "r-a", "r-b"):
            conn.execute(text("INSERT INTO toolcall (run_id, tool, arguments, result_summary, "
                              "is_error, started_at, duration_ms) VALUES "
                              f"('{run_id}', 'budget_status', '{{}}', '', false, "
                              "'2026-01-01', 0)"))
        conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
    old.close()
    store = Store(url)
    start_call(store, "r-b", "budget_status", {}, "memory")
    with store.session() as s:
        rows = s.exec(select(ToolCall.run_id, ToolCall.seq).order_by(ToolCall.id)).all()
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION) == "6"
    assert [tuple(r) for r in rows] == [("r-a", 1), ("r-b", 1), ("r-a", 2), ("r-a", 3),
                                        ("r-b", 2), ("r-b", 3)]
    store.close()


def test_concurrent_calls_of_one_run_number_apart(store: Store) -> None:
    from a2rl.server.recording import start_call

    _run(store, "r-c")
    _run(store, "r-d")
    start_call(store, "r-d", "budget_status", {}, "memory")
    threads = [threading.Thread(target=start_call,
                                args=(store, "r-c", "budget_status", {}, "http"))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with store.session() as s:
        seqs = s.exec(select(ToolCall.seq).where(ToolCall.run_id == "r-c")).all()
    assert sorted(seqs) == list(range(1, 9))


def test_identity_names_the_database_not_the_spelling(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What containers are labelled with: one database, one name, however its URL is written;
    another database, another name; no credentials in it."""
    monkeypatch.chdir(tmp_path)
    a = Store(f"sqlite:///{tmp_path / 'a.db'}")
    a_relative = Store("sqlite:///a.db")
    b = Store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert a.identity == a_relative.identity != b.identity
        assert len(a.identity) == 16 and "a.db" not in a.identity
    finally:
        for s in (a, a_relative, b):
            s.close()


def test_revision_cap_counts_what_the_run_stored_across_processes(store: Store,
                                                                   tmp_path: Path) -> None:
    """The run's revision bytes are read back from the store: a scanner made by a new server
    process goes on from what earlier ones stored, content already stored counts once, and
    what does not fit is recorded by size and sha256 only."""
    import hashlib

    from a2rl.tools.revisions import RevisionScanner

    _run(store, "r-cap")
    ws = tmp_path / "ws"
    (ws / "code").mkdir(parents=True)

    def scanner() -> RevisionScanner:
        return RevisionScanner(store, "r-cap", ws, [], 1_000_000, run_max_bytes=250_000)

    (ws / "code" / "a.bin").write_bytes(os.urandom(100_000))
    (ws / "code" / "same.bin").write_bytes((ws / "code" / "a.bin").read_bytes())
    assert all(r.content_stored for r in scanner().scan("command"))  # 100 KB, counted once
    (ws / "code" / "b.bin").write_bytes(os.urandom(100_000))
    assert [r.content_stored for r in scanner().scan("command")] == [True]  # 200 KB
    (ws / "code" / "c.bin").write_bytes(os.urandom(100_000))
    (ws / "code" / "d.bin").write_bytes(b"small")
    revs = {r.path: r for r in scanner().scan("command")}
    assert not revs["code/c.bin"].content_stored and revs["code/d.bin"].content_stored
    c = revs["code/c.bin"]
    assert c.size == 100_000 and c.blob_sha == hashlib.sha256(
        (ws / "code" / "c.bin").read_bytes()).hexdigest()
    with pytest.raises(KeyError):
        store.get_blob(c.blob_sha)


def test_v5_store_gains_the_audit_table(db_url: str) -> None:
    """A store written before audits (v5, no `audit` table) opens as v6 with the table made,
    and keeps its runs."""
    from a2rl.audit import AuditReport, Flag, Severity, flagged_run_ids, load_audit, save_audit
    from a2rl.store import utcnow

    Store(db_url).close()
    old = Store(db_url)
    _run(old, "r-v5")
    with old.engine.begin() as conn:
        conn.execute(text("DROP TABLE audit"))
        conn.execute(text("UPDATE meta SET value = '5' WHERE key = 'schema_version'"))
    old.close()
    store = Store(db_url)
    with store.session() as s:
        assert s.get(Run, "r-v5") is not None
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION) == "6"
    assert load_audit(store, "r-v5") is None
    save_audit(store, AuditReport(run_id="r-v5", audit_version=1, computed_at=utcnow(), flags=[
        Flag(kind="contamination", severity=Severity.high, finding="copied 3 test answers")]))
    got = load_audit(store, "r-v5")
    assert got is not None and got.flagged and got.flags[0].kind == "contamination"
    assert flagged_run_ids(store) == {"r-v5"}
    store.close()


def test_early_v6_store_gains_the_columns_added_since(db_url: str) -> None:
    """The first v6 release made the audit table and no column: its stores say v6 yet lack
    the columns v6 grew since (`V6_COLUMNS`). Opening one adds them and numbers its calls."""
    from a2rl.store.db import V6_COLUMNS

    Store(db_url).close()
    old = Store(db_url)
    _run(old, "r-e6")
    with old.engine.begin() as conn:
        for table, column, _ in V6_COLUMNS:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        conn.execute(text("INSERT INTO toolcall (run_id, tool, arguments, result_summary, "
                          "is_error, started_at, duration_ms) VALUES ('r-e6', 'budget_status', "
                          "'{}', '', false, '2026-01-01', 0)"))
    old.close()
    store = Store(db_url)
    with store.session() as s:
        run = s.get(Run, "r-e6")
        assert run is not None and run.end_kind is None and run.owner is None
        assert s.exec(select(ToolCall.seq).where(ToolCall.run_id == "r-e6")).all() == [1]
        assert s.get(Meta, "schema_version").value == "6"
    store.close()
