"""The stored audit in every report format and in the viewer, and the viewer's issue-26 items
(curves against the step, compare on one axes, the live clock, the timeline on its axis), over
HTTP and on the plots themselves. The browser's share is in tests/test_view.py.

Runs are real rows in a real SQLite store (the viewer bench's synthetic run, as
tests/test_view_parts.py uses it); the audits are saved with `a2rl.audit.save_audit`, as the
audit does when a run finishes.
"""

from __future__ import annotations

import html as html_lib
import importlib.util
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
from sqlmodel import col, select
from starlette.testclient import TestClient

from a2rl.analysis import build_report
from a2rl.analysis.plots import PAD_L, PAD_R, W, curves, timeline_plot
from a2rl.analysis.render_html import render_html
from a2rl.analysis.render_md import render_markdown
from a2rl.analysis.schema import SCHEMA_PATH, Span, Timeline
from a2rl.analysis.web import create_app
from a2rl.audit import AuditReport, Evidence, Flag, Severity, save_audit
from a2rl.store import Evaluation, Job, Revision, Run, Store, ToolCall

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<script>alert(1)</script> [x](javascript:alert(1)) `tick` a | b"


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("view_scale", ROOT / "bench" / "view_scale.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _store(tmp_path: Path, *ids: str, calls: int = 40) -> tuple[str, Store]:
    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    for rid in ids:
        _bench().build_synthetic(store, calls=calls, jobs=4, subs=3,  # type: ignore[attr-defined]
                                 run_id=rid)
    return url, store


def _audit(run_id: str, *flags: Flag) -> AuditReport:
    return AuditReport(run_id=run_id, audit_version=1, computed_at=datetime.now(UTC),
                       flags=list(flags), checks={"contamination": {"n": 13, "items": 500},
                                                  "grader_gaming": {"outputs": 3}})


def _record_ids(store: Store, run_id: str) -> dict[str, list[int]]:
    """Real row ids of the run: a call on the conversation's first page and one past it, a
    revision, a submission's evaluation."""
    with store.session() as s:
        calls = list(s.exec(select(ToolCall.id).where(ToolCall.run_id == run_id)
                            .order_by(col(ToolCall.id))).all())
        revs = list(s.exec(select(Revision.id).where(Revision.run_id == run_id)).all())
        evs = list(s.exec(select(Evaluation.id).where(Evaluation.run_id == run_id,
                                                      Evaluation.kind == "submission")).all())
    return {"calls": calls, "revisions": revs, "evaluations": evs}  # type: ignore[dict-item]


@pytest.mark.cheats("stores a made-up audit with hostile text")
def test_every_report_format_shows_the_audit(tmp_path: Path) -> None:
    url, store = _store(tmp_path, "a")
    committed = json.loads(SCHEMA_PATH.read_text())
    # Never audited: said so in every format.
    rep = build_report(store, "a")
    jsonschema.validate(json.loads(rep.model_dump_json()), committed)
    assert rep.audit is not None and rep.audit.status == "not_audited"
    assert "## Audit\n\nNot audited" in render_markdown(rep)
    assert "Not audited: no audit is stored" in render_html(rep)
    # Audited, no flag.
    save_audit(store, _audit("a"))
    rep = build_report(store, "a")
    assert rep.audit is not None and rep.audit.status == "clean"
    assert "Clean: audit v1 (2 checks) raised no flag." in render_markdown(rep)
    # Flags: worst first, counted by severity, the agent's text kept as text.
    ids = _record_ids(store, "a")
    save_audit(store, _audit(
        "a",
        Flag(kind="grader_gaming", severity=Severity.medium, finding=f"constant outputs {HOSTILE}",
             evidence=Evidence(jobs=["a-j1"], tool_calls=ids["calls"][:2])),
        Flag(kind="contamination", severity=Severity.high,
             finding="exact copies of 3 hidden test answers",
             evidence=Evidence(revisions=ids["revisions"][:1], submissions=["a-s1"],
                               evaluations=ids["evaluations"][:1], items=["test:7"],
                               paths=["data/train|x.jsonl"], excerpts=[HOSTILE]))))
    rep = build_report(store, "a")
    doc = json.loads(rep.model_dump_json())
    jsonschema.validate(doc, committed)
    assert doc["schema_version"] == "1.8" == committed["$id"].rsplit("/", 1)[1]
    a = doc["audit"]
    assert a["status"] == "flagged" and a["by_severity"] == {"high": 1, "medium": 1}
    assert [f["severity"] for f in a["flags"]] == ["high", "medium"]
    assert a["flags"][0]["evidence"]["items"] == ["test:7"] and a["audit_version"] == 1
    assert a["checks"]["contamination"] == {"n": 13, "items": 500}

    md = render_markdown(rep)
    section = md[md.index("## Audit\n"):md.index("## Cost ledger")]
    assert "2 flags (1 high, 1 medium) from audit v1 (2 checks): a high flag stands" in section
    assert section.index("contamination") < section.index("grader\\_gaming")
    from markdown_it import MarkdownIt

    shown = MarkdownIt("commonmark", {"html": True}).enable("table").render(section)
    assert "<script" not in shown and "<a " not in shown, shown
    cells = re.findall(r"<td>(.*?)</td>", shown, re.S)
    assert len(cells) == 8, shown  # two flags, four cells each: no `|` split a row
    assert html_lib.unescape(cells[6]) == f"constant outputs {HOSTILE}"
    assert f"<code>{html_lib.escape(HOSTILE, quote=False)}</code>" in cells[3]
    assert "<code>data/train|x.jsonl</code>" in cells[3] and "items test:7" in cells[3]

    page = render_html(rep)
    box = page[page.index('<section id="audit"'):]
    box = box[:box.index("</section>")]
    assert "<script>alert" not in box and html_lib.escape(HOSTILE) in box
    assert box.index('class="flag sev-high"') < box.index('class="flag sev-medium"')
    # The standalone page lists no calls, jobs or revisions: only submissions link.
    assert 'href="#call-' not in box and 'href="#rev-' not in box
    assert 'href="#sub-a-s1"' in box and 'id="sub-a-s1"' in page
    store.close()


@pytest.mark.cheats("stores a made-up audit with a high flag")
def test_the_run_page_links_each_flags_evidence_to_the_record(tmp_path: Path) -> None:
    url, store = _store(tmp_path, "a", calls=400)  # two conversation pages
    ids = _record_ids(store, "a")
    first, late = ids["calls"][0], ids["calls"][-1]
    rev, ev = ids["revisions"][0], ids["evaluations"][0]
    save_audit(store, _audit("a", Flag(
        kind="reaching_out", severity=Severity.high, finding="read the store's database",
        evidence=Evidence(tool_calls=[first, late], revisions=[rev], jobs=["a-j2"],
                          submissions=["a-s0"], evaluations=[ev], paths=["/etc/a2rl.db"]))))
    store.close()
    c = TestClient(create_app(url))
    page = c.get("/run/a").text
    box = page[page.index('<section id="audit"'):]
    box = box[:box.index("</section>")]
    assert "1 flag (1 high)" in box and "read the store&#39;s database" in box
    links = re.findall(r'<a class="ev-\w+" href="#([^"]+)"(?: data-\w+="([^"]+)")?>', box)
    assert [h for h, _ in links] == [f"call-{first}", f"call-{late}", f"rev-{rev}",
                                     "job-a-j2", "sub-a-s0", f"eval-{ev}"], links
    for anchor, own_page in links:
        if f'id="{anchor}"' not in page:  # not loaded with the page: its own page opens
            assert anchor == f"call-{late}" and own_page == f"/run/a/call/{late}"
        if own_page:
            assert c.get(own_page).status_code == 200, own_page
    assert f'id="call-{first}"' in page and f'<tr id="eval-{ev}">' in page
    assert 'href="#audit"' in page  # the nav names the section


@pytest.mark.cheats("stores made-up audits with high flags")
def test_the_runs_page_has_an_audit_column_and_filter(tmp_path: Path) -> None:
    url, store = _store(tmp_path, "hi", "med", "ok", "none")
    save_audit(store, _audit("hi", Flag(kind="model_identity", severity=Severity.high,
                                        finding="a copy of run med's weights"),
                             Flag(kind="dev_overfitting", severity=Severity.low,
                                  finding="40 submissions an hour")))
    save_audit(store, _audit("med", Flag(kind="hidden_data_reach", severity=Severity.medium,
                                         finding="named the test split's dataset id")))
    save_audit(store, _audit("ok"))
    with store.session() as s:
        for rid in ("hi", "ok"):
            row = s.get(Run, rid)
            assert row is not None
            row.fleet_id = "sweep"
            s.add(row)
    store.close()
    c = TestClient(create_app(url))

    def cells(query: str = "") -> dict[str, str]:
        page = c.get("/" + query).text
        return dict(re.findall(r'<td><a href="/run/([^"]+)">.*?<td class="audit-cell[^"]*"'
                               r'[^>]*>(?:<a[^>]*>|<span[^>]*>)([^<]+)<', page, re.S))

    assert cells() == {"hi": "2 flags (1 high)", "med": "1 flag", "ok": "clean",
                       "none": "not audited"}
    assert set(cells("?audit=flagged")) == {"hi"} == set(cells("?flagged=1"))
    assert set(cells("?audit=flags")) == {"hi", "med"}
    assert set(cells("?audit=unflagged")) == {"med", "ok", "none"}
    assert set(cells("?audit=clean")) == {"ok"}
    assert set(cells("?audit=not_audited")) == {"none"}
    assert set(cells("?audit=bogus")) == {"hi", "med", "ok", "none"}  # unknown: no filter
    assert set(cells("?fleet=sweep&audit=clean")) == {"ok"}
    page = c.get("/?fleet=sweep&audit=clean").text
    assert '<option value="clean" selected>' in page and "(of 2: audited, no flag)" in page
    assert '<input type="hidden" name="fleet" value="sweep">' in page  # the filter keeps it
    empty = c.get("/?fleet=sweep&audit=not_audited").text
    assert "No run matches the audit filter" in empty and 'id="audit-filter"' in empty
    assert c.get("/").text.count('class="audit-cell') == 4
    assert 'href="/run/hi#audit"' in c.get("/").text


def _points(svg: str) -> list[tuple[float, float]]:
    pts = re.search(r'<polyline points="([^"]+)"', svg)
    assert pts, svg
    return [tuple(map(float, p.split(","))) for p in pts.group(1).split()]  # type: ignore[misc]


def test_training_curves_are_drawn_against_the_step() -> None:
    span = W - PAD_L - PAD_R
    # TRL's logged dicts with their step, at uneven steps: x is where the step is.
    trl = "".join(f"{{'loss': {v}, 'step': {s}, 'epoch': 0.1}}\n"
                  for s, v in ((10, 2.0), (20, 1.5), (40, 1.2), (80, 1.0)))
    [(_, metric, svg)] = curves([("j1", trl)])
    assert metric == "loss" and 'data-x="step"' in svg and "(step 80)" in svg
    xs = [x for x, _ in _points(svg)]
    assert xs == pytest.approx([PAD_L + span * s / 80 for s in (10, 20, 40, 80)], abs=0.11)
    plain = "step 5 loss=0.9\nStep 10/100 loss: 0.8\nglobal_step=100 loss=0.5\n"
    xs = [x for x, _ in _points(curves([("j2", plain)])[0][2])]
    assert xs == pytest.approx([PAD_L + span * s / 100 for s in (5, 10, 100)], abs=0.11)
    # Lines that name no step (or steps that go back: two runs in one log) fall back to the
    # logged point's index, and the axis says so.
    for log in ("{'loss': 2.0}\n{'loss': 1.0}\n{'loss': 0.5}\n",
                "step 50 loss=2\nstep 60 loss=1\nstep 10 loss=3\n"):
        svg = curves([("j3", log)])[0][2]
        assert 'data-x="logged point"' in svg and "(logged point 3)" in svg
        assert [x for x, _ in _points(svg)] == pytest.approx(
            [PAD_L, PAD_L + span / 2, PAD_L + span], abs=0.11)


def test_the_timelines_bars_stay_on_its_axis() -> None:
    # Grading that ends after the run (its final test evaluation), a job still running at the
    # end and an idle gap: every bar within [PAD_L, W - PAD_R].
    t = Timeline(origin=None, end_s=100.0, tool_calls=[], jobs=[], submissions=[],
                 grading=[Span(start_s=90.0, end_s=400.0), Span(start_s=130.0, end_s=150.0)],
                 idle_gaps=[Span(start_s=0.0, end_s=20.0)], idle_threshold_s=10.0,
                 grading_s=330.0, idle_s=20.0)
    svg = timeline_plot(t)
    bars = re.findall(r'<rect class="(grading|idle)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"',
                      svg)
    assert len(bars) == 3
    for _, x, w in bars:
        assert float(x) >= PAD_L and float(x) + float(w) <= W - PAD_R + 0.05, (x, w)
    grading = [(float(x), float(w)) for k, x, w in bars if k == "grading"]
    assert grading[0][0] == pytest.approx(PAD_L + (W - PAD_L - PAD_R) * 0.9, abs=0.1)
    assert grading[0][0] + grading[0][1] == pytest.approx(W - PAD_R, abs=0.1)  # cut at the end


def test_compare_draws_every_run_on_one_axes(tmp_path: Path) -> None:
    url, store = _store(tmp_path, "a", "b", "c")
    store.close()
    page = TestClient(create_app(url)).get("/compare?run=a&run=b&run=c").text
    assert page.count("<svg") == 1 and 'id="compare-plot"' in page
    plot = page[page.index('<svg id="compare-plot"'):page.index("</svg>")]
    groups = re.findall(r'<g class="run" data-run="([^"]+)">(.*?)</g>', plot, re.S)
    assert [g for g, _ in groups] == ["a", "b", "c"]
    colors = set()
    for rid, g in groups:
        assert g.count('class="point"') == 3 and g.count('class="final"') == 1, rid
        assert f'class="legend" x="{PAD_L + 22}"' in g and f">{rid}</text>" in g
        colors.add(re.search(r'<polyline [^>]*stroke="([^"]+)"', g).group(1))  # type: ignore[union-attr]
    assert len(colors) == 3  # a colour per run


def test_the_live_page_shows_elapsed_remaining_and_the_deadline(tmp_path: Path) -> None:
    url, store = _store(tmp_path, "live", "fresh")
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=125)
    deadline = started + timedelta(seconds=600)
    with store.session() as s:
        row = s.get(Run, "live")
        assert row is not None
        row.status, row.ended_at, row.started_at, row.deadline = "running", None, started, \
            deadline
        row.budget_s = 600.0
        s.add(row)
        row = s.get(Run, "fresh")  # made with `a2rl create`: the clock starts at a first call
        assert row is not None
        row.status, row.ended_at, row.started_at, row.deadline = "created", None, None, None
        row.budget_s = 900.0
        s.add(row)
        for j in s.exec(select(Job).where(Job.run_id == "fresh")).all():
            s.delete(j)
    store.close()
    c = TestClient(create_app(url))
    page = c.get("/run/live").text
    clock = page[page.index('<div id="live-clock"'):page.index('<span id="live-counts"')]
    elapsed = re.search(r'class="clock" id="live-elapsed">(\d+)m(\d+)s<', clock)
    assert elapsed and 125 <= int(elapsed[1]) * 60 + int(elapsed[2]) <= 135, clock
    remaining = re.search(r'class="clock" id="live-remaining">(\d+)m(\d+)s<', clock)
    assert remaining and 465 <= int(remaining[1]) * 60 + int(remaining[2]) <= 475, clock
    assert f'class="clock" id="live-deadline">{deadline:%Y-%m-%d %H:%M:%S} UTC<' in clock
    doc = c.get("/run/live/activity").json()["clock"]
    assert doc["elapsed_s"] + doc["remaining_s"] == pytest.approx(600, abs=0.5)
    assert datetime.fromisoformat(doc["deadline"].replace("Z", "+00:00")) == deadline
    fresh = c.get("/run/fresh").text
    assert 'id="live-elapsed">not started<' in fresh and 'id="live-remaining">15m00s<' in fresh
    assert "none yet (the clock starts at the first tool call)" in fresh
