"""Reading and writing a run's audit in the store (`a2rl.store.Audit`)."""

from __future__ import annotations

from sqlmodel import col, select

from a2rl.store import Audit, Store
from a2rl.store.records import audits

from .model import AuditReport


def save_audit(store: Store, report: AuditReport) -> None:
    """Store `report` as the run's audit, replacing an earlier one."""
    audits.save(store, report.run_id, audit_version=report.audit_version,
                computed_at=report.computed_at, high=report.high,
                flags=[f.model_dump(mode="json") for f in report.flags],
                checks=dict(report.checks))


def load_audit(store: Store, run_id: str) -> AuditReport | None:
    """The run's stored audit; None if it was never audited (a run from before audits, or
    one still going)."""
    with store.session() as s:
        row = s.get(Audit, run_id)
        if row is None:
            return None
        return AuditReport(run_id=row.run_id, audit_version=row.audit_version,
                           computed_at=row.computed_at, flags=row.flags, checks=row.checks)


def flagged_run_ids(store: Store, run_ids: list[str] | None = None) -> set[str]:
    """The runs among `run_ids` (all, if None) whose stored audit has a high flag standing."""
    with store.session() as s:
        q = select(Audit.run_id).where(Audit.high > 0)
        if run_ids is not None:
            q = q.where(col(Audit.run_id).in_(run_ids))
        return set(s.exec(q).all())
