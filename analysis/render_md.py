"""The report as Markdown: readable raw in a terminal, rendered on a code host.

Every string that the agent could have written (commands, paths, log lines, messages, tool
names) goes through `md_escape`, so that a renderer shows it and never runs it.
"""

from __future__ import annotations

from .fmt import (
    FAILURE_LABELS,
    ROUTE_LABELS,
    attribution_rows,
    audit_headline,
    dur,
    evidence,
    metric_rows,
    narrative_note,
    num,
    summary_rows,
)
from .ledger_view import ledger_rows
from .lineage_view import stage_rows
from .md_escape import cell, code, fence, prose, text
from .schema import Attribution, AuditEvidence, AuditSection, LineageSection, Report

SECTIONS = ["Summary", "Audit", "Cost ledger", "Score trajectory", "Checkpoint lineage",
            "Stage attribution",
            "Training routes",
            "Failures", "Timeline", "Process metrics", "Code history"]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A table of Markdown cells (made with `text` or `code`)."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]


def _plain(rows: list[tuple[str, str]]) -> list[list[str]]:
    return [[text(label), text(value)] for label, value in rows]


def audit_evidence(e: AuditEvidence) -> str:
    """An audit flag's evidence as one Markdown cell: ids as text, the agent's paths and
    quotes as code spans (they are the agent's text)."""
    parts = []
    for label, ids in (("calls", [f"#{i}" for i in e.tool_calls]),
                       ("revisions", [str(i) for i in e.revisions]),
                       ("jobs", e.jobs), ("submissions", e.submissions),
                       ("evaluations", [str(i) for i in e.evaluations]), ("items", e.items)):
        if ids:
            parts.append(f"{label} {text(', '.join(ids))}")
    if e.paths:
        parts.append("paths " + ", ".join(code(p) for p in e.paths))
    parts += [f"quote {code(x)}" for x in e.excerpts]
    return "; ".join(parts) or "–"


def audit_markdown(a: AuditSection | None) -> list[str]:
    out = ["## Audit", "", text(audit_headline(a)), ""]
    if a is not None and a.flags:
        out += _table(["severity", "check", "finding", "evidence"], [
            [text(f.severity), text(f.kind), text(f.finding), audit_evidence(f.evidence)]
            for f in a.flags]) + [""]
    return out


def attribution_markdown(a: Attribution | None) -> list[str]:
    """Each stage of the final checkpoint's lineage with its score and gain."""
    out = ["## Stage attribution", ""]
    if a is None:
        return [*out, "No final submission with a lineage.", ""]
    out += [f"Each stage of the final checkpoint's lineage, oldest first, scored on "
            f"{text(a.split)}; its gain over the stage before, with the paired 95% interval.",
            ""]
    out += _table(["checkpoint", "route", "job", "score", "gain", "score from"], [
        [code(c) if c != "base model" else text(c), text(r), text(j), text(sc), text(g),
         text(src)] for c, r, j, sc, g, src in attribution_rows(a)])
    if a.note:
        out += ["", f"Lineage incomplete: {text(a.note)}"]
    return [*out, ""]


def lineage_markdown(section: LineageSection | None) -> list[str]:
    """The shown submission's chain as a table, then each submission's in one line."""
    out = ["## Checkpoint lineage", ""]
    if section is None:
        return [*out, "No submission with a lineage.", ""]
    lin = section.shown
    which = "final" if section.shown_submission_id == section.final_submission_id else "last"
    out += [f"Submission {text(section.shown_submission_id)} ({which}), {code(lin.checkpoint)}, "
            "newest first:", ""]
    out += _table(["checkpoint", "made", "command", "from"], [
        [code(c), text(who), code(what) if what else "–", text(src) if src else "–"]
        for c, who, what, src in stage_rows(lin)])
    if lin.note:
        out += ["", f"Incomplete: {text(lin.note)}"]
    out += [""] + [f"- {text(c.submission_id)}: {code(c.chain)}"
                   + ("" if c.complete else " (incomplete)") for c in section.submissions]
    return [*out, ""]


