"""v8: what made a run (an agent, or a replay of another run's recipe) and the agent's last
error; the code snapshot each job ran with and whether its file accesses were recorded; each
submission's lineage; which regrade made an evaluation and which evaluation replaced it; the
checks of a run's submissions in its ledger; a tool call's whole arguments where the stored
ones were cut (the `regrade` and `jobfile` tables are new, made by `create_all`).

Revision ID: v8
Revises: v7
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from a2rl.store.migrate import add_missing_columns

revision = "v8"
down_revision = "v7"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_missing_columns("run", sa.Column("kind", sa.String(), nullable=False,
                                         server_default="agent"),
                        sa.Column("replay_of", sa.String()),
                        sa.Column("agent_error", sa.String()))
    have = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("run")}
    for column in ("kind", "replay_of"):
        if f"ix_run_{column}" not in have:
            op.create_index(f"ix_run_{column}", "run", [column])
    add_missing_columns("job", sa.Column("snapshot_id", sa.Integer()),
                        sa.Column("files_recorded", sa.String()))
    add_missing_columns("submission", sa.Column("lineage", sa.JSON()))
    add_missing_columns("evaluation", sa.Column("regrade_id", sa.Integer()),
                        sa.Column("superseded_by", sa.Integer()))
    add_missing_columns("ledger", sa.Column("validations", sa.Integer(), nullable=False,
                                            server_default="0"),
                        sa.Column("validation_cpu_s", sa.Float()))
    add_missing_columns("toolcall", sa.Column("arguments_blob", sa.String()))
