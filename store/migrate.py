"""Upgrading an older store's schema: Alembic, with the revisions in `store/migrations/`.

Revision `vN` is schema version N (`models.SCHEMA_VERSION`, the head). A store's revision is in
Alembic's own table (`alembic_version`); `meta.schema_version` keeps the number as well, because
that is what older a2rl releases read to refuse a store newer than they are.

Why Alembic runs only when a store's revision is not the code's (`Store._ensure_schema`):
importing it and reading its scripts costs 0.1 to 0.4 s, and tests and commands open many
stores. A new store is made whole by `create_all` and stamped with the head revision directly,
in Alembic's own table layout (`VERSION_TABLE`), without importing Alembic.

New tables need no revision: `create_all` runs on every open, before any revision, and makes
the missing ones with the models' current columns. So a revision adds a column only where it is
missing (`add_missing_columns`): on a table `create_all` just made, it is there already.

Stores from before Alembic have no version table: each is stamped with the revision its
`meta.schema_version` names, and upgraded from there (`stamp_legacy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    select,
)

from . import models

if TYPE_CHECKING:
    from alembic.config import Config

#: the revision scripts (package data: they ship with a2rl)
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

#: Alembic's version table, as Alembic makes it (`alembic.runtime.migration`)
VERSION_TABLE = Table("alembic_version", MetaData(),
                      Column("version_num", String(32), nullable=False),
                      PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))

#: the last schema version before Alembic: its first release made the audit table and none of
#: the columns v6 grew later, and its stores say v6 all the same
LAST_WITHOUT_ALEMBIC = 6


class UnknownRevision(RuntimeError):
    """The store's revision is none of this code's: a newer a2rl (or another branch) wrote it."""

    def __init__(self, revision: str) -> None:
        super().__init__(revision)
        self.revision = revision


def revision_of(version: int) -> str:
    return f"v{version}"


def head() -> str:
    """The revision of the code's schema."""
    return revision_of(models.SCHEMA_VERSION)


def stored_revision(conn: Connection) -> str | None:
    """The store's Alembic revision; None for a store from before Alembic."""
    if not inspect(conn).has_table(VERSION_TABLE.name):
        return None
    return conn.execute(select(VERSION_TABLE.c.version_num)).scalar_one_or_none()


def stamp(conn: Connection, revision: str) -> None:
    """Record `revision` as the store's, as `alembic stamp` would."""
    VERSION_TABLE.create(conn, checkfirst=True)
    conn.execute(VERSION_TABLE.delete())
    conn.execute(VERSION_TABLE.insert().values(version_num=revision))


def stamp_legacy(conn: Connection, version: int) -> None:
    """Stamp a store from before Alembic with the revision of its `meta.schema_version`; one
    that says v6 may be an early v6 store, so it is stamped v5 and gets the v6 revision, which
    adds only what is missing."""
    stamp(conn, revision_of(version - 1 if version == LAST_WITHOUT_ALEMBIC else version))


def config(conn: Connection) -> Config:
    """Alembic's configuration for the store on `conn`: our scripts, run on that connection
    (inside its transaction, under PostgreSQL's advisory lock), never a connection of their
    own (migrations/env.py)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(conn: Connection) -> None:
    """Run every revision from the store's to the head on `conn`; `UnknownRevision` when the
    store's is none of ours."""
    from alembic import command
    from alembic.script import ScriptDirectory

    cfg = config(conn)
    stored = stored_revision(conn)
    known = {script.revision for script in ScriptDirectory.from_config(cfg).walk_revisions()}
    if stored is not None and stored not in known:
        raise UnknownRevision(stored)
    command.upgrade(cfg, "head")


def add_missing_columns(table: str, *columns: Column[object]) -> list[str]:
    """In a revision: add each of `columns` that `table` lacks; the names of those added."""
    from alembic import op

    have = {c["name"] for c in inspect(op.get_bind()).get_columns(table)}
    added = [c for c in columns if c.name not in have]
    for column in added:
        op.add_column(table, column)
    return [c.name for c in added]
