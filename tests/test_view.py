"""`a2rl view` in a real browser: Debian's Chromium driven by Playwright over real runs.

One run is made by the `llm` agent against a local fake of an OpenAI-compatible server (its
transcript stored as the orchestrator stores it): it "trains" (a script printing a loss curve
and writing a perturbed copy of the base), submits, is graded and finished, so that its page
has scores, the final test score and per-item results. The other is made by direct MCP calls
(no transcript: the conversation is the server's record) and left running for the live page,
which watches a call, a job and a graded submission arrive. Both use the real server, the
local sandbox and the toy `arith` task with its tiny model (the baseline is scored once per
test session); the module costs about a minute, most of it grading.
Screenshots of each page land in the test's temporary folder; with `A2RL_VIEW_SCREENSHOT=PATH`
the run page's screenshot is also written there (the README's, see scripts/view-screenshot.sh).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlmodel import select

from a2rl.analysis.web.browser import browser_page, chromium_path, screenshot, served
from a2rl.clients.base import AgentContext, McpEndpoint
from a2rl.clients.llm import LlmConnector
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Run, Store, Submission

from .audit_guard import expect_cheating
from .conftest import require, require_bwrap
from .fake_openai import Call, FakeOpenAI, Poll, Step, json_field, latest
from .test_grading_checks import save_perturbed

pytestmark = pytest.mark.timeout(300)

# The "training" prints a TRL-style loss curve, then writes a perturbed copy of the base as
# its checkpoint (with the helper the grading tests use), so that the submission is graded.
TRAIN = ("import sys\nfrom pathlib import Path\n\nfor step in range(8):\n"
         "    print({'loss': round(2.0 * 0.8 ** step, 4), 'learning_rate': 5e-05, "
         "'epoch': step / 8}, flush=True)\n"
         "print('saving a perturbed copy of the base: this is a test', file=sys.stderr)\n\n"
         + inspect.getsource(save_perturbed)
         + '\n\nsave_perturbed(Path("base_model"), Path(sys.argv[1]), 0.3)\n')
STEPS = [Call("list_files", {"path": "."}),
         Call("edit_file", {"path": "code/train.py", "new_text": TRAIN}),
         Call("run_command", {"command": "python code/train.py output/ckpt", "wait_s": 60}),
         Call("read_file", {"path": "no/such/file.txt"}),
         Call("edit_file", {"path": "code/train.py", "old_text": "0.8 ** step",
                            "new_text": "0.7 ** step"}),
         Call("submit_checkpoint", {"path": "output/none", "note": "a path that is not there"})]
FINAL_TEXT = "I wrote a training script, ran it and submitted its checkpoint."


def _steps() -> list[Step]:
    """The llm agent's script: STEPS, then the training job waited for, its checkpoint
    submitted and its score waited for."""
    return [*STEPS,
            Poll(Call("job_status", lambda m: {"job_id": latest(m, "job_id"), "wait_s": 30}),
                 until=lambda text: json_field(text, "state") not in (None, "running")),
            Call("submit_checkpoint", {"path": "output/ckpt", "note": "the perturbed base"}),
            Poll(Call("get_score", lambda m: {"submission_id": latest(m, "submission_id"),
                                              "wait_s": 60}),
                 until=lambda text: json_field(text, "status") not in ("queued", "grading")),
            FINAL_TEXT]


async def _llm_agent(settings: Settings, store: Store, run: Run, home: Path) -> LlmConnector:
    agent = LlmConnector()
    with FakeOpenAI(_steps()) as fake:
        ctx = AgentContext(run_id=run.id, prompt="Improve the model on task arith.",
                           home=home, endpoint=McpEndpoint(url="memory://", token="unused"),
                           model="fake-model", budget_s=run.budget_s,
                           options={"llm_base_url": fake.base_url, "llm_backoff_s": "0.01"})
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as client:
            await agent.run(client, ctx)
    assert not fake.errors, fake.errors[0]
    return agent


async def _calls(settings: Settings, store: Store, run_id: str,
                 calls: list[tuple[str, dict[str, Any]]]) -> None:
    async with Client(build_server(settings, store, run_id=run_id, transport="memory"),
                      mode="legacy") as c:
        for name, args in calls:
            await c.call_tool(name, args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, a2rl_home: Path) -> Iterator[dict[str, Any]]:
    """Two runs of `arith` with its baseline (scored once per test session, then cached):
    the llm agent's, finished, with a graded submission and the final test score; and one
    by hand, left running for the live page."""
    require_bwrap()
    tmp = tmp_path_factory.mktemp("view")
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{tmp / 'a2rl.db'}")
    store = Store(settings.database_url)
    llm = create_run(settings, store, task_id="arith", budget="30m", agent="llm").run
    agent = anyio.run(_llm_agent, settings, store, llm, tmp / "home")
    # As the orchestrator stores an in-process agent's transcript (clients/orchestrator.py).
    sha = store.put_blob("\n".join(json.dumps(m) for m in agent.transcript).encode())
    with store.session() as s:
        row = s.get(Run, llm.id)
        assert row is not None
        row.agent_transcript_sha, row.driver_model = sha, "fake-model"
        s.add(row)
    # Under the paper protocol its live submission is scored on test at once, which is then
    # its final score: finishing it grades nothing more.
    plain = create_run(settings, store, task_id="arith", budget="30m", agent="by-hand",
                       protocol="paper").run
    # The live test submits a checkpoint in this run: the llm run's, as if trained here too.
    # A copy of another run's weights, which the audit rightly flags.
    expect_cheating(tmp, plain.id)
    shutil.copytree(Path(llm.workspace) / "output" / "ckpt",
                    Path(plain.workspace) / "output" / "ckpt")
    finish_run(settings, store, llm.id)  # grades what is queued, then the final test score
    with store.session() as s:
        done = s.get(Run, llm.id)
        assert done is not None and done.final_score is not None, done
        assert done.final_submission_id is not None
    anyio.run(_calls, settings, store, plain.id, [("list_files", {"path": "."}),
                                                  ("run_command", {"command": "echo hi there"})])
    yield {"settings": settings, "store": store, "llm": llm.id, "plain": plain.id, "tmp": tmp}
    finish_run(settings, store, plain.id)
    store.close()


@pytest.fixture(scope="module")
def site(runs: dict[str, Any]) -> Iterator[str]:
    with served(runs["settings"].database_url) as base:
        yield base


@pytest.fixture(scope="module")
def browser(runs: dict[str, Any]) -> Iterator[tuple[Any, list[str]]]:
    require(chromium_path() is not None, "chromium is not installed: apt-get install chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        require(False, "playwright is not installed: pip install -e '.[dev]'")
    with browser_page() as pb:
        yield pb


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    path = screenshot(page, tmp_path / f"{name}.png")
    assert path.stat().st_size > 5_000


def test_runs_page_sorts_and_filters(runs: dict[str, Any], site: str, browser: Any,
                                     tmp_path: Path) -> None:
    page, errors = browser
    page.goto(site + "/")
    table = page.locator("#runs-table")
    assert runs["llm"] in table.inner_text() and runs["plain"] in table.inner_text()
    assert "fake-model" in table.inner_text() and "by-hand" in table.inner_text()
    page.fill("#filter", "by-hand")
    assert page.locator("#runs-table tbody tr:visible").count() == 1
    assert page.locator("#shown").inner_text() == "1 runs"
    page.fill("#filter", "")
    page.click("#runs-table th:has-text('tool calls')")
    column = page.evaluate("[...document.querySelectorAll('#runs-table thead th')]"
                           ".findIndex(th => th.textContent.trim().startsWith('tool calls')) + 1")
    assert column > 0
    counts = [int(x) for x in
              page.locator(f"#runs-table tbody td:nth-child({column})").all_inner_texts()]
    assert counts == sorted(counts) and counts[0] == 2, counts
    _shot(page, tmp_path, "runs")
    assert not errors, errors


def test_run_page_shows_the_conversation_calls_logs_and_diffs(
        runs: dict[str, Any], site: str, browser: Any, tmp_path: Path) -> None:
    page, errors = browser
    page.goto(f"{site}/run/{runs['llm']}")
    page.locator("#report-top[data-loaded]").wait_for()
    body = page.locator("body").inner_text()
    for text in ("Summary", "Score trajectory", "Timeline", "Conversation", "llm transcript",
                 "I wrote a training script", "Improve the model on task arith",
                 "submissions", "Training curves", "refused"):
        assert text in body, text
    # The failing call is marked, and opening it shows the server's error and the arguments.
    failing = page.locator("details.call.err").first
    assert "read_file" in failing.locator("summary").inner_text()
    failing.locator("summary").click()
    assert failing.locator("pre.args").is_visible()
    assert "no/such/file.txt" in failing.locator("pre.args").inner_text()
    assert failing.locator("pre.result").inner_text().strip()
    # A run_command call shows the command and its output.
    cmd = page.locator("details.call", has_text="run_command").first
    cmd.locator("summary").click()
    assert "python code/train.py" in cmd.locator("pre.args").inner_text()
    assert "loss" in cmd.locator("pre.result").inner_text()
    # The job's log (head) and the loss curve drawn from it.
    page.locator("#jobs details.log summary").first.click()
    assert "'loss': 2.0" in page.locator("#jobs details.log pre").first.inner_text()
    assert page.locator("svg.curve").count() >= 1
    # A code revision's diff loads when it is opened.
    rev = page.locator("details.revision", has_text="changed").first
    rev.locator("summary").click()
    diff = rev.locator("pre.diff")
    diff.wait_for()
    lines = diff.inner_text().splitlines()
    assert any(x.startswith("-    print({'loss': round(2.0 * 0.8 ** step") for x in lines), lines
    assert any(x.startswith("+    print({'loss': round(2.0 * 0.7 ** step") for x in lines), lines
    assert lines[0].startswith("--- a/code/train.py") and lines[2].startswith("@@")
    # The refused submission's failure links to its submission.
    link = page.locator("#failures a.evidence").first
    assert link.get_attribute("href", timeout=2000).startswith("#sub-")
    # ... and to the call it rests on, which opens in the conversation.
    with runs["store"].session() as s:
        refused = s.exec(select(Submission).where(Submission.run_id == runs["llm"],
                                                  Submission.status == "refused")).one()
    call = page.locator("#failures a.evidence-call").first
    assert call.get_attribute("href") == f"#call-{refused.tool_call_id}"
    call.click()
    opened = page.locator(f"details#call-{refused.tool_call_id}")
    assert opened.get_attribute("open") is not None
    assert "submit_checkpoint" in opened.locator("summary").inner_text()
    # Scores: the graded submission's point, the baseline and the final test score marked.
    with runs["store"].session() as s:
        run = s.get(Run, runs["llm"])
        assert run is not None and run.final_score is not None and run.final_submission_id
    plot = page.locator("#score-plot")
    assert plot.locator("circle.point").count() == 1
    assert plot.locator("line.baseline").count() == 1 and plot.locator("line.final").count() == 1
    assert plot.locator("text.final-label").text_content() == f"final test {run.final_score:.3f}"
    # The graded submission against the base model, item by item, on each split.
    sub = page.locator(f"#sub-{run.final_submission_id}")
    assert "graded" in sub.locator("h3").inner_text()
    rows = sub.locator("tr", has_text="right that the base got wrong")
    assert rows.count() == 2  # its dev evaluation and its final test evaluation
    for i, n in enumerate((200, 500)):  # arith's dev and test splits, paired by item id
        row = rows.nth(i)
        assert f"(of {n})" in row.inner_text()
        items = row.locator(".items")
        assert not items.is_visible()
        row.locator("summary").click()
        assert items.is_visible() and "gained:" in items.inner_text()
        assert "lost:" in items.inner_text()
    _shot(page, tmp_path, "run")
    if os.environ.get("A2RL_VIEW_SCREENSHOT"):
        page.set_viewport_size({"width": 1280, "height": 1800})
        page.goto(f"{site}/run/{runs['llm']}")
        page.locator("#report-top[data-loaded]").wait_for()
        screenshot(page, Path(os.environ["A2RL_VIEW_SCREENSHOT"]), full_page=False)
    assert not errors, errors


def test_run_without_transcript_and_a_tool_call_page(runs: dict[str, Any], site: str,
                                                     browser: Any, tmp_path: Path) -> None:
    page, errors = browser
    page.goto(f"{site}/run/{runs['plain']}")
    page.locator("#report-top[data-loaded]").wait_for()
    assert "No agent transcript" in page.locator("#conversation").inner_text()
    call = page.locator("details.call", has_text="run_command").first
    call.locator("summary").click()
    call.locator("a", has_text="link to this call").click()
    page.wait_for_url("**/call/*")
    assert "echo hi there" in page.locator("body").inner_text()
    assert "hi there" in page.locator("pre.result").inner_text()
    _shot(page, tmp_path, "call")
    assert not errors, errors


def test_compare_two_runs(runs: dict[str, Any], site: str, browser: Any,
                          tmp_path: Path) -> None:
    page, errors = browser
    page.goto(site + "/")
    for rid in (runs["llm"], runs["plain"]):
        page.check(f"input[value='{rid}']")
    page.click("#compare-btn")
    page.wait_for_url("**/compare?*")
    text = page.locator("#compare-table").inner_text()
    assert runs["llm"] in text and runs["plain"] in text
    assert "time to first improvement" in text
    # Both runs' trajectories on one axes, each in its own colour.
    assert page.locator("svg").count() == 1
    drawn = page.locator("#compare-plot g.run")
    assert sorted(drawn.nth(i).get_attribute("data-run") for i in range(drawn.count())) == \
        sorted([runs["llm"], runs["plain"]])
    _shot(page, tmp_path, "compare")
    assert not errors, errors


def test_live_page_shows_calls_jobs_and_scores_made_after_it_opened(
        runs: dict[str, Any], site: str, browser: Any, tmp_path: Path) -> None:
    page, errors = browser
    page.goto(f"{site}/run/{runs['plain']}")
    page.locator("#report-top[data-loaded]").wait_for()
    assert page.locator("#live").is_visible()
    # The clock: elapsed counts up between polls, the deadline is the run row's.
    with runs["store"].session() as s:
        row = s.get(Run, runs["plain"])
        assert row is not None and row.deadline is not None
        deadline = row.deadline
    assert page.locator("#live-deadline").inner_text() == f"{deadline:%Y-%m-%d %H:%M:%S} UTC"
    before = page.locator("#live-elapsed").inner_text()
    page.wait_for_timeout(2_500)
    assert page.locator("#live-elapsed").inner_text() != before
    assert re.fullmatch(r"\d+m\d\ds", page.locator("#live-remaining").inner_text())
    assert page.locator("code.tool-name", has_text="budget_status").count() == 0
    assert not page.locator("#live-scores").inner_text().strip()
    failures: list[BaseException] = []

    def later() -> None:
        try:
            anyio.run(_calls, runs["settings"], runs["store"], runs["plain"],
                      [("budget_status", {}),
                       ("run_command", {"command": "echo a-live-job", "wait_s": 30}),
                       ("submit_checkpoint", {"path": "output/ckpt"})])
        except BaseException as exc:  # surfaced in the test's thread below
            failures.append(exc)

    t = threading.Thread(target=later)
    t.start()
    t.join(60)
    assert not failures, failures
    started = time.monotonic()
    page.locator("#live-calls details.call", has_text="budget_status").wait_for(timeout=15_000)
    page.locator("#live-calls details.call", has_text="a-live-job").wait_for(timeout=15_000)
    job = page.locator("#live-jobs .job", has_text="echo a-live-job")
    job.wait_for(timeout=15_000)
    assert time.monotonic() - started < 15
    assert "exited (exit 0)" in job.inner_text()
    # The submission's score appears once the server has graded it.
    page.locator("#live-scores", has_text=re.compile(r" graded test \d\.\d{3}")).wait_for(
        timeout=180_000)
    _shot(page, tmp_path, "live")
    assert not errors, errors


def test_llm_transcript_is_paired_with_the_servers_record(runs: dict[str, Any]) -> None:
    """Without a browser: every recorded call appears once, in the transcript's place."""
    from sqlmodel import select
    from starlette.testclient import TestClient

    from a2rl.analysis.web import create_app
    from a2rl.store import ToolCall

    with runs["store"].session() as s:
        rows = list(s.exec(select(ToolCall).where(ToolCall.run_id == runs["llm"])
                           .order_by(ToolCall.id)).all())  # type: ignore[arg-type]
    html = TestClient(create_app(runs["settings"].database_url)).get(
        f"/run/{runs['llm']}").text
    positions = [html.index(f'id="call-{r.id}"') for r in rows]
    assert positions == sorted(positions) and all(
        html.count(f'id="call-{r.id}"') == 1 for r in rows)
    assert [r.tool for r in rows][:6] == [c.name for c in STEPS[:6]]  # type: ignore[union-attr]
    assert html.index("Improve the model on task arith") < positions[0]
    assert html.index("I wrote a training script") > positions[5]


