"""`a2rl demo` end to end, as a user runs it; one finished run shared by the tests that read it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import select

from a2rl.store import Evaluation, Job, Revision, Run, Store, Submission, ToolCall

from .audit_guard import expect_cheating
from .conftest import require, require_bwrap

A2RL = str(Path(sys.executable).parent / "a2rl")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_bwrap()
    home = tmp_path_factory.mktemp("demo-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env["A2RL_HOME"] = str(home)
    proc = subprocess.run([A2RL, "demo", "--json"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # --json: one document, nothing else on stdout
    return {"summary": summary, "home": home, "env": env, "stderr": proc.stderr,
            "store": Store(f"sqlite:///{home / 'a2rl.db'}")}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_improves(demo: dict[str, Any]) -> None:
    s = demo["summary"]
    assert set(s) == {"run_id", "task_id", "task", "baseline_score", "best_score",
                      "final_score", "submissions", "tool_calls", "revisions", "seconds"}
    assert s["task_id"] == s["task"] == "arith" and s["submissions"] >= 2  # task: the alias
    assert s["final_score"] > s["baseline_score"] and s["best_score"] > s["baseline_score"]
    assert "finalizing" in demo["stderr"]  # progress went to stderr


def test_show_finds_the_run(demo: dict[str, Any]) -> None:
    run_id = demo["summary"]["run_id"]
    p = subprocess.run([A2RL, "show", run_id, "--json"], env=demo["env"], capture_output=True,
                       text=True, timeout=120)
    shown = json.loads(p.stdout)
    assert shown["status"] == "finished" and shown["final_score"] == demo["summary"]["final_score"]
    assert shown["tool_calls"] == demo["summary"]["tool_calls"]
    # checkpoint lineage (issue 42): the GRPO checkpoint came from the GRPO job, which read
    # the SFT job's checkpoint, which read the base model; each job watched whole
    lineage = shown["lineage"]
    grpo = next(x for x in lineage["submissions"].values() if x["checkpoint"] == "output/grpo")
    stages = [(x["checkpoint"], x["how"], (x["command"] or "").split(" --")[0])
              for x in grpo["stages"]]
    assert stages == [("output/grpo", "trained", "python code/grpo.py"),
                      ("output/sft", "trained", "python code/sft.py"),
                      ("base_model", "base", "")], stages
    assert grpo["complete"], grpo["note"]
    assert grpo["stages"][0]["source"]["named_by_command"] == ["output/sft"]
    jobs = {j["id"]: j for j in shown["job_list"]}
    assert {jobs[x["job_id"]]["command"] for x in grpo["stages"][:2]} == {
        x["command"] for x in grpo["stages"][:2]}
    final = lineage["final"]
    assert final is not None and final["stages"][-1]["how"] == "base"
    assert lineage["final_submission_id"] == shown["final_submission_id"]
    # stage attribution: SFT's gain over the base model, then GRPO's over SFT (GRPO is the
    # final, or a later submission built on the final SFT checkpoint when they tie on dev)
    attribution = shown["attribution"]
    assert [(x["checkpoint"], x["route"], x["seen_by_agent"]) for x in attribution["stages"]
            ] == [("output/sft", "sft", True), ("output/grpo", "grpo", True)]
    sft, grpo = attribution["stages"]
    assert sft["gain"] == sft["score"] - attribution["baseline"] and sft["interval"]
    assert grpo["gain"] == grpo["score"] - sft["score"] and grpo["interval"]
    assert grpo["in_final"] == (shown["final_submission_id"] == grpo["submission_id"])


def test_everything_was_recorded(demo: dict[str, Any]) -> None:
    store: Store = demo["store"]
    run_id = demo["summary"]["run_id"]
    with store.session() as s:
        calls = s.exec(select(ToolCall).where(ToolCall.run_id == run_id)).all()
        revs = s.exec(select(Revision).where(Revision.run_id == run_id)).all()
        jobs = s.exec(select(Job).where(Job.run_id == run_id, Job.is_background)).all()
        subs = s.exec(select(Submission).where(Submission.run_id == run_id)).all()
    tools = {c.tool for c in calls}
    assert {"edit_file", "run_command", "job_status", "submit_checkpoint", "get_score"} <= tools
    assert all(c.duration_ms > 0 for c in calls)
    assert {"code/sft.py", "code/grpo.py"} <= {r.path for r in revs}
    assert jobs and all(j.state == "exited" and j.log_blob_sha for j in jobs)
    assert all(sub.snapshot_id and sub.status == "graded" for sub in subs)


def test_heldout_kept_test_hidden_until_the_end(demo: dict[str, Any]) -> None:
    store: Store = demo["store"]
    run_id = demo["summary"]["run_id"]
    with store.session() as s:
        run = s.get(Run, run_id)
        test_evals = s.exec(select(Evaluation).where(Evaluation.run_id == run_id,
                                                     Evaluation.split == "test")).all()
        last_call = s.exec(select(ToolCall).where(ToolCall.run_id == run_id)
                           .order_by(ToolCall.id.desc())).first()  # type: ignore[union-attr]
        scores = s.exec(select(ToolCall).where(ToolCall.run_id == run_id,
                                               ToolCall.tool == "get_score")).all()
    assert run.protocol == "heldout"
    assert len(test_evals) == 1 and test_evals[0].submission_id == run.final_submission_id
    assert test_evals[0].started_at >= last_call.started_at
    assert all('"split": "dev"' in c.result_summary for c in scores if not c.is_error)
    assert not any('"items"' in c.result_summary for c in scores)


def test_audit_walkthrough_clean_demo_then_a_flagged_cheat(demo: dict[str, Any]) -> None:
    """The README's "Auditing a run", as a newcomer does it after `make demo`: `a2rl audit`
    of the demo (no flags, exit 0), the cheating example (flags with evidence, exit 1), and
    the same two verdicts in `a2rl view`'s runs table and run page."""
    import socket
    import time

    import httpx

    env, run_id = demo["env"], demo["summary"]["run_id"]
    clean = subprocess.run([A2RL, "audit", run_id], env=env, capture_output=True, text=True,
                           timeout=120)
    assert clean.returncode == 0 and "no flags" in clean.stdout.lower(), clean.stdout
    example = Path(__file__).resolve().parents[1] / "examples" / "cheating_run.py"
    made = subprocess.run([sys.executable, str(example), "hidden-reach"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    cheat = made.stdout.strip().splitlines()[-1]
    expect_cheating(demo["home"], cheat)
    flagged = subprocess.run([A2RL, "audit", cheat], env=env, capture_output=True, text=True,
                             timeout=120)
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert "high" in flagged.stdout and "hidden_data_reach" in flagged.stdout
    assert "evidence: tool calls" in flagged.stdout  # the evidence is named
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    viewer = subprocess.Popen([A2RL, "view", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                runs = httpx.get(f"{url}/?audit=flagged", timeout=5).text
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert cheat in runs and run_id not in runs  # the filter: only the flagged run
        page = httpx.get(f"{url}/run/{cheat}", timeout=10).text
        assert 'class="audit-status bad"' in page and "hidden_data_reach" in page
        honest = httpx.get(f"{url}/run/{run_id}", timeout=10).text
        assert 'class="audit-status good"' in honest
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)


@contextmanager
def _inspect_view(log_dir: Path) -> Iterator[str]:
    """`inspect view` over `log_dir` on a loopback port, as a user starts it; its base URL.
    Stopped (its process group) when done."""
    from a2rl.analysis.web.browser import free_port

    port = free_port()
    view = subprocess.Popen(
        [str(Path(sys.executable).parent / "inspect"), "view", "--log-dir", str(log_dir),
         "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/api/logs", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert view.poll() is None, view.stderr.read().decode() if view.stderr else ""
            time.sleep(0.1)
        else:
            raise AssertionError("inspect view did not answer within a minute")
        yield base
    finally:
        os.killpg(view.pid, signal.SIGTERM)
        try:
            view.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(view.pid, signal.SIGKILL)
            view.wait(10)


@pytest.mark.timeout(900)  # the demo run, when this test is the first to need it
def test_the_demo_run_in_the_fields_formats(demo: dict[str, Any],
                                            tmp_path: Path) -> None:
    """A newcomer exports the demo run to ATIF and to an Inspect log (the default names, in
    the current folder), and opens the log with `inspect view`: checked by Harbor's validator,
    by Inspect's reader and in the real browser, whose screenshot is the README's
    (`A2RL_INSPECT_SCREENSHOT=PATH`, scripts/inspect-screenshot.sh)."""
    from inspect_ai.log import read_eval_log

    from a2rl.analysis.web.browser import browser_page, chromium_path

    from .test_export_formats import _harbor_validate

    run_id, final = demo["summary"]["run_id"], demo["summary"]["final_score"]
    with demo["store"].session() as s:
        first = s.exec(select(ToolCall).where(ToolCall.run_id == run_id)
                       .order_by(ToolCall.id)).first()  # type: ignore[arg-type]
    assert first is not None
    for fmt in ("atif", "inspect"):
        p = subprocess.run([A2RL, "export", run_id, "--format", fmt], env=demo["env"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    atif, log = tmp_path / f"a2rl-{run_id}.trajectory.json", tmp_path / f"a2rl-{run_id}.eval"
    _harbor_validate(atif)
    doc = json.loads(atif.read_text())
    assert doc["extra"]["summary"]["final_test"] == final
    assert sum(len(s.get("tool_calls", [])) for s in doc["steps"]) == demo["summary"][
        "tool_calls"]
    sample = (read_eval_log(str(log)).samples or [])[0]
    assert sample.id == run_id and sample.scores and sample.scores["final_test"].value == final
    require(chromium_path() is not None, "chromium is not installed (apt-get install chromium)")
    shown = f"{final:.3f}".rstrip("0").rstrip(".")
    with _inspect_view(tmp_path) as base, browser_page((1280, 900)) as (page, errors):
        page.goto(base)
        # the log opens on its one sample: its conversation, from the first call on
        page.get_by_text(first.tool).first.wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert f"{run_id}\n" in body and "a2rl/arith" in body, body[:2000]  # not only the file
        assert "final_test" in body and shown in body, body[:2000]
        # below the breadcrumb, which names the log folder by its path on this machine
        nav = page.locator("nav[aria-label=breadcrumb]").first.bounding_box()
        top = nav["y"] + nav["height"] if nav else 0
        clip = {"x": 0, "y": top, "width": 1280, "height": 900 - top}
        for path in [tmp_path / "inspect-view.png",
                     *filter(None, [os.environ.get("A2RL_INSPECT_SCREENSHOT")])]:
            page.screenshot(path=str(path), clip=clip)
        # the viewer asks for a resource it may lack (a 404); nothing else may fail
        assert not [e for e in errors if "404" not in e], errors


def _summary(**kw: Any) -> Any:
    from a2rl.clients.orchestrator import RunSummary

    base = {"run_id": "r-x", "task": "arith", "agent": "reference", "agent_status": "finished",
            "baseline_score": 0.0, "best_score": 0.95, "final_score": 0.94, "submissions": 2,
            "tool_calls": 20, "revisions": 3, "seconds": 300.0}
    return RunSummary(**(base | kw))


@pytest.mark.parametrize(("fields", "why"), [
    ({}, None),
    ({"agent_status": "budget", "submissions": 0, "final_score": 0.0}, "no submission (the budget"),
    ({"agent_status": "crashed", "submissions": 0}, "no submission (the agent crashed"),
    ({"final_score": 0.0}, "not above the baseline 0.000"),
    ({"final_score": None}, "final score is missing"),
    ({"agent_status": "interrupted"}, "interrupted"),
])
def test_a_demo_without_an_improvement_says_why(fields: dict[str, Any], why: str | None) -> None:
    from a2rl.cli.demo import demo_failure

    found = demo_failure(_summary(**fields))
    assert (found is None) if why is None else (why in (found or "")), found


@pytest.mark.timeout(900)  # the demo run, when this test is the first to need it
def test_regrade_reproduces_the_demo_and_keeps_both_records(demo: dict[str, Any]) -> None:
    """`a2rl regrade` on the demo run: today's grader under the run's frozen config gives the
    stored test score exactly, no item changes verdict, the new evaluations become current
    with the old kept; a second reading under another profile is kept beside them and changes
    no score; `show` and `compare` say the run was re-graded."""
    env, run_id = demo["env"], demo["summary"]["run_id"]
    p = subprocess.run([A2RL, "regrade", run_id, "--json"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    [doc] = json.loads(p.stdout)
    assert doc["current"] and doc["error"] is None and doc["changed"] == []
    assert doc["final"]["new"] == doc["final"]["old"] == demo["summary"]["final_score"]
    assert doc["baseline"]["new"] == doc["baseline"]["old"] == demo["summary"]["baseline_score"]
    assert doc["difference"]["estimate"] == 0.0 and doc["improvement"]["new"] is not None
    store: Store = demo["store"]
    with store.session() as s:
        old = s.get(Evaluation, doc["final"]["old_evaluation"])
        new = s.get(Evaluation, doc["final"]["new_evaluation"])
        run = s.get(Run, run_id)
    assert old is not None and new is not None and run is not None
    assert old.superseded_by == new.id and new.regrade_id == doc["regrade_id"]
    assert old.items == new.items and old.provenance["generation"] == new.provenance["generation"]
    assert run.config.setup.baseline_evaluations["test"] == doc["baseline"]["new_evaluation"]
    reading = subprocess.run([A2RL, "regrade", run_id, "--profile", "paper", "--json"], env=env,
                             capture_output=True, text=True, timeout=600)
    assert reading.returncode == 0, reading.stderr[-2000:]
    [second] = json.loads(reading.stdout)
    assert not second["current"] and second["profile"] == "paper"
    shown = json.loads(subprocess.run([A2RL, "show", run_id, "--json"], env=env,
                                      capture_output=True, text=True, timeout=120).stdout)
    assert shown["final_score"] == demo["summary"]["final_score"]
    assert [r["current"] for r in shown["regrades"]] == [True, False]
    assert shown["evaluation_config"]["task_id"] == "arith"
    text = subprocess.run([A2RL, "show", run_id], env=env, capture_output=True, text=True,
                          timeout=120).stdout
    assert "regraded" in text and "second reading" in text and "evaluation       arith" in text
    table = subprocess.run([A2RL, "compare"], env=env, capture_output=True, text=True,
                           timeout=120).stdout
    assert "final ^: re-graded" in table
    from a2rl.analysis.web.browser import served

    with served(store.url) as base:
        page = httpx.get(f"{base}/run/{run_id}", timeout=30).text
    assert 'id="evaluation-config">arith v' in page and page.count('class="regrade"') == 2
