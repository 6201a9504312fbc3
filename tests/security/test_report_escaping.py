"""Reports show what the agent wrote and never run it, in Markdown, HTML and the viewer.

One real run, made through the real server and the local sandbox, writes hostile text
everywhere a report quotes the agent: a file name and its content (the code history), a
command and its output (the timeline, the failure's evidence), a checkpoint path (the refused
submission). The Markdown report is then rendered by a real CommonMark renderer, and that
HTML, the HTML report and the viewer's pages must hold no live element from the agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from a2rl.analysis import Report, build_report, render
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Store

from ..audit_guard import expect_cheating
from ..conftest import require_bwrap

pytestmark = pytest.mark.timeout(300)

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
LINK = "[click](javascript:alert(3))"
COMMENT = "<!-- hidden -->"
HOSTILE = f"{SCRIPT} {IMG} `` ` ``` a | b {LINK} {COMMENT} &amp;"
# No slash (a path component) and no quote (the shell command below quotes with ').
NAME = "x`<img src=x onerror=alert(4)>|`` ``y"
CONTENT = f"{HOSTILE}\n```\n{SCRIPT}\n```\n<div onclick=alert(5)>\n"
# It also leaves a checkpoint folder with a bogus config, which the submission refuses.
COMMAND = f"mkdir -p 'output/{NAME}'; echo '{{}}' > 'output/{NAME}/config.json'; " \
          f"echo '{HOSTILE}'; echo 'Traceback (most recent call last):'; " \
          f"echo 'RuntimeError: {HOSTILE}' >&2; exit 3"

# What CommonMark makes of the report's own Markdown; anything else came from the agent.
REPORT_TAGS = {"h1", "h2", "h3", "p", "em", "strong", "code", "pre", "ul", "li", "blockquote",
               "table", "thead", "tbody", "tr", "th", "td", "hr", "br"}


@pytest.fixture(scope="module")
def hostile(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Settings, Store, str, Report]]:
    require_bwrap()
    db = tmp_path_factory.mktemp("escaping") / "a2rl.db"
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{db}")
    store = Store(settings.database_url)
    run = create_run(settings, store, task_id="fixture", budget="30m", baseline=False).run

    async def agent() -> None:
        server = build_server(settings, store, run_id=run.id, transport="memory")
        async with Client(server, mode="legacy") as c:
            for args in ({"path": f"code/{NAME}.py", "new_text": CONTENT},
                         {"path": f"code/{NAME}.py", "new_text": CONTENT + f"{LINK}\n"}):
                assert not (await c.call_tool("edit_file", args)).is_error
            r = await c.call_tool("run_command", {"command": COMMAND, "wait_s": 30})
            assert r.structured_content.get("exit_code") == 3, r
            await c.call_tool("submit_checkpoint", {"path": f"output/{NAME}", "note": HOSTILE})

    try:
        anyio.run(agent)
    finally:
        finish_run(settings, store, run.id)
    _snapshot_the_hostile_file(store, run.id)
    _audit_quoting_the_agent(store, run.id)
    expect_cheating(db.parent, run.id)  # the made-up high flag above is the point
    report = build_report(store, run.id)
    yield settings, store, run.id, report
    store.close()


def _snapshot_the_hostile_file(store: Store, run_id: str) -> None:
    """Link the refused submission to a code snapshot of the hostile file, as a valid one's
    is linked: a checkpoint that passes validation takes a training run and a grading
    (minutes on a loaded machine), and the code history is all this adds."""
    from sqlmodel import select

    from a2rl.store import Revision, Snapshot, SnapshotFile, Submission

    with store.session() as s:
        rev = s.exec(select(Revision).where(Revision.run_id == run_id)
                     .order_by(Revision.id.desc())).first()  # type: ignore[union-attr]
        assert rev is not None and rev.path == f"code/{NAME}.py" and rev.blob_sha
        snap = Snapshot(run_id=run_id, reason="submission")
        s.add(snap)
        s.flush()
        assert snap.id is not None
        s.add(SnapshotFile(snapshot_id=snap.id, path=rev.path, blob_sha=rev.blob_sha))
        sub = s.exec(select(Submission).where(Submission.run_id == run_id)).one()
        sub.snapshot_id = snap.id
        s.add(sub)


def _audit_quoting_the_agent(store: Store, run_id: str) -> None:
    """An audit whose flag quotes the agent, as a check's finding and evidence do (the
    command's text, the file's path, the checkpoint's path)."""
    from datetime import UTC, datetime

    from a2rl.audit import AuditReport, Evidence, Flag, Severity, save_audit

    save_audit(store, AuditReport(
        run_id=run_id, audit_version=1, computed_at=datetime.now(UTC),
        flags=[Flag(kind="grader_gaming", severity=Severity.high,
                    finding=f"an output addressed to the judge: {HOSTILE}",
                    evidence=Evidence(paths=[f"code/{NAME}.py", f"output/{NAME}"],
                                      excerpts=[CONTENT, COMMAND], jobs=[NAME],
                                      items=[f"test:{SCRIPT}"]))]))


class _Elements(HTMLParser):
    """Every start tag with its attributes, every comment and the text of each script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.comments: list[str] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


def live_elements(html: str) -> list[str]:
    """What in `html` would run or load: on* handlers, javascript: URLs, scripts or comments
    that carry the agent's text."""
    found = _Elements()
    found.feed(html)
    live = []
    for tag, attrs in found.tags:
        for name, value in attrs:
            if name.lower().startswith("on"):
                live.append(f"<{tag} {name}=...>")
            if name.lower() in ("href", "src", "action") and \
                    (value or "").strip().lower().startswith("javascript:"):
                live.append(f"<{tag} {name}={value}>")
    live += [f"<script>{s[:60]}" for s in found.scripts if "alert(" in s]
    live += [f"<!--{c}-->" for c in found.comments if "hidden" in c]
    return live