def render_markdown(r: Report, max_diff_lines: int = 200) -> str:
    s, m, t = r.summary, r.metrics, r.timeline
    out = [f"# Run report: {text(s.run_id)}", "",
           f"_schema {text(r.schema_version)}, generated {text(r.generated_at)}_", ""]
    if r.narrative is not None:
        out += ["## Narrative (LLM-generated)", "", f"_{text(narrative_note(r.narrative))}_",
                ""]
        out += [f"> {prose(line)}" if line else ">"
                for line in (r.narrative.text or "").splitlines()]
        out += [""] if r.narrative.text else []
    out += ["## Summary", ""]
    out += _table(["field", "value"], _plain(summary_rows(r)))
    if s.final_provenance:
        prov = ", ".join(f"{k}={v}" for k, v in s.final_provenance.items()
                         if not isinstance(v, dict | list))
        out += ["", f"Final evaluation provenance: {text(prov)}"]
    out += ["", *audit_markdown(r.audit)]
    out += ["## Cost ledger", ""]
    out += _table(["item", "value"], [[text(k), text(v)] for k, v in ledger_rows(r.ledger)])
    out += [""]
    out += ["## Score trajectory", "",
            f"Baseline on {text(r.trajectory.split)}: {num(r.trajectory.baseline)}", ""]
    out += _table(["time", "submission", "score", "95% CI", "new best"], [
        [dur(p.at_s), text(p.submission_id), num(p.score),
         f"{num(p.ci_low)}–{num(p.ci_high)}", "yes" if p.improved_best else ""]
        for p in r.trajectory.points]) if r.trajectory.points else ["No graded submission."]
    out += ["", *lineage_markdown(r.lineage)]
    out += attribution_markdown(r.attribution)
    out += ["## Training routes", ""]
    for rt in r.routes:
        also = f" (also: {', '.join(ROUTE_LABELS[a] for a in rt.also)})" if rt.also else ""
        out += [f"- **{text(rt.submission_id)}** {code(rt.path)}: "
                f"**{ROUTE_LABELS[rt.route]}**{also}"]
        out += [f"  - {code(evidence(e))}" for e in rt.evidence]
    if not r.routes:
        out.append("No submission.")
    out += ["", "## Failures", ""]
    for f in r.failures:
        out += [f"- **{FAILURE_LABELS[f.type]}** at {dur(f.at_s)}: {text(f.message)}"]
        out += [f"  - {code(evidence(e))}" for e in f.evidence]
    if not r.failures:
        out.append("None detected.")
    out += ["", "## Timeline", "",
            f"{len(t.tool_calls)} tool calls, {len(t.jobs)} jobs, {len(t.submissions)} "
            f"submissions over {dur(t.end_s)}; grading took {dur(t.grading_s)}; idle "
            f"(no tool call, no job, gaps over {dur(t.idle_threshold_s)}) {dur(t.idle_s)}.", ""]
    rows = [(j.start_s, ["job", f"{text(j.id)}: {code(j.command[:80])}",
             f"{text(j.state)} exit={j.exit_code} ({dur((j.end_s or t.end_s) - j.start_s)})"])
            for j in t.jobs]
    rows += [(x.at_s, ["submission", f"{text(x.id)}: {code(x.path)}", text(x.status)])
             for x in t.submissions]
    rows += [(g.start_s, ["idle", f"until {dur(g.end_s)}", dur(g.end_s - g.start_s)])
             for g in t.idle_gaps]
    out += _table(["at", "what", "detail", "outcome"],
                  [[dur(at), *row] for at, row in sorted(rows, key=lambda x: x[0])])
    out += ["", "## Process metrics", ""]
    out += _table(["metric", "value"], _plain(metric_rows(m)))
    out += ["", "## Code history", ""]
    for cv in r.code_history:
        if cv.snapshot_id is None:
            out += [f"### {text(cv.submission_id)}", "", "No code snapshot (refused at once).",
                    ""]
            continue
        out += [f"### {text(cv.submission_id)} (snapshot {text(cv.snapshot_id)}, "
                f"{len(cv.files)} files)", ""]
        if not cv.changes:
            out += ["No change since the previous submission.", ""]
            continue
        out += [f"- {text(c.change)}: {code(c.path)}" for c in cv.changes] + [""]
        diff = "".join(c.diff for c in cv.changes).splitlines()
        cut = len(diff) > max_diff_lines or any(c.truncated for c in cv.changes)
        out += fence(diff[:max_diff_lines], "diff")
        out += ["_diff truncated_", ""] if cut else [""]
    if not r.code_history:
        out.append("No submission.")
    return "\n".join(out).rstrip() + "\n"

