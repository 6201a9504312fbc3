"""How a run ended, and which runs are results: the end kind stored and derived for old rows,
shown by `runs`, `show`, the report and the viewer; `compare` and fleet summaries counting
only results (the others apart, with why), marking the runs the audit flagged and leaving
them out with --exclude-flagged; no final score without a final submission.

Rows are written into a real SQLite store as the server writes them; the audits are saved
with the audit package's own `save_audit`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from a2rl.analysis import build_report, compare, render
from a2rl.analysis.compare import tally, tally_line
from a2rl.analysis.web import create_app
from a2rl.audit import AuditReport, Evidence, Flag, Severity, save_audit
from a2rl.server.run.clock import RunClock
from a2rl.store import EndKind, Evaluation, EvaluationKind, Run, Store, Submission
from a2rl.store.outcome import derive_end_kind, end_kind, is_result, shown_final

from .test_cli_user import cli, one_line_error

T0 = datetime(2026, 12, 2, 13, 5, tzinfo=UTC)


def _run(id: str, **fields: object) -> Run:
    """A finished arith run of the reference agent, as the server leaves one."""
    row: dict[str, object] = dict(
        id=id, task_id="arith", agent="reference", workspace=f"/w/{id}", budget_s=600,
        status="finished", created_at=T0, started_at=T0, deadline=T0 + timedelta(minutes=10),
        ended_at=T0 + timedelta(minutes=4), baseline_dev=0.1, baseline_test=0.2,
        final_score=0.2, fleet_id="toy")
    row.update(fields)
    return Run(**row)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "kind"), [
    ({"end_reason": "agent finished", "agent_status": "finished"}, EndKind.agent_finished),
    ({"end_reason": "budget exhausted", "agent_status": "budget"}, EndKind.budget_exhausted),
    ({"end_reason": "agent crashed (exit 3)", "agent_status": "crashed"},
     EndKind.agent_crashed),
    ({"end_reason": "interrupted", "agent_status": "interrupted"}, EndKind.interrupted),
    ({"end_reason": "interrupted (SIGTERM)"}, EndKind.interrupted),
    # a fleet's run whose node was lost: a2rl's failure, whatever the agent did
    ({"end_reason": "node lost: ActorDiedError", "status": "failed"}, EndKind.infrastructure),
    # `a2rl finish` of a run made with `a2rl create`: before the deadline, or past it
    ({"end_reason": "finished by a2rl finish"}, EndKind.agent_finished),
    ({"end_reason": "finished by a2rl finish", "ended_at": T0 + timedelta(minutes=11)},
     EndKind.budget_exhausted),
    ({"status": "running", "ended_at": None}, None),
])
def test_end_kind_of_rows_made_before_it_was_stored(fields: dict[str, object],
                                                    kind: EndKind | None) -> None:
    run = _run("r", **fields)
    assert run.end_kind is None and end_kind(run) == derive_end_kind(run) == kind
    assert is_result(run) == (kind in (EndKind.agent_finished, EndKind.budget_exhausted))


def test_close_stores_the_end_kind_and_a_stored_kind_wins(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        s.add(_run("r-crash", status="running", ended_at=None, agent_status="crashed"))
        s.add(_run("r-given", status="running", ended_at=None))
    RunClock(store, "r-crash").close("agent crashed (exit 1)")
    RunClock(store, "r-given").close("owner process gone", end_kind=EndKind.infrastructure)
    with store.session() as s:
        crash, given = s.get(Run, "r-crash"), s.get(Run, "r-given")
    assert crash is not None and given is not None
    assert crash.end_kind == "agent_crashed" and given.end_kind == "infrastructure"
    # closed past its deadline: its row alone would read as the budget's end
    assert not is_result(given) and derive_end_kind(given) == EndKind.budget_exhausted
    store.close()


def test_no_final_submission_no_final_score() -> None:
    assert shown_final(_run("r", final_score=0.7, final_submission_id="s-1"), 1) == (0.7, None)
    assert shown_final(_run("r"), 0) == (None, "no submission")
    assert shown_final(_run("r"), 2) == (None, "no graded submission")
    assert shown_final(_run("r", status="running", final_score=None), 0) == (
        None, "not finalized")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Path, Store]]:
    """Seven runs of one fleet: two results (one with a submission, one that ran out of budget
    without one), three interrupted, one crashed, one lost with its node."""
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    with store.session() as s:
        s.add(_run("r-ok", end_reason="agent finished", agent_status="finished",
                   final_score=0.6, final_submission_id="s-1"))
        s.add(Submission(id="s-1", run_id="r-ok", path="output/a", status="graded",
                         created_at=T0 + timedelta(minutes=2)))
        s.add(Evaluation(run_id="r-ok", submission_id="s-1", kind=EvaluationKind.submission,
                         split="test", score=0.6, status="done", n_items=10,
                         items=[{"id": f"q{i}", "correct": i < 6} for i in range(10)]))
        s.add(Evaluation(kind=EvaluationKind.baseline, split="test", score=0.2, status="done",
                         n_items=10, items=[{"id": f"q{i}", "correct": i < 2}
                                            for i in range(10)]))
        s.add(_run("r-budget", end_reason="budget exhausted", agent_status="budget",
                   ended_at=T0 + timedelta(minutes=10)))
        for i in range(3):
            s.add(_run(f"r-int{i}", end_reason="interrupted", agent_status="interrupted"))
        s.add(_run("r-crash", end_reason="agent crashed (exit 1)", agent_status="crashed"))
        s.add(_run("r-lost", status="failed", end_reason="node lost: ActorDiedError",
                   final_score=None))
    yield tmp_path, store
    store.close()


def test_compare_counts_results_only_and_lists_the_others_apart(
        fleet: tuple[Path, Store]) -> None:
    home, store = fleet
    doc = json.loads(cli(home, "compare", "--json").stdout)
    (group,) = doc["groups"]
    assert group["runs"] == 2 and group["without_final"] == 1
    assert group["not_counted"] == {"interrupted": 3, "agent crashed": 1,
                                    "infrastructure failure": 1}
    assert group["final_mean"] == pytest.approx(0.6)  # r-budget has no final score
    assert group["improvement_mean"] == pytest.approx(0.4)
    rows = {r["run_id"]: r for r in doc["rows"]}
    assert len(rows) == 7 and {k for k, r in rows.items() if r["counted"]} == {"r-ok",
                                                                              "r-budget"}
    assert rows["r-budget"]["final"] is None and rows["r-budget"]["improvement"] is None
    assert rows["r-budget"]["final_note"] == "no submission"
    assert rows["r-crash"]["end_kind"] == "agent_crashed"
    assert rows["r-crash"]["not_counted"] == "agent crashed"
    text = cli(home, "compare").stdout
    assert "arith reference –: not counted: 3 interrupted, 1 agent crashed, " \
           "1 infrastructure failure" in text, text
    assert "counted: results only" in text and "--include-unfinished" in text
    assert re.search(r"^ 1\. reference .*n=2 .*1 without a final score", text, re.M), text
    apart = text[text.index("not counted (5):"):]
    assert re.search(r"^r-int0 .*\(interrupted\)$", apart, re.M), text
    assert not re.search(r"^r-int0 ", text[:text.index("not counted (5):")], re.M)
    every = json.loads(cli(home, "compare", "--include-unfinished", "--json").stdout)
    assert every["include_unfinished"] and every["groups"][0]["runs"] == 7
    assert every["groups"][0]["not_counted"] == {}


def test_compare_takes_run_ids_and_says_when_nothing_matches(
        fleet: tuple[Path, Store]) -> None:
    home, _ = fleet
    doc = json.loads(cli(home, "compare", "r-ok", "r-int0", "--json").stdout)
    assert sorted(r["run_id"] for r in doc["rows"]) == ["r-int0", "r-ok"]
    assert doc["groups"][0]["runs"] == 1 and doc["groups"][0]["not_counted"] == {
        "interrupted": 1}
    assert sorted(r["run_id"] for r in json.loads(cli(
        home, "compare", "r-ok", "r-int0", "--task", "arith", "--json").stdout)["rows"]) == [
        "r-int0", "r-ok"]
    one_line_error(cli(home, "compare", "r-ok", "r-nope"), "'r-nope'", "a2rl runs")
    one_line_error(cli(home, "compare", "--task", "nope"), "no runs match")
    one_line_error(cli(home, "compare", "r-ok", "--task", "gsm8k", "--json"), "no runs match")
    one_line_error(cli(home, "compare", "--agent", "nobody", "--csv"), "no runs match")


def test_runs_and_show_say_how_it_ended_and_show_no_final_without_a_submission(
        fleet: tuple[Path, Store]) -> None:
    home, _ = fleet
    out = cli(home, "runs", "--limit", "0").stdout.splitlines()
    assert out[0].split()[:5] == ["RUN", "TASK", "AGENT", "STATUS", "END"], out
    line = {x.split()[0]: x for x in out[1:]}
    assert re.search(r"finished\s+budget exhausted .* 0\.200\s+-$", line["r-budget"]), line
    assert re.search(r"finished\s+agent finished .* 0\.200\s+0\.600$", line["r-ok"]), line
    assert re.search(r"failed\s+infrastructure ", line["r-lost"]), line
    rows = {r["id"]: r for r in json.loads(cli(home, "runs", "--json").stdout)}
    assert rows["r-budget"]["final_score"] is None
    assert rows["r-budget"]["final_note"] == "no submission"
    assert rows["r-int0"]["end_kind"] == "interrupted" and rows["r-int0"]["result"] is False
    assert rows["r-ok"]["final_score"] == 0.6 and rows["r-ok"]["result"] is True
    shown = cli(home, "show", "r-budget").stdout
    assert re.search(r"final \(test\)\s+- \(no submission\)$", shown, re.M), shown
    assert re.search(r"end\s+budget exhausted$", shown, re.M), shown
    assert re.search(r"audit\s+not audited$", shown, re.M), shown
    shown = cli(home, "show", "r-int1").stdout
    assert re.search(r"end\s+interrupted; not counted as a result by compare$", shown, re.M)


def _flag(store: Store, run_id: str) -> None:
    save_audit(store, AuditReport(
        run_id=run_id, audit_version=1, computed_at=T0 + timedelta(hours=1),
        flags=[Flag(kind="contamination", severity=Severity.high,
                    finding="12 hidden test answers copied into data/train.jsonl",
                    evidence=Evidence(items=["test:q1"], paths=["data/train.jsonl"])),
               Flag(kind="dev_overfitting", severity=Severity.low, finding="9 submissions")],
        checks={"contamination": {"items": 10}}))


@pytest.mark.cheats("stores a made-up audit with a high flag")
def test_flagged_runs_are_marked_and_left_out_on_request(fleet: tuple[Path, Store]) -> None:
    home, store = fleet
    _flag(store, "r-ok")
    save_audit(store, AuditReport(run_id="r-budget", audit_version=1, computed_at=T0,
                                  flags=[], checks={"contamination": {"items": 10}}))
    shown = cli(home, "show", "r-ok").stdout
    assert re.search(r"audit\s+FLAGGED: 1 high-severity flags \(a2rl audit r-ok\)$", shown,
                     re.M), shown
    assert re.search(r"audit\s+no high-severity flag \(0 flags\)$",
                     cli(home, "show", "r-budget").stdout, re.M)
    doc = json.loads(cli(home, "show", "r-ok", "--json").stdout)
    assert doc["audit"] == {"flagged": True, "high": 1, "flags": 2}
    marked = json.loads(cli(home, "compare", "--json").stdout)
    assert {r["run_id"] for r in marked["rows"] if r["flagged"]} == {"r-ok"}
    assert marked["groups"][0]["runs"] == 2 and marked["groups"][0]["flagged"] == 1
    text = cli(home, "compare").stdout
    assert re.search(r"^r-ok!\s+arith", text, re.M) and "!: the audit flagged the run" in text
    left = json.loads(cli(home, "compare", "--exclude-flagged", "--json").stdout)
    (group,) = left["groups"]
    assert group["runs"] == 1 and group["not_counted"]["flagged by the audit"] == 1
    assert group["final_mean"] is None and group["improvement_mean"] is None  # r-budget's
    assert "runs the audit flagged are left out" in cli(home, "compare",
                                                        "--exclude-flagged").stdout


@pytest.mark.cheats("stores a made-up audit with a high flag")
def test_fleet_summary_counts_results_and_flags(fleet: tuple[Path, Store]) -> None:
    _, store = fleet
    _flag(store, "r-ok")
    t = tally(store, "toy")
    assert t.results == 2 and t.flagged == ["r-ok"] and t.end_kinds["r-lost"] == "infrastructure"
    assert tally_line(t) == ("2 results (1 flagged by the audit: a2rl audit RUN); not counted: "
                             "3 interrupted, 1 agent crashed, 1 infrastructure failure")
    assert tally(store, "other").results == 0


def test_report_and_viewer_show_the_end(fleet: tuple[Path, Store]) -> None:
    home, store = fleet
    rep = build_report(store, "r-crash")
    assert rep.summary.end_kind == "agent_crashed" and rep.summary.result is False
    md = render(rep, "md")
    assert "| status | finished (agent crashed: agent crashed (exit 1)); not counted as a " \
           "result |" in md, md
    budget = build_report(store, "r-budget").summary
    assert budget.final_test is None and budget.improvement is None
    assert "no submission" in render(build_report(store, "r-budget"), "html")
    c = compare(store, run_ids=["r-budget"])
    assert c.rows[0].final is None and c.rows[0].counted
    url = f"sqlite:///{home / 'a2rl.db'}"
    client = TestClient(create_app(url))
    page = client.get("/").text
    assert re.search(r'r-int0</a>.*?interrupted, not counted</span>', page, re.S), page
    run_page = client.get("/run/r-budget").text
    assert "budget exhausted</span>" in run_page and "(no submission)" in run_page
    assert "not counted as a result" in client.get("/run/r-lost").text
