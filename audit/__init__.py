"""The cheating audit: checks over a run's record (and its task's hidden items, read on the
host and never shown), each raising flags with evidence.

    from a2rl.audit import AuditReport, Flag, Severity, load_audit, save_audit
    report = load_audit(store, run_id)     # the stored audit, or None
    report.flagged                         # a high-severity flag stands

The checks themselves live in this package, one module per check; `audit_run` (added with
them) computes a report from the store.
"""

from .model import SEVERITY_ORDER, AuditReport, Evidence, Flag, Severity
from .stored import flagged_run_ids, load_audit, save_audit

__all__ = ["SEVERITY_ORDER", "AuditReport", "Evidence", "Flag", "Severity", "flagged_run_ids",
           "load_audit", "save_audit"]
