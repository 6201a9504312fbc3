"""Opening the store: engine setup, SQLite concurrency settings and schema versioning.

SQLite runs in WAL mode with a busy timeout and `BEGIN IMMEDIATE` transactions, so that writers
in several threads and processes queue for the write lock instead of failing on a lock upgrade.
Keep transactions short: a session is opened per operation, never held across a tool call.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, event, inspect
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine, select

from . import models
from .models import Blob, Meta


def _v1_to_v2(conn: Connection) -> None:
    """Runs gain the agent process's outcome and transcript."""
    for column, kind in (("agent_status", "VARCHAR"), ("agent_exit_code", "INTEGER"),
                         ("agent_transcript_sha", "VARCHAR"), ("agent_stderr_sha", "VARCHAR")):
        conn.exec_driver_sql(f"ALTER TABLE run ADD COLUMN {column} {kind}")


# Each entry upgrades the schema from version n to n + 1.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2}


class StoreVersionError(RuntimeError):
    """The database was written by a different, incompatible version of a2rl."""


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


class Store:
    """A handle on one database. Cheap to share between threads; open one per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        is_sqlite = url.startswith("sqlite")
        kwargs = {"connect_args": {"check_same_thread": False, "timeout": 30}} if is_sqlite else {}
        self.engine = create_engine(url, **kwargs)
        if is_sqlite:
            _sqlite_setup(self.engine)
        self._blob_lock = threading.Lock()
        self._ensure_schema()

    def _ensure_schema(self) -> None:
        with self.engine.begin() as conn:
            fresh = not inspect(conn).has_table("meta")
            SQLModel.metadata.create_all(conn)
            if fresh:
                conn.execute(Meta.__table__.insert().values(
                    key="schema_version", value=str(models.SCHEMA_VERSION)))
                return
            row = conn.execute(
                select(Meta.value).where(Meta.key == "schema_version")).scalar_one_or_none()
            version = int(row) if row else 0
            if version > models.SCHEMA_VERSION:
                raise StoreVersionError(
                    f"the store at {self.engine.url!r} has schema v{version}, newer than this "
                    f"a2rl understands (v{models.SCHEMA_VERSION}); upgrade a2rl or point "
                    "A2RL_DB_URL at another database")
            while version < models.SCHEMA_VERSION:
                if version not in MIGRATIONS:
                    raise StoreVersionError(f"no migration from store schema v{version}")
                MIGRATIONS[version](conn)
                version += 1
            conn.execute(Meta.__table__.update().where(Meta.key == "schema_version")
                         .values(value=str(version)))

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
        sha = hashlib.sha256(data).hexdigest()
        packed = zlib.compress(data, 1)
        encoding = "zlib"
        if len(packed) >= len(data):
            packed, encoding = data, "raw"
        with self._blob_lock, self.session() as s:
            if s.get(Blob, sha) is None:
                s.add(Blob(sha256=sha, size=len(data), encoding=encoding, data=packed))
        return sha

    def get_blob(self, sha: str) -> bytes:
        with self.session() as s:
            blob = s.get(Blob, sha)
            if blob is None:
                raise KeyError(f"no blob {sha}")
            return zlib.decompress(blob.data) if blob.encoding == "zlib" else blob.data

    def close(self) -> None:
        self.engine.dispose()
