"""The paper's and its harness's published figures beside a run's measured ones
(`a2rl.tasks.published`, `a2rl.analysis.published`): declared per task, matched by profile and
base model, carried by the report (JSON, Markdown, HTML) and by `a2rl compare`."""

from __future__ import annotations

import html as html_lib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest

from a2rl.analysis import SCHEMA_PATH, build_report, compare, render, render_csv, render_json
from a2rl.analysis import render_text as compare_text
from a2rl.analysis.published import beside, published_line
from a2rl.analysis.schema import SCHEMA_VERSION, PublishedBeside
from a2rl.store import Evaluation, Run, Store, Submission
from a2rl.tasks import get_task
from a2rl.tasks.published import published_figures

QWEN = "Qwen/Qwen2.5-1.5B"
LINE = "baseline 0.2161 published (harness README, Qwen2.5-1.5B) vs 0.2050 measured: -1.1 points"


def test_each_paper_task_declares_its_figures_on_its_paper_spec() -> None:
    """The figures live on the tasks' `paper` specs, none on the a2rl ones; the values are the
    sources' percentages on our fraction scale."""
    got = {t: [(f.kind, f.as_published, f.value, f.base_model)
               for f in get_task(t, "paper").spec.published]
           for t in ("gsm8k", "alfworld", "deepsearchqa")}
    assert got == {
        "gsm8k": [("baseline", "21.61", 0.2161, QWEN), ("final", "22.37", 0.2237, QWEN),
                  ("final", "23.12", 0.2312, QWEN)],
        "alfworld": [("baseline", "5.97", 0.0597, QWEN + "-Instruct"),
                     ("baseline", "4.85", 0.0485, QWEN + "-Instruct"),
                     ("final", "93.28", 0.9328, QWEN + "-Instruct")],
        "deepsearchqa": [("improvement", "+2.75", 0.0275, QWEN)]}
    for t in got:
        assert get_task(t).spec.published == ()
        for f in get_task(t, "paper").spec.published:
            assert float(f.as_published) == pytest.approx(100 * f.value)
            assert f.source and f.checked and f.metric and f.label
    # what cannot be read in a file says so
    assert all(f.checked.startswith("from the paper's text, not checked against a file")
               for t in ("alfworld", "deepsearchqa") for f in get_task(t, "paper").spec.published)


def test_figures_match_the_paper_profile_and_the_base_model_only() -> None:
    assert [f.as_published for f in published_figures("gsm8k", "paper", QWEN)] == [
        "21.61", "22.37", "23.12"]
    assert published_figures("gsm8k", "a2rl", QWEN) == ()
    assert published_figures("gsm8k", "paper", "Qwen/Qwen2.5-0.5B") == ()
    assert published_figures("gsm8k", "paper", "qwen/qwen2.5-1.5b") == ()  # ids are exact
    assert published_figures("gsm8k", "paper", None) == ()
    assert published_figures("alfworld", "paper", QWEN) == ()  # its figures: the Instruct
    assert published_figures("arith", "paper", "tiny-llama") == ()  # a toy: none
    assert published_figures("no-such-task", "paper", QWEN) == ()
    assert published_figures("gsm8k", "bogus", QWEN) == ()


def test_beside_sets_finals_beside_paper_protocol_runs_only() -> None:
    figs = published_figures("gsm8k", "paper", QWEN)
    held = beside(figs, "heldout", 0.205, 0.25, 0.045)
    assert [(p.kind, p.measured) for p in held] == [("baseline", 0.205)]
    assert held[0].difference_points == pytest.approx(-1.11)
    assert published_line(held[0]) == LINE
    both = beside(figs, "paper", 0.205, 0.25, 0.045)
    assert [(p.kind, p.published, p.measured) for p in both] == [
        ("baseline", 0.2161, 0.205), ("final", 0.2237, 0.25), ("final", 0.2312, 0.25)]
    assert [p.difference_points for p in both[1:]] == [pytest.approx(2.63), pytest.approx(1.88)]
    none = beside(figs, "paper", None, None, None)
    assert [p.difference_points for p in none] == [None] * 3
    assert published_line(none[0]).endswith("vs – measured")
    dsqa = beside(published_figures("deepsearchqa", "paper", QWEN), "paper", 0.1, 0.115, 0.015)
    assert published_line(dsqa[0]) == ("improvement +0.0275 published (paper v1, "
                                        "Qwen2.5-1.5B) vs +0.0150 measured: -1.2 points")


