"""`audit_run`: a run's audit, computed from its record and stored with it.

Why an audit never fails: it runs when a run finishes and when a person recomputes it; a
check that crashes (a task whose data is gone, a malformed row, a workspace shaped against its
reader) becomes a `medium` flag saying so, its failure is stored in the check's summary
(`failed`), and the other checks still run. Such an audit is incomplete
(`AuditReport.incomplete`), never clean: `a2rl audit` exits with status 2 for it. A finished
run stays finished whatever its audit says.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from a2rl.settings import Settings
from a2rl.store import Store, utcnow

from .checks import input_loader, load_checks
from .hidden import load_hidden
from .model import AuditReport, Evidence, Flag, Severity
from .record import load_record
from .stored import save_audit

log = logging.getLogger(__name__)

#: Bump when a check is added or changes what it flags: a stored audit older than this is
#: recomputed by `a2rl audit --all --recompute`.
AUDIT_VERSION = 2


def compute_audit(store: Store, run_id: str, settings: Settings) -> AuditReport:
    """The audit of `run_id` (KeyError if there is no such run), not stored."""
    record = load_record(store, run_id)
    checks, missing = load_checks()
    started = time.monotonic()
    hidden = load_hidden(record.run, settings)
    inputs: dict[str, Any] = {"hidden": hidden, "settings": settings}
    report = AuditReport(run_id=run_id, audit_version=AUDIT_VERSION, computed_at=utcnow(),
                         checks={name: {"available": False, "reason": why}
                                 for name, why in missing.items()})
    report.checks["_hidden"] = {"items": len(hidden.items), "train_items": len(hidden.train),
                                "paths": len(hidden.paths), "error": hidden.error,
                                "seconds": round(time.monotonic() - started, 3)}
    for name, check in checks.items():
        started = time.monotonic()
        try:
            loader = input_loader(name)
            extra = loader(store, record) if loader else {}
            result = check(record, **inputs, **extra)
        except Exception as exc:  # noqa: BLE001 - one check's crash is a finding, not a failure
            log.warning("audit of %s: check %s failed", run_id, name, exc_info=True)
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            report.flags.append(Flag(kind=name, severity=Severity.medium,
                                     finding=f"check {name} failed: {message}: the audit is "
                                             "incomplete",
                                     evidence=Evidence()))
            report.checks[name] = {"available": True, "failed": message}
            continue
        report.flags.extend(result.flags)
        report.checks[name] = {"available": True, **result.summary,
                               "seconds": round(time.monotonic() - started, 3)}
    return report


def audit_run(store: Store, run_id: str, settings: Settings) -> AuditReport:
    """Compute `run_id`'s audit and store it (replacing an earlier one)."""
    report = compute_audit(store, run_id, settings)
    save_audit(store, report)
    return report