def _text(html: str) -> str:
    found = _Elements()
    found.feed(html)
    return "".join(found.text)


def test_the_record_holds_the_hostile_text(hostile: tuple[Settings, Store, str, Report]) -> None:
    """Else the other tests prove nothing."""
    report = hostile[3]
    assert any(SCRIPT in j.command for j in report.timeline.jobs)
    assert any(NAME in x.path for x in report.timeline.submissions)
    assert any(NAME in c.path and "```" in c.diff for cv in report.code_history
               for c in cv.changes)
    assert any(SCRIPT in e.text for f in report.failures for e in f.evidence)
    assert report.audit is not None and HOSTILE in report.audit.flags[0].finding
    markdown = render(report, "md")
    assert "onerror" in markdown and "javascript:" in markdown


def test_markdown_rendered_by_commonmark_has_no_live_element(
        hostile: tuple[Settings, Store, str, Report]) -> None:
    from markdown_it import MarkdownIt

    markdown = render(hostile[3], "md")
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    # As permissive as a renderer may be: markdown-it drops javascript: links itself, others
    # do not, so the report must not make one in the first place.
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    html = md.render(markdown)
    assert live_elements(html) == []
    stray = {tag for tag, _ in _Elements_of(html).tags} - REPORT_TAGS
    assert stray == set(), f"raw HTML from the agent's text: {stray}"
    assert "<a " not in html, "a link made of the agent's text"
    # Shown, not dropped: the text reads as the agent wrote it, and each code span holds a
    # whole name (a backtick in it no longer closes the span).
    shown = _text(html)
    assert SCRIPT in shown and IMG in shown and LINK in shown
    assert f"an output addressed to the judge: {HOSTILE}" in shown  # the audit's finding
    codes = _code_texts(html)
    assert f"output/{NAME}" in codes and f"code/{NAME}.py" in codes
    assert any(COMMAND[:80] == c for c in codes)
    # The diff is one fenced block: the ``` lines in the file did not close it.
    assert html.count("<pre>") == 1 and CONTENT.splitlines()[1] in html


def test_html_report_shows_the_text_and_runs_none(
        hostile: tuple[Settings, Store, str, Report]) -> None:
    html = render(hostile[3], "html")
    assert live_elements(html) == []
    for raw in (SCRIPT, IMG, COMMENT, NAME):
        assert raw not in html
    assert SCRIPT in _text(html) and IMG in _text(html)
    assert f"an output addressed to the judge: {HOSTILE}" in _text(html)


def test_viewer_pages_show_the_text_and_run_none(
        hostile: tuple[Settings, Store, str, Report]) -> None:
    from sqlmodel import select
    from starlette.testclient import TestClient

    from a2rl.analysis.web import create_app
    from a2rl.store import Job, Revision, ToolCall

    settings, store, run_id, _ = hostile
    with store.session() as s:
        jobs = s.exec(select(Job.id).where(Job.run_id == run_id)).all()
        call_ids = s.exec(select(ToolCall.id).where(ToolCall.run_id == run_id)).all()
        revisions = s.exec(select(Revision.id).where(Revision.run_id == run_id)).all()
    pages = [f"/run/{run_id}", f"/run/{run_id}/report", f"/run/{run_id}/activity",
             f"/run/{run_id}/jobs", f"/run/{run_id}/revisions", f"/run/{run_id}/conversation",
             "/"]
    pages += [f"/run/{run_id}/job/{j}" for j in jobs]
    pages += [f"/run/{run_id}/call/{c}" for c in call_ids]
    pages += [f"/run/{run_id}/revision/{r}" for r in revisions]
    shown = ""
    with TestClient(create_app(settings.database_url)) as client:
        for page in pages:
            resp = client.get(page)
            assert resp.status_code == 200, (page, resp.status_code)
            for where, html in _html_of(page, resp):
                assert live_elements(html) == [], where
                for raw in (SCRIPT, IMG, COMMENT):
                    assert raw not in html, where
                shown += _text(html)
    assert SCRIPT in shown and IMG in shown and NAME in shown


def _html_of(page: str, resp: Any) -> list[tuple[str, str]]:
    """The HTML a page puts in the browser: the page itself, or the fragments of a JSON
    answer that viewer.js inserts as HTML (its other fields it sets as text)."""
    if not resp.headers.get("content-type", "").startswith("application/json"):
        return [(page, resp.text)]
    doc = resp.json()
    inserted = [key for key in ("top", "bottom", "calls_html", "jobs_html") if key in doc]
    assert inserted, f"{page}: a JSON answer with no HTML fragment"
    return [(f"{page} {key}", doc[key]) for key in inserted]


def _Elements_of(html: str) -> _Elements:  # noqa: N802
    found = _Elements()
    found.feed(html)
    return found


def _code_texts(html: str) -> list[str]:
    """The text of each <code> element."""
    class Codes(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.depth, self.out = 0, []  # type: ignore[var-annotated]

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "code":
                self.depth += 1
                self.out.append("")

        def handle_endtag(self, tag: str) -> None:
            if tag == "code":
                self.depth -= 1

        def handle_data(self, data: str) -> None:
            if self.depth:
                self.out[-1] += data

    parser = Codes()
    parser.feed(html)
    return parser.out