def _store(tmp_path: Path, runs: list[tuple[str, str, str, str]]) -> Store:
    """Finished gsm8k runs, each (id, profile, protocol, base model): baseline 41 of 200 test
    items (0.2050), final 44 (0.2200), written by hand."""
    store = Store(f"sqlite:///{tmp_path / 'published.db'}")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    base = [{"id": f"t{i}", "correct": i < 41} for i in range(200)]
    final = [{"id": f"t{i}", "correct": i < 44} for i in range(200)]
    with store.session() as s:
        for run_id, profile, protocol, model in runs:
            s.add(Run(id=run_id, task_id="gsm8k", workspace=str(tmp_path), budget_s=600,
                      started_at=t0, ended_at=t0 + timedelta(minutes=9),
                      deadline=t0 + timedelta(minutes=10), status="finished",
                      end_reason="agent finished", profile=profile, protocol=protocol,
                      base_model=model, baseline_dev=0.205, baseline_test=0.205,
                      final_score=0.22, final_submission_id=f"{run_id}-s1"))
            s.add(Submission(id=f"{run_id}-s1", run_id=run_id, path="output/a",
                             status="graded", created_at=t0 + timedelta(minutes=1)))
            s.add(Evaluation(run_id=run_id, kind="baseline", split="test", score=0.205,
                             n_items=200, items=base))
            s.add(Evaluation(run_id=run_id, submission_id=f"{run_id}-s1", kind="submission",
                             split="test", score=0.22, n_items=200, items=final))
    return store


RUNS = [("paper1", "paper", "heldout", QWEN), ("paper2", "paper", "paper", QWEN),
        ("ours", "a2rl", "heldout", QWEN), ("other", "paper", "heldout", "Qwen/Qwen2.5-0.5B")]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = _store(tmp_path, RUNS)
    yield s
    s.close()


def test_report_carries_the_published_baseline_of_a_paper_run(store: Store) -> None:
    rep = build_report(store, "paper1")
    assert rep.schema_version == SCHEMA_VERSION
    assert [(p.kind, p.published, p.measured) for p in rep.summary.published] == [
        ("baseline", 0.2161, 0.205)]
    doc = json.loads(render(rep, "json"))
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    (pub,) = doc["summary"]["published"]
    assert pub["as_published"] == "21.61" and pub["difference_points"] == pytest.approx(-1.11)
    assert "471eb30d" in pub["source"] and "Qwen/Qwen2.5-0.5B" in pub["note"]
    for fmt in ("md", "html"):
        assert LINE in render(rep, fmt)
    # under the paper protocol, the finals too (the improvement's figure is DeepSearchQA's)
    rep2 = build_report(store, "paper2")
    assert [(p.kind, p.measured) for p in rep2.summary.published] == [
        ("baseline", 0.205), ("final", 0.22), ("final", 0.22)]
    assert ("final 0.2312 published (harness README, rdagent row, Qwen2.5-1.5B) vs 0.2200 "
            "measured: -1.1 points") in render(rep2, "md")


@pytest.mark.parametrize("run_id", ["ours", "other"])
def test_no_published_figure_for_an_a2rl_run_or_another_base_model(store: Store,
                                                                   run_id: str) -> None:
    rep = build_report(store, run_id)
    assert rep.summary.published == []
    assert json.loads(render(rep, "json"))["summary"]["published"] == []
    for fmt in ("md", "html"):
        assert "published" not in render(rep, fmt)


def test_compare_prints_and_carries_the_published_figures(store: Store) -> None:
    c = compare(store)
    by = {r.run_id: r for r in c.rows}
    assert [p.kind for p in by["paper1"].published] == ["baseline"]
    assert [p.kind for p in by["paper2"].published] == ["baseline", "final", "final"]
    assert by["ours"].published == [] and by["other"].published == []
    text = compare_text(c)
    assert f"paper1         {LINE}" in text and f"paper2         {LINE}" in text
    assert not re.search(r"^ +(ours|other) ", text, re.M)
    # each source once, with how it was checked and its caveat
    assert text.count("harness README: microsoft/RD-Agent") == 1
    assert "checked against the file" in text
    doc = json.loads(render_json(c))
    rows = {r["run_id"]: r for r in doc["rows"]}
    assert rows["paper1"]["published"][0]["published"] == 0.2161
    assert rows["ours"]["published"] == []
    assert "published" not in render_csv(c).splitlines()[0]
    # a comparison of the a2rl run alone prints no such section
    assert "published" not in compare_text(compare(store, run_ids=["ours", "other"]))


def test_markdown_and_html_escape_the_published_text(store: Store) -> None:
    """The figure's text goes through the renderers' escaping like any other summary cell."""
    from markdown_it import MarkdownIt

    rep = build_report(store, "paper1")
    hostile = "<script>alert(1)</script> | *x* [l](javascript:alert(1))"
    rep.summary.published = [PublishedBeside(
        kind="baseline", published=0.5, as_published="50", measured=0.5,
        difference_points=0.0, base_model=QWEN, metric="m", label=hostile, source=hostile,
        checked=hostile, note=hostile)]
    page = render(rep, "html")
    assert "<script>alert(1)</script>" not in page
    assert html_lib.escape("<script>alert(1)</script>", quote=False) in page
    md = render(rep, "md")
    shown = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<script>" not in shown and 'href="javascript' not in shown
    row = re.search(r"<td>published baseline</td>\n<td>(.*?)</td>", shown, re.S)
    assert row is not None, shown  # one cell: the pipe did not split the table's row
    assert html_lib.unescape(row.group(1)).startswith(
        f"baseline 0.5000 published ({hostile}, Qwen2.5-1.5B) vs 0.5000 measured")
