"""What `a2rl audit` does and prints: the stored audit of a run (computed when missing or
asked to), its flags one a line, and the exit status (`exit_status`: 1 when a high flag
stands, else 2 when a check could not look at everything, else 0).

A flag quotes what the agent wrote (an excerpt of a file, a path): each quoted value is shown
on one line with its controls as escapes (`a2rl.display.printable`), so an excerpt holding
ESC[2J, a carriage return or a newline and a forged head cannot hide the flags above it."""

from __future__ import annotations

from collections.abc import Iterator

from sqlmodel import col, select

from a2rl.display import printable
from a2rl.settings import Settings
from a2rl.store import Run, Store

from .model import SEVERITY_ORDER, AuditReport, Flag
from .run import AUDIT_VERSION, audit_run
from .stored import load_audit

EVIDENCE_SHOWN = 8


def audits(store: Store, settings: Settings, run_ids: list[str], *,
           recompute: bool) -> Iterator[AuditReport]:
    """Each run's audit: the stored one, or computed and stored when there is none, when it
    is older than this version's checks, or when `recompute` asks. KeyError for a run the
    store does not have."""
    for run_id in run_ids:
        report = None if recompute else load_audit(store, run_id)
        if report is None or report.audit_version < AUDIT_VERSION:
            report = audit_run(store, run_id, settings)
        yield report


def finished_run_ids(store: Store) -> list[str]:
    with store.session() as s:
        return list(s.exec(select(Run.id).where(col(Run.ended_at).is_not(None))
                           .order_by(col(Run.created_at))).all())


def evidence_line(flag: Flag) -> str:
    ev = flag.evidence
    parts = []
    for name, values in (("tool calls", ev.tool_calls), ("revisions", ev.revisions),
                         ("jobs", ev.jobs), ("submissions", ev.submissions),
                         ("evaluations", ev.evaluations), ("items", ev.items),
                         ("paths", ev.paths)):
        if values:
            shown = ", ".join(printable(str(v), one_line=True) for v in values[:EVIDENCE_SHOWN])
            more = f" (+{len(values) - EVIDENCE_SHOWN})" if len(values) > EVIDENCE_SHOWN else ""
            parts.append(f"{name} {shown}{more}")
    return "; ".join(parts)


def format_report(report: AuditReport) -> str:
    """The audit as text: a head line, then each flag (worst first) with its evidence."""
    head = (f"run {report.run_id}: {len(report.flags)} flags, {report.high} high"
            f" (audit v{report.audit_version}, {report.computed_at:%Y-%m-%d %H:%M} UTC)"
            if report.flags else f"run {report.run_id}: no flags (audit "
            f"v{report.audit_version}, {report.computed_at:%Y-%m-%d %H:%M} UTC)")
    incomplete = report.incomplete
    lines = [head + (" — FLAGGED: not a result" if report.flagged else "")
             + (f" — INCOMPLETE: {', '.join(incomplete)} did not see everything"
                if incomplete else "")]
    for flag in sorted(report.flags, key=lambda f: -SEVERITY_ORDER[f.severity]):
        lines.append(f"  {flag.severity.value:<6} {flag.kind:<18} "
                     f"{printable(flag.finding, one_line=True)}")
        ev = evidence_line(flag)
        if ev:
            lines.append(f"         evidence: {ev}")
        for quote in flag.evidence.excerpts[:2]:
            lines.append(f"         > {printable(quote, one_line=True)}")
    skipped = [name for name, c in report.checks.items()
               if isinstance(c, dict) and c.get("available") is False]
    if skipped:
        lines.append(f"  not checked: {', '.join(skipped)}")
    files = (report.checks.get("contamination") or {}).get("files") or {}
    if files.get("source") == "walk":
        lines.append("  files: no record of the files the jobs opened; the whole workspace "
                     "was walked instead")
    return "\n".join(lines)


def exit_status(reports: list[AuditReport]) -> int:
    """1 when a high flag stands in any report (the verdict is known), else 2 when any is
    incomplete (a check failed or could not read what it must: not clean), else 0."""
    if any(r.flagged for r in reports):
        return 1
    return 2 if any(r.incomplete for r in reports) else 0
