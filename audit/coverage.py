"""What the record itself lacks, so a clean audit cannot rest on a gap: revision scans that
stopped before they saw the whole workspace, and tool calls whose whole arguments were not
kept (the run's `recording.tool_arg_run_keep_bytes` used up).

Why a check of its own: every text check reads the record; where the record is partial, each
of them would be quietly partial too. One flag per kind of gap, `medium` (a person should
look: an agent can make these gaps on purpose, issue 43), with the evidence that names them.
"""

from __future__ import annotations

from .model import Evidence, Flag, Severity
from .record import CheckResult, RunRecord
from .texts import arguments_not_kept

MAX_SHOWN = 20


def check_coverage(record: RunRecord, **_: object) -> CheckResult:
    flags: list[Flag] = []
    stops = record.scan_stops
    if stops:
        reasons = sorted({str((e.detail or {}).get("reason", "?")) for e in stops})
        calls = sorted({int(c) for e in stops if (c := (e.detail or {}).get("tool_call_id"))})
        jobs = sorted({str(j) for e in stops if (j := (e.detail or {}).get("job_id"))})
        flags.append(Flag(
            kind="coverage", severity=Severity.medium,
            finding=f"the revision scan stopped {len(stops)} time{'s' if len(stops) != 1 else ''}"
                    f" before the whole workspace ({', '.join(reasons)} cap): files it did not "
                    "see have no revision",
            evidence=Evidence(tool_calls=calls[:MAX_SHOWN], jobs=jobs[:MAX_SHOWN])))
    # a refused call ran nothing (too large, unknown arguments, a message the guard cut)
    cut = {call.id: n for call in record.tool_calls
           if not call.is_error and (n := arguments_not_kept(call))}
    if cut:
        flags.append(Flag(
            kind="coverage", severity=Severity.medium,
            finding=f"{len(cut)} tool call{'s' if len(cut) != 1 else ''} kept only the first "
                    f"bytes of their arguments ({sum(cut.values())} bytes in all, the run's "
                    "whole-argument allowance used up): the rest is unchecked",
            evidence=Evidence(tool_calls=[c for c in sorted(cut) if c is not None][:MAX_SHOWN])))
    return CheckResult(flags=flags, summary={
        "scan_stops": len(stops), "arguments_not_kept": len(cut),
        "job_file_rows": len(record.job_files)})
