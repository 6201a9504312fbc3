"""v2: runs gain the agent process's outcome and transcript.

Revision ID: v2
Revises: v1
"""

from __future__ import annotations

import sqlalchemy as sa

from a2rl.store.migrate import add_missing_columns

revision = "v2"
down_revision = "v1"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("run", sa.Column("agent_status", sa.String()),
                        sa.Column("agent_exit_code", sa.Integer()),
                        sa.Column("agent_transcript_sha", sa.String()),
                        sa.Column("agent_stderr_sha", sa.String()))
