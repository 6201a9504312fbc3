"""The run's stored cheating audit as every report format and the viewer show it.

The audit is computed and stored by `a2rl.audit` (when a run finishes, or by `a2rl audit`);
this module only reads it: `audit_section` for one run's report (JSON, Markdown, HTML, the
run page), `audit_states` for the runs page's column and filter (one query for every run).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel
from sqlmodel import col, select

from a2rl.audit import SEVERITY_ORDER, AuditReport, Severity, load_audit
from a2rl.store import Audit, Store

from .schema import AuditFlag, AuditSection

#: the runs page's audit filter: its `?audit=` value -> the label the select shows
AUDIT_FILTERS: dict[str, str] = {
    "": "any audit state",
    "flagged": "flagged (a high flag)",
    "flags": "with any flag",
    "unflagged": "not flagged (no high flag)",
    "clean": "audited, no flag",
    "not_audited": "not audited",
}


def section_of(report: AuditReport | None) -> AuditSection:
    """`report` (a stored audit, or None) as the report's section."""
    if report is None:
        return AuditSection(status="not_audited")
    # Worst first; `sorted` is stable, so flags of one severity keep the audit's order.
    flags = sorted(report.flags, key=lambda f: -SEVERITY_ORDER[f.severity])
    counts = {s.value: sum(f.severity == s for f in flags) for s in reversed(Severity)}
    return AuditSection(
        status="flagged" if report.flagged else "flags" if flags else "clean",
        audit_version=report.audit_version, computed_at=report.computed_at.isoformat(),
        by_severity={k: v for k, v in counts.items() if v},
        flags=[AuditFlag.model_validate(f.model_dump(mode="json")) for f in flags],
        checks=dict(report.checks))


def audit_section(store: Store, run_id: str) -> AuditSection:
    return section_of(load_audit(store, run_id))


class AuditState(BaseModel):
    """One run's cell on the runs page."""

    status: str  # as AuditSection.status
    flags: int = 0
    high: int = 0

    @property
    def label(self) -> str:
        if self.status == "not_audited":
            return "not audited"
        if not self.flags:
            return "clean"
        return f"{self.flags} flag{'s' if self.flags != 1 else ''}" + (
            f" ({self.high} high)" if self.high else "")

    def shown_by(self, choice: str) -> bool:
        """Whether the runs page's filter `choice` (a key of AUDIT_FILTERS) shows this run."""
        return {"flagged": self.high > 0, "flags": self.flags > 0, "unflagged": self.high == 0,
                "clean": self.status == "clean",
                "not_audited": self.status == "not_audited"}.get(choice, True)


def audit_states(store: Store, run_ids: Iterable[str]) -> dict[str, AuditState]:
    """Each run's audit state, in one query (a run without a stored audit: not audited)."""
    ids = list(run_ids)
    with store.session() as s:
        rows = s.exec(select(Audit.run_id, Audit.high, Audit.flags)
                      .where(col(Audit.run_id).in_(ids))).all() if ids else []
    found = {rid: AuditState(status="flagged" if high else "flags" if flags else "clean",
                             flags=len(flags or []), high=high or 0)
             for rid, high, flags in rows}
    return {rid: found.get(rid, AuditState(status="not_audited")) for rid in ids}
