"""Checkpoint lineage as `a2rl show`, the report (JSON, Markdown, HTML) and the viewer show
it: each submission's stored `Submission.lineage` (`a2rl.store.lineage`), the final one's
whole, and its chain in words. Pure but for `lineage_section` and `lineage_json`.

Commands, paths and notes in a lineage are the agent's text: the lines here are plain text
with control and bidi characters shown as escapes (`visible`), and the Markdown and HTML
renderers escape them again for their own syntax."""

from __future__ import annotations

from typing import Any

from sqlmodel import col, select

from a2rl.display import printable
from a2rl.store import Run, Store, Submission
from a2rl.store.lineage import Lineage, LineageStage
from a2rl.store.lineage_query import stored_lineage

from .schema import LineageSection, SubmissionChain

HOW = {"trained": "trained", "copied": "copied", "edited": "edited with edit_file",
       "base": "the base model", "unknown": "made by no recorded job"}


def visible(value: object) -> str:
    """Agent text on one line, its control characters as escapes (`\\x1b`, `\\u202e`): the
    one function every view uses (`a2rl.display.printable`)."""
    return printable(str(value), one_line=True)


def _submissions(store: Store, run_id: str) -> tuple[Run | None, list[Submission]]:
    with store.session() as s:
        run = s.get(Run, run_id)
        subs = list(s.exec(select(Submission).where(Submission.run_id == run_id)
                           .order_by(col(Submission.created_at))).all())
    return run, subs


def chain(lineage: Lineage) -> str:
    """The stages as one line, newest first: `output/grpo (trained, j-2) <- ... <- base`."""
    parts = []
    for st in lineage.stages:
        if st.how == "base":
            parts.append("base_model")
        else:
            who = st.job_id or (f"call #{st.tool_calls[-1]}" if st.tool_calls else "no job")
            parts.append(f"{visible(st.checkpoint)} ({st.how}, {who})")
    return " <- ".join(parts) or "–"


def lineage_section(store: Store, run_id: str) -> LineageSection | None:
    """The report's section: every submission's chain and the final one's lineage whole (the
    last submission with one, while the run has no final). None when no submission has a
    lineage (refused ones, runs older than the record)."""
    run, subs = _submissions(store, run_id)
    found = [(sub, lin) for sub in subs if (lin := stored_lineage(sub)) is not None]
    if not found:
        return None
    final_id = run.final_submission_id if run is not None else None
    final = next((lin for sub, lin in found if sub.id == final_id), None)
    shown_id = final_id if final is not None else found[-1][0].id
    return LineageSection(
        final_submission_id=final_id, shown_submission_id=shown_id,
        shown=final if final is not None else found[-1][1],
        submissions=[SubmissionChain(submission_id=sub.id, checkpoint=lin.checkpoint,
                                     complete=lin.complete, chain=chain(lin))
                     for sub, lin in found])


def lineage_json(store: Store, run_id: str) -> dict[str, Any]:
    """`a2rl show --json`'s `lineage`: each submission's whole, and the final one's."""
    run, subs = _submissions(store, run_id)
    by_id = {sub.id: lin.model_dump(mode="json") for sub in subs
             if (lin := stored_lineage(sub)) is not None}
    final_id = run.final_submission_id if run is not None else None
    return {"final_submission_id": final_id, "final": by_id.get(final_id or ""),
            "submissions": by_id}


def _source(st: LineageStage) -> str:
    src = st.source
    if src is None:
        return ""
    if src.checkpoint is None:
        named = src.named_by_command + src.named_by_code
        return "from: not known" + (f" (named: {visible(', '.join(named))})" if named else "")
    how = {"read": "the job read it", "named": "only named, not seen read",
           "copied": "copied", "none": ""}[src.evidence]
    named = []
    if src.named_by_command:
        named.append("its command names " + visible(", ".join(src.named_by_command)))
    if src.named_by_code:
        named.append("its code names " + visible(", ".join(src.named_by_code)))
    return f"from {visible(src.checkpoint)} ({'; '.join([how, *named])})"


def stage_rows(lineage: Lineage) -> list[tuple[str, str, str, str]]:
    """(checkpoint, how and who, command and code, from where) per stage, newest first."""
    rows = []
    for st in lineage.stages:
        if st.how == "base":
            rows.append(("base_model", HOW["base"], "", ""))
            continue
        who = HOW[st.how] + (f" by {st.job_id}" if st.job_id else "")
        if st.snapshot_id is not None:
            who += f" (code snapshot {st.snapshot_id})"
        if st.tool_calls:
            who += f" (edit_file: call {', '.join(f'#{c}' for c in st.tool_calls)})"
        if st.other_writers:
            who += f" (also written by {', '.join(st.other_writers)})"
        if st.job_id and st.files_recorded and st.files_recorded != "complete":
            who += f" [files {visible(st.files_recorded)}]"
        what = visible(st.command) if st.command is not None else ""
        rows.append((visible(st.checkpoint), who, what, _source(st)))
    return rows


def lineage_lines(lineage: Lineage) -> list[str]:
    """The lineage as lines of plain text (`a2rl show`)."""
    lines = []
    for checkpoint, who, what, source in stage_rows(lineage):
        lines.append(f"{checkpoint}: {who}" + (f": {what}" if what else ""))
        if source:
            lines.append(f"  {source}")
    odd = [f for f in lineage.files if f.how in ("unattributed", "edited") or f.written_as]
    for f in odd[:10]:
        said = {"unattributed": "no job", "edited": f"edit_file call #{f.tool_call}"}.get(
            f.how, f.job_id or "no job")
        moved = f" (written as {visible(f.written_as)})" if f.written_as else ""
        lines.append(f"  file {visible(f.path)}: {said}{moved}")
    if lineage.note:
        lines.append(f"  incomplete: {visible(lineage.note)}")
    return lines