def test_live_page_stops_following_a_run_that_failed(browser: Any, tmp_path: Path) -> None:
    """A run can end without finishing (`failed`: a fleet node lost): the page says so and
    stops polling, as it does for a finished run."""
    from .test_view_parts import _bench

    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    rid = _bench().build_synthetic(store, calls=5, jobs=1, subs=1)  # type: ignore[attr-defined]
    with store.session() as s:
        row = s.get(Run, rid)
        assert row is not None
        row.status, row.ended_at, row.end_reason = "running", None, None
        s.add(row)
    page, errors = browser
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/activity" in r.url else None)
    with served(url) as base:
        page.goto(f"{base}/run/{rid}")
        assert page.locator("#live b").inner_text() == "Live"
        with store.session() as s:
            row = s.get(Run, rid)
            assert row is not None
            row.status, row.ended_at, row.end_reason = "failed", row.deadline, "node lost"
            s.add(row)
        page.locator("#live b", has_text="Ended (failed)").wait_for(timeout=15_000)
        seen = len(polls)
        page.wait_for_timeout(4_000)  # two polling periods
        assert len(polls) == seen, polls
        assert page.locator("#live a", has_text="reload for the final report").count() == 1
    store.close()
    assert not errors, errors


def test_audit_flags_link_to_their_evidence(runs: dict[str, Any], site: str, browser: Any,
                                             tmp_path: Path) -> None:
    """A stored audit of the llm run, its evidence the run's own rows: each link on the run
    page opens the call, the revision's diff, the job, the submission and the evaluation;
    the runs page marks the run and its audit filter keeps it alone."""
    from datetime import UTC, datetime

    from a2rl.audit import AuditReport, Evidence, Flag, Severity, save_audit
    from a2rl.store import Audit, Evaluation, Job, Revision, ToolCall

    store, rid = runs["store"], runs["llm"]
    with store.session() as s:
        call = s.exec(select(ToolCall).where(ToolCall.run_id == rid,
                                             ToolCall.tool == "read_file")).one()
        rev = s.exec(select(Revision).where(Revision.run_id == rid,
                                            Revision.path == "code/train.py")
                     .order_by(Revision.id.desc())).first()  # type: ignore[union-attr]
        job = s.exec(select(Job).where(Job.run_id == rid)).first()
        sub = s.exec(select(Submission).where(Submission.run_id == rid,
                                              Submission.status == "graded")).one()
        ev = s.exec(select(Evaluation).where(Evaluation.submission_id == sub.id)).first()
    assert rev is not None and job is not None and ev is not None
    save_audit(store, AuditReport(run_id=rid, audit_version=1, computed_at=datetime.now(UTC),
                                  flags=[Flag(kind="reaching_out", severity=Severity.high,
                                              finding="tried to read <the store>",
                                              evidence=Evidence(
                                                  tool_calls=[call.id], revisions=[rev.id],
                                                  jobs=[job.id], submissions=[sub.id],
                                                  evaluations=[ev.id],
                                                  paths=["no/such/file.txt"]))]))
    page, errors = browser
    try:
        page.goto(f"{site}/run/{rid}")
        box = page.locator("#audit")
        assert "1 flag (1 high)" in box.inner_text() and "tried to read <the store>" in \
            box.inner_text()
        box.locator("a.ev-call").click()
        assert page.locator(f"details#call-{call.id}").get_attribute("open") is not None
        box.locator("a.ev-rev").click()
        opened = page.locator(f"details#rev-{rev.id}")
        assert opened.get_attribute("open") is not None
        opened.locator("pre.diff").wait_for()  # the diff loads as on opening it by hand
        for link, target in (("a.ev-job", f"job-{job.id}"), ("a.ev-sub", f"sub-{sub.id}"),
                             ("a.ev-eval", f"eval-{ev.id}")):
            box.locator(link).click()
            assert page.evaluate("location.hash") == f"#{target}"
            assert page.locator(f"#{target}").is_visible(), target
        assert ev.split in page.locator(f"#eval-{ev.id}").inner_text()
        _shot(page, tmp_path, "audit")
        page.goto(site + "/")
        cell = page.locator("#runs-table tr", has_text=rid).locator("td.audit-cell")
        assert cell.inner_text() == "1 flag (1 high)"
        assert page.locator("#runs-table tr", has_text=runs["plain"]).locator(
            "td.audit-cell").inner_text() == "not audited"
        page.select_option("#audit-filter", "flagged")
        page.wait_for_url("**/?audit=flagged")
        assert page.locator("#runs-table tbody tr").count() == 1
        assert rid in page.locator("#runs-table tbody").inner_text()
        assert not errors, errors
    finally:
        with store.session() as s:  # the other tests see the run unaudited
            row = s.get(Audit, rid)
            if row is not None:
                s.delete(row)


