"""v1: the first schema, which `create_all` makes whole; the base every revision builds on.

Revision ID: v1
"""

from __future__ import annotations

revision = "v1"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing: no store is older than v1."""
