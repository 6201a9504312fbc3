"""v5: revisions gain their size and whether their content was stored (a run's revision bytes
are capped); every earlier revision stored its content.

Revision ID: v5
Revises: v4
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from a2rl.store.migrate import add_missing_columns

revision = "v5"
down_revision = "v4"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("revision", sa.Column("size", sa.Integer()),
                        sa.Column("content_stored", sa.Boolean(), server_default=sa.true()))
    rev = sa.table("revision", sa.column("content_stored", sa.Boolean()))
    op.execute(rev.update().where(rev.c.content_stored.is_(None)).values(content_stored=True))
