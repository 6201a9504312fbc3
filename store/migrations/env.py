"""Alembic's environment for the store: it runs on the connection `a2rl.store.migrate` hands it,
inside the transaction that opened the store (under PostgreSQL's advisory lock, so nodes that
open an older store at once take turns, and DDL rolls back whole there), never on one of its
own: a store is upgraded by opening it (`a2rl runs` will do)."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from a2rl.store import models  # noqa: F401  (the tables, for target_metadata)

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the store's revisions run when a2rl opens the store (`a2rl runs`), on "
                       "its connection; alembic's own command line has none to give")
context.configure(connection=connection, target_metadata=SQLModel.metadata)
with context.begin_transaction():
    context.run_migrations()
