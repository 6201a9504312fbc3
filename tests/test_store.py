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
from sqlalchemy import Connection, create_engine, func, inspect, text
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


def test_a_store_with_an_unknown_revision_is_a_clear_error(db_url: str) -> None:
    """A store an a2rl with more revisions upgraded (or another branch's) is refused in one
    line, and left as it was."""
    Store(db_url).close()
    s = Store(db_url)
    with s.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'v99'"))
    s.close()
    with pytest.raises(StoreVersionError, match="revision 'v99', newer than this a2rl") as err:
        Store(db_url)
    assert "\n" not in str(err.value)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "v99"
    engine.dispose()


def test_the_next_revision_runs_on_a_store_at_the_previous_one(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """How the next schema change lands: one more revision file, `SCHEMA_VERSION` one up; a
    store at the previous head gets it when opened (and then says the new version)."""
    import shutil

    from a2rl.store import migrate, models

    Store(db_url).close()
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, scripts,
                    ignore=shutil.ignore_patterns("__pycache__"))
    nxt = SCHEMA_VERSION + 1
    (scripts / "versions" / f"v{nxt}_note.py").write_text(
        f'revision = "v{nxt}"\ndown_revision = "v{SCHEMA_VERSION}"\n'
        "branch_labels = None\ndepends_on = None\n\n"
        "import sqlalchemy as sa\nfrom a2rl.store.migrate import add_missing_columns\n\n"
        "def upgrade():\n    add_missing_columns('run', sa.Column('note_r28', sa.String()))\n")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", scripts)
    monkeypatch.setattr(models, "SCHEMA_VERSION", nxt)
    s = Store(db_url)
    with s.session() as session:
        assert session.get(Meta, "schema_version").value == str(nxt)
    with s.engine.connect() as conn:
        assert "note_r28" in {c["name"] for c in inspect(conn).get_columns("run")}
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
            == f"v{nxt}"
    s.close()


def test_revisions_are_one_line_from_v1_to_the_schema_version() -> None:
    """Revision vN is schema version N: one chain, its head the code's `SCHEMA_VERSION` (a
    revision added without the bump, or the bump without a revision, fails here)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from a2rl.store import migrate

    cfg = Config()
    cfg.set_main_option("script_location", str(migrate.MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(cfg)
    assert script.get_heads() == [f"v{SCHEMA_VERSION}"]
    chain = [(r.revision, r.down_revision) for r in script.walk_revisions()]
    assert chain == [(f"v{n}", f"v{n - 1}" if n > 1 else None)
                     for n in range(SCHEMA_VERSION, 0, -1)]


def test_opening_a_current_store_does_not_load_alembic(tmp_path: Path) -> None:
    """Alembic (0.1-0.4 s to import) runs only for a store whose revision is not the code's:
    making a store and opening it again never import it."""
    import subprocess
    import sys

    code = ("import sys; from a2rl.store import Store; "
            f"u = 'sqlite:///{tmp_path / 'a.db'}'; Store(u).close(); Store(u).close(); "
            "print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


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
#: (table, column) that v5, v6 and v7 added; v6 also made the audit table, v7 the ledger
_ADDED_IN_V5 = [("revision", "size"), ("revision", "content_stored")]
_ADDED_IN_V6 = [("run", "end_kind"), ("job", "end_cause"), ("job", "end_evidence"),
                ("run", "owner"), ("toolcall", "seq")]
_ADDED_IN_V7 = [("job", "cpu_s"), ("job", "memory_peak_bytes"), ("job", "gpu_s"),
                ("job", "gpu_memory_peak_bytes")]
_ADDED_IN_V8 = [("run", "kind"), ("run", "replay_of"), ("run", "agent_error"),
                ("job", "snapshot_id"), ("job", "files_recorded"), ("submission", "lineage"),
                ("evaluation", "regrade_id"), ("evaluation", "superseded_by"),
                ("ledger", "validations"), ("ledger", "validation_cpu_s"),
                ("toolcall", "arguments_blob")]


def _before_alembic(conn: Connection, version: int) -> None:
    """Make the store on `conn` say `version` as the releases before Alembic wrote it: in
    `meta` only, with no Alembic version table."""
    conn.execute(text(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'"))
    conn.execute(text("DROP TABLE alembic_version"))


def _schema_of(conn: Connection, version: int) -> None:
    """Turn a current store into the schema `version` had (what later versions added goes)."""
    if version < 8:
        for table in ("regrade", "jobfile"):
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("DROP INDEX ix_run_kind"))
        conn.execute(text("DROP INDEX ix_run_replay_of"))
        for table, column in _ADDED_IN_V8:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    if version < 7:
        conn.execute(text("DROP TABLE ledger"))
        for table, column in _ADDED_IN_V7:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    if version < 6:
        conn.execute(text("DROP TABLE audit"))
        for table, column in _ADDED_IN_V6:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    if version < 5:
        for table, column in _ADDED_IN_V5:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    if version < 3:
        conn.execute(text("DROP INDEX ix_run_fleet_id"))
    for added, columns in _ADDED.items():
        if version < added:
            for column in columns:
                conn.execute(text(f"ALTER TABLE run DROP COLUMN {column}"))


def _columns(conn: Connection) -> dict[str, tuple[set[str], set[str | None]]]:
    """Each table's columns and indexes."""
    found = inspect(conn)
    return {t: ({c["name"] for c in found.get_columns(t)},
                {i["name"] for i in found.get_indexes(t)}) for t in found.get_table_names()}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7])
