"""Opening the store: engine setup per dialect, concurrency settings and schema versioning.

SQLite runs in WAL mode with a busy timeout and `BEGIN IMMEDIATE` transactions, so that writers
in several threads and processes queue for the write lock instead of failing on a lock upgrade.
PostgreSQL (a fleet's shared store) runs plain READ COMMITTED transactions: the few places that
race use row locks (the grading queue's `FOR UPDATE SKIP LOCKED`), `ON CONFLICT DO NOTHING`
(blobs) or a transaction-scoped advisory lock (schema creation and migration, which several
nodes may attempt at once). Migrations are Alembic revisions (`migrate`, `migrations/`). Keep
transactions short: a session is opened per operation, never held across a tool call.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, event, inspect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlmodel import Session, SQLModel, create_engine, select

from . import migrate, models
from .models import Blob, Meta

#: pg_advisory_xact_lock key serializing schema creation and migration across processes.
SCHEMA_LOCK_KEY = 0x61327266  # "a2rf"


def blob_row(data: bytes) -> Blob:
    """The `Blob` row for some bytes: zlib-compressed unless that does not make them smaller."""
    packed, encoding = zlib.compress(data, 1), "zlib"
    if len(packed) >= len(data):
        packed, encoding = data, "raw"
    return Blob(sha256=hashlib.sha256(data).hexdigest(), size=len(data), encoding=encoding,
                data=packed)


class StoreError(RuntimeError):
    """The store cannot be used: the message is one line for the user, naming the store."""


class StoreVersionError(StoreError):
    """The database was written by a different, incompatible version of a2rl."""


class StoreMissing(StoreError):
    """No store exists yet at the URL, and the caller asked not to create one."""


def display_url(url: str) -> str:
    """The store's URL as it may be shown: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def not_a_store(name: str) -> str:
    """The line for a database that holds no a2rl store (another program's file)."""
    return f"{name} is not an a2rl store (no meta table); nothing was changed"


