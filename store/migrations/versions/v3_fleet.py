"""v3: runs gain their fleet membership (`a2rl fleet`: the resume key and the node).

Revision ID: v3
Revises: v2
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from a2rl.store.migrate import add_missing_columns

revision = "v3"
down_revision = "v2"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("run", sa.Column("fleet_id", sa.String()),
                        sa.Column("fleet_repeat", sa.Integer()),
                        sa.Column("fleet_node", sa.String()))
    if "ix_run_fleet_id" not in {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("run")}:
        op.create_index("ix_run_fleet_id", "run", ["fleet_id"])
