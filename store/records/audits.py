"""`audit` rows: a run's cheating audit, one row per run, replaced when recomputed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..db import Store
from ..models import Audit


def save(store: Store, run_id: str, *, audit_version: int, computed_at: datetime, high: int,
         flags: list[dict[str, Any]], checks: dict[str, Any]) -> None:
    """The run's audit (`a2rl.audit`'s report, as JSON), replacing an earlier one."""
    with store.session() as s:
        row = s.get(Audit, run_id)
        if row is None:
            row = Audit(run_id=run_id, audit_version=audit_version)
        row.audit_version, row.computed_at = audit_version, computed_at
        row.high, row.flags, row.checks = high, flags, checks
        s.add(row)
