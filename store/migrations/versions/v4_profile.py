"""v4: runs gain their evaluation profile; every earlier run was evaluated as `a2rl`.

Revision ID: v4
Revises: v3
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from a2rl.store.migrate import add_missing_columns

revision = "v4"
down_revision = "v3"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("run", sa.Column("profile", sa.String(), server_default="a2rl"))
    run = sa.table("run", sa.column("profile", sa.String()))
    op.execute(run.update().where(run.c.profile.is_(None)).values(profile="a2rl"))
