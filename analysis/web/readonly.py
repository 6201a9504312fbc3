"""Opening a store for reading only: nothing created, nothing migrated, no write lock taken.

`Store(url)` creates a missing database and upgrades an old one; a viewer must do neither (a
typo in the URL would otherwise leave an empty store behind, and a viewer next to a running
server must not take SQLite's write lock). SQLite is opened as a read-only URI (`mode=ro`)
with deferred transactions; PostgreSQL sessions are `default_transaction_read_only`.
"""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import Connection, event, inspect, select
from sqlalchemy.engine import make_url
from sqlmodel import create_engine

from a2rl.store import SCHEMA_VERSION, Meta, Store
from a2rl.store.db import not_a_store


class StoreOpenError(RuntimeError):
    """The store is missing, unreadable or of another schema version: one line for the user."""


class ReadOnlyStore(Store):
    """A `Store` whose engine cannot write; `put_blob` and friends fail at the database."""

    def __init__(self, url: str) -> None:  # deliberately not Store.__init__: no schema setup
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self._blob_lock = threading.Lock()
        if self.dialect == "sqlite":
            db = parsed.database or ""
            if not db or db == ":memory:" or not Path(db).is_file():
                raise StoreOpenError(f"no store at {db or url!r} (nothing was created)")
            ro = f"sqlite:///file:{Path(db).resolve()}?mode=ro&uri=true"
            self.engine = create_engine(ro, connect_args={"check_same_thread": False,
                                                          "timeout": 30})

            @event.listens_for(self.engine, "connect")
            def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
                dbapi_conn.isolation_level = None
                dbapi_conn.execute("PRAGMA busy_timeout=30000")

            @event.listens_for(self.engine, "begin")
            def _on_begin(conn: Connection) -> None:
                conn.exec_driver_sql("BEGIN")  # deferred: a reader never takes the write lock
        elif self.dialect == "postgresql":
            self.engine = create_engine(url, pool_pre_ping=True, connect_args={
                "options": "-c timezone=UTC -c default_transaction_read_only=on"})
        else:
            self.engine = create_engine(url)
        self._check_schema()

    def _check_schema(self) -> None:
        try:
            with self.engine.connect() as conn:
                if not inspect(conn).has_table("meta"):
                    raise StoreOpenError(not_a_store(self._name()))
                row = conn.execute(select(Meta.value).where(  # type: ignore[call-overload]
                    Meta.key == "schema_version")).scalar_one_or_none()
        except StoreOpenError:
            self.engine.dispose()
            raise
        except Exception as exc:
            self.engine.dispose()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreOpenError(f"cannot read the store {self._name()}: {first}") from None
        version = int(row) if row and row.isdigit() else 0
        if version != SCHEMA_VERSION:
            self.engine.dispose()
            raise StoreOpenError(
                f"the store {self._name()} has schema v{version}, this a2rl reads "
                f"v{SCHEMA_VERSION}; open it once with `a2rl runs` to migrate it, or upgrade a2rl")

    def _name(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def _ensure_schema(self) -> None:  # pragma: no cover - never called, kept for clarity
        raise StoreOpenError("a read-only store never creates or migrates its schema")


def open_readonly(url: str) -> ReadOnlyStore:
    return ReadOnlyStore(url)