@pytest.mark.cheats("stores made-up audits with many flags")
def test_the_runs_table_fits_a_1400px_window(browser: Any, tmp_path: Path) -> None:
    """Long run ids, fleet tags, model names and every column (profile and audit included):
    no horizontal scrolling at 1400 px."""
    from datetime import UTC, datetime

    from a2rl.audit import AuditReport, Flag, Severity, save_audit

    from .test_view_parts import _bench

    url = f"sqlite:///{tmp_path / 'a2rl.db'}"
    store = Store(url)
    for i in range(3):
        rid = f"20260101-12000{i}-a1b2c3d4e5"
        _bench().build_synthetic(store, calls=5, jobs=1, subs=2,  # type: ignore[attr-defined]
                                 run_id=rid, fleet_id="sweep-claude-code-deepsearchqa-2026")
        with store.session() as s:
            row = s.get(Run, rid)
            assert row is not None
            row.task_id, row.agent, row.profile = "deepsearchqa", "claude-code", "paper"
            row.driver_model = "anthropic/claude-sonnet-4-5-20250929-extended-thinking"
            s.add(row)
        save_audit(store, AuditReport(run_id=rid, audit_version=1,
                                      computed_at=datetime.now(UTC), flags=[
                                          Flag(kind="contamination", severity=Severity.high,
                                               finding="x")] * (10 * i)))
    store.close()
    page, errors = browser
    page.set_viewport_size({"width": 1400, "height": 900})
    try:
        with served(url) as base:
            page.goto(base + "/")
            assert page.locator("#runs-table tbody tr").count() == 3
            assert "20 flags (20 high)" in page.locator("#runs-table").inner_text()
            sizes = page.evaluate("""() => {
                const t = document.getElementById('runs-table').getBoundingClientRect();
                return {scroll: document.documentElement.scrollWidth,
                        client: document.documentElement.clientWidth,
                        right: t.right, inner: window.innerWidth};
            }""")
            assert sizes["scroll"] <= sizes["client"], sizes
            assert sizes["right"] <= sizes["inner"], sizes
            _shot(page, tmp_path, "runs-1400")
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
    assert not errors, errors