def _reason(exc: BaseException) -> str:
    """The driver's own first line (e.g. 'file is not a database', 'Connection refused')."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    return lines[0] if lines else type(orig).__name__


def _engine_options(dialect: str) -> dict[str, Any]:
    if dialect == "sqlite":
        return {"connect_args": {"check_same_thread": False, "timeout": 30}}
    if dialect == "postgresql":
        # Sessions in UTC, as a2rl keeps every time (timestamptz columns), so that psql and
        # date functions agree with it; pre-ping replaces connections that a restarted
        # server or an idle timeout closed.
        return {"pool_pre_ping": True, "connect_args": {"options": "-c timezone=UTC"}}
    return {}


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _dialect_insert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


class Store:
    """A handle on one database. Cheap to share between threads; open one per process."""

    def __init__(self, url: str, create: bool = True) -> None:
        """Open the store at `url`. With `create=False` (commands that only read), raise
        `StoreMissing` instead of creating a database that does not exist yet; any failure to
        open raises a `StoreError` with one line naming the store."""
        self.url = url
        try:
            parsed = make_url(url)
            #: the SQLAlchemy backend name: "sqlite", "postgresql", ...
            self.dialect = parsed.get_backend_name()
            self.engine = create_engine(url, **_engine_options(self.dialect))
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise StoreError(f"bad store URL {display_url(url)!r}: {_reason(exc)}") from None
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)
        self._blob_lock = threading.Lock()
        try:
            if not create and not self._exists(parsed.database):
                self.engine.dispose()
                raise StoreMissing(f"no store at {display_url(url)} yet")
            if not create and self.dialect == "sqlite" and parsed.database:
                self._check_sqlite_store(parsed.database)
            self._ensure_schema()
        except DBAPIError as exc:
            self.engine.dispose()
            raise StoreError(f"cannot open the store {display_url(url)}: {_reason(exc)}"
                             ) from None

    @property
    def identity(self) -> str:
        """A short, stable name of this database (no credentials in it): what a resource that
        outlives the process, such as a run's container, is labelled with, so that a server of
        one store never adopts or removes another store's on a shared engine."""
        import hashlib
        from pathlib import Path

        parsed = make_url(self.url).set(password=None)
        if self.dialect == "sqlite" and parsed.database and parsed.database != ":memory:":
            parsed = parsed.set(database=str(Path(parsed.database).resolve()))
        return hashlib.sha256(parsed.render_as_string().encode()).hexdigest()[:16]

    def _exists(self, database: str | None) -> bool:
        """Whether the store was made already (a SQLite file, or our tables in a server)."""
        if self.dialect == "sqlite" and database and database != ":memory:":
            from pathlib import Path

            return Path(database).exists()
        with self.engine.connect() as conn:
            return inspect(conn).has_table("meta")

    def _check_sqlite_store(self, database: str) -> None:
        """A command that only reads must not turn another program's SQLite file into a
        store: look, through a read-only connection (ours would switch the file to WAL on
        connecting), for the meta table before anything creates tables in it."""
        import sqlite3
        from pathlib import Path

        try:
            conn = sqlite3.connect(f"{Path(database).resolve().as_uri()}?mode=ro", uri=True)
            try:
                found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                     "AND name = 'meta'").fetchone()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            self.engine.dispose()
            raise StoreError(f"cannot open the store {display_url(self.url)}: {_reason(exc)}"
                             ) from None
        if found is None:
            self.engine.dispose()
            raise StoreError(not_a_store(display_url(self.url)))

    def _ensure_schema(self) -> None:
        """Make a new store at the code's schema, or bring an older one to it (Alembic, only
        when its revision differs: `migrate`); a newer one is a `StoreVersionError`."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":  # nodes opening a new store at once take turns
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")
            fresh = not inspect(conn).has_table("meta")
            SQLModel.metadata.create_all(conn)
            if fresh:
                conn.execute(Meta.__table__.insert().values(
                    key="schema_version", value=str(models.SCHEMA_VERSION)))
                migrate.stamp(conn, migrate.head())
                return
            row = conn.execute(
                select(Meta.value).where(Meta.key == "schema_version")).scalar_one_or_none()
            version = int(row) if row else 0
            if version > models.SCHEMA_VERSION:
                raise self._newer(f"schema v{version}")
            revision = migrate.stored_revision(conn)
            if revision == migrate.head() and version == models.SCHEMA_VERSION:
                return
            if revision is None:  # a store from before Alembic
                if version < 1:
                    raise StoreVersionError(f"no migration from store schema v{version}")
                migrate.stamp_legacy(conn, version)
            try:
                migrate.upgrade(conn)
            except migrate.UnknownRevision as exc:
                raise self._newer(f"schema revision {exc.revision!r}") from None
            conn.execute(Meta.__table__.update().where(Meta.key == "schema_version")
                         .values(value=str(models.SCHEMA_VERSION)))

    def _newer(self, what: str) -> StoreVersionError:
        return StoreVersionError(
            f"the store at {self.engine.url!r} has {what}, newer than this a2rl understands "
            f"(v{models.SCHEMA_VERSION}); upgrade a2rl or point A2RL_DB_URL at another database")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A short transaction, committed on success and rolled back on error."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def put_blob(self, data: bytes) -> str:
        """Store bytes once and return their sha256."""
        blob = blob_row(data)
        if self.dialect in ("sqlite", "postgresql"):
            # One atomic statement: concurrent writers of the same content (two nodes
            # storing one file) cannot collide on the primary key.
            insert = _dialect_insert(self.dialect)
            values = blob.model_dump()
            with self.session() as s:
                s.execute(insert(Blob).values(**values).on_conflict_do_nothing(
                    index_elements=["sha256"]))
            return blob.sha256
        with self._blob_lock, self.session() as s:
            if s.get(Blob, blob.sha256) is None:
                s.add(blob)
        return blob.sha256

    def get_blob(self, sha: str) -> bytes:
        with self.session() as s:
            blob = s.get(Blob, sha)
            if blob is None:
                raise KeyError(f"no blob {sha}")
            return zlib.decompress(blob.data) if blob.encoding == "zlib" else blob.data

    def close(self) -> None:
        self.engine.dispose()
