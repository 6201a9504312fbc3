"""v6: the audit table (made by `create_all`, as every new table is), how a run and a job ended,
a run's owner, and each tool call's number within its run.

Stores of v6's first release (the audit table, none of these columns) say v6 without an Alembic
revision: they are stamped v5 and get this revision, which adds what they lack
(`migrate.stamp_legacy`).

Revision ID: v6
Revises: v5
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from a2rl.store.migrate import add_missing_columns
from a2rl.store.records.toolcalls import number_older as number_tool_calls

revision = "v6"
down_revision = "v5"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("run", sa.Column("end_kind", sa.String()))
    add_missing_columns("job", sa.Column("end_cause", sa.String()))
    add_missing_columns("job", sa.Column("end_evidence", sa.String()))
    add_missing_columns("run", sa.Column("owner", sa.String()))
    if add_missing_columns("toolcall", sa.Column("seq", sa.Integer())):
        number_tool_calls(op.get_bind())