def test_every_older_store_is_upgraded_by_alembic(db_url: str, version: int) -> None:
    """A store of each schema version before Alembic (meta only) opens at the current schema:
    the same tables and columns as a new store, its rows kept, Alembic's revision the head;
    and a store already under Alembic at that revision does too."""
    fresh = Store(db_url)
    with fresh.engine.connect() as conn:
        want = _columns(conn)
    fresh.close()
    for under_alembic in (False, True):
        old = Store(db_url)
        with old.engine.begin() as conn:  # apart: PostgreSQL alters no table with checks due
            conn.execute(text("DELETE FROM run"))
        with old.engine.begin() as conn:
            _schema_of(conn, version)
            profile = ("", "") if version < 4 else (", profile", ", 'a2rl'")
            conn.execute(text(
                "INSERT INTO run (id, task_id, status, backend, protocol, workspace, budget_s, "
                f"grading_clock, created_at, config{profile[0]}) VALUES ('r-old', 'arith', "
                f"'finished', 'local', 'heldout', '/x', 60, 'counted', '2026-01-01', "
                f"'{{}}'{profile[1]})"))
            if under_alembic:
                conn.execute(text(f"UPDATE meta SET value = '{version}' "
                                  "WHERE key = 'schema_version'"))
                conn.execute(text(f"UPDATE alembic_version SET version_num = 'v{version}'"))
            else:
                _before_alembic(conn, version)
        old.close()
        store = Store(db_url)
        with store.engine.connect() as conn:
            assert _columns(conn) == want, (version, under_alembic)
            assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [
                (f"v{SCHEMA_VERSION}",)]
        with store.session() as s:
            assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
            run = s.get(Run, "r-old")
            assert run is not None and run.profile == "a2rl" and run.task_id == "arith"
        _run(store, f"r-new-{under_alembic}")
        store.close()


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
        _before_alembic(conn, 1)
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
        _before_alembic(conn, 3)
    old.close()
    store = Store(url)
    with store.session() as s:
        run = s.get(Run, "r-v3")
        assert run is not None and run.profile == "a2rl" and run.protocol == "paper"
        assert run.fleet_id == "f0"
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
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
        _before_alembic(conn, 4)
    old.close()
    store = Store(url)
    with store.session() as s:
        (rev,) = s.exec(select(Revision).where(Revision.run_id == "r-v4")).all()
        assert rev.path == "code/a.py" and rev.blob_sha == "abc"
        assert rev.content_stored is True and rev.size is None
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
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
        _before_alembic(conn, 5)
    old.close()
    store = Store(url)
    start_call(store, "r-b", "budget_status", {}, "memory")
    with store.session() as s:
        rows = s.exec(select(ToolCall.run_id, ToolCall.seq).order_by(ToolCall.id)).all()
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
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


@pytest.mark.cheats("stores a made-up audit with a high flag, to see it kept")
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
        _before_alembic(conn, 5)
    old.close()
    store = Store(db_url)
    with store.session() as s:
        assert s.get(Run, "r-v5") is not None
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
    assert load_audit(store, "r-v5") is None
    save_audit(store, AuditReport(run_id="r-v5", audit_version=1, computed_at=utcnow(), flags=[
        Flag(kind="contamination", severity=Severity.high, finding="copied 3 test answers")]))
    got = load_audit(store, "r-v5")
    assert got is not None and got.flagged and got.flags[0].kind == "contamination"
    assert flagged_run_ids(store) == {"r-v5"}
    store.close()


def test_early_v6_store_gains_the_columns_added_since(db_url: str) -> None:
    """The first v6 release made the audit table and no column: its stores say v6 yet lack
    the columns v6 grew since. Opening one adds them and numbers its calls."""
    Store(db_url).close()
    old = Store(db_url)
    _run(old, "r-e6")
    with old.engine.begin() as conn:
        _schema_of(conn, 6)
        for table, column in _ADDED_IN_V6:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        _before_alembic(conn, 6)
        conn.execute(text("INSERT INTO toolcall (run_id, tool, arguments, result_summary, "
                          "is_error, started_at, duration_ms) VALUES ('r-e6', 'budget_status', "
                          "'{}', '', false, '2026-01-01', 0)"))
    old.close()
    store = Store(db_url)
    with store.session() as s:
        run = s.get(Run, "r-e6")
        assert run is not None and run.end_kind is None and run.owner is None
        assert s.exec(select(ToolCall.seq).where(ToolCall.run_id == "r-e6")).all() == [1]
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
    store.close()
