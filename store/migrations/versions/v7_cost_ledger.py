"""v7: what each job used (CPU seconds, peak memory, GPU seconds, peak GPU memory), for the
cost ledger; the `ledger` table itself is new, so `create_all` makes it.

Revision ID: v7
Revises: v6
"""

from __future__ import annotations

import sqlalchemy as sa

from a2rl.store.migrate import add_missing_columns

revision = "v7"
down_revision = "v6"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("job", sa.Column("cpu_s", sa.Float()),
                        sa.Column("memory_peak_bytes", sa.BigInteger()),
                        sa.Column("gpu_s", sa.Float()),
                        sa.Column("gpu_memory_peak_bytes", sa.BigInteger()))
