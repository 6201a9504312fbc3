"""`a2rl run`: the orchestrator with real agent processes (a real CLI, shell-script agents)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from a2rl.clients.orchestrator import Orchestrator
from a2rl.store import Run, RunConfig, Store

from . import fake_agents  # noqa: F401  (registers the test agents)
from .baseline_seed import (  # noqa: F401  (fixtures)
    base_model_dir,
    baseline_rows,
    seed_base_model,
    seed_baseline,
)
from .conftest import require_bwrap
from .fake_model_apis import FakeAnthropic, Step
from .helpers import calls

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _scored_baseline(settings, baseline_rows) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Each test's store holds the toy task's baseline, scored once per session: the runs
    here finalize at it, but its scoring is not what they test."""
    seed_baseline(settings.database_url, baseline_rows)


def run_agent(settings, store, agent: str, budget: str = "5m", **kw):  # type: ignore[no-untyped-def]
    require_bwrap()
    return Orchestrator(settings, store).run(RunConfig(task_id="arith", agent=agent,
                                                       budget=budget, **kw))


def _procs(name: str) -> int:
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            n += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(name.encode())
    return n


def test_agent_that_never_stops_is_stopped_at_the_deadline(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    summary = run_agent(settings, store, "test-neverstops", budget="6s")
    assert summary.agent_status == "budget"
    assert _procs("a2rl-test-agent") == 0 and _procs("a2rl-test-daemon") == 0
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run.status == "finished" and run.end_reason == "budget exhausted"
    assert run.end_kind == "budget_exhausted"  # stored when it closed
    assert store.get_blob(run.agent_transcript_sha).strip() == b"started"
    # no submission: no final score, as `a2rl show` says (the row's final_score: the baseline)
    assert summary.final_score is None and summary.final_note == "no submission"
    assert run.final_score == summary.baseline_score


def test_crashing_agent_finalizes_at_the_baseline(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    require_bwrap()
    warned: list[str] = []
    summary = Orchestrator(settings, store, warn=warned.append).run(
        RunConfig(task_id="arith", agent="test-crashes", budget="5m"))
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run.agent_status == "crashed" and run.agent_exit_code == 3
    assert "crashed" in run.end_reason and run.final_score == run.baseline_test
    assert run.end_kind == "agent_crashed"  # stored when it closed: not a result
    assert b"something went wrong" in store.get_blob(run.agent_stderr_sha)
    # the user sees why, not only "agent crashed (exit 3)", and so does the record
    assert any("exit 3" in w and w.endswith("| something went wrong") for w in warned), warned
    assert run.agent_error == summary.agent_error == "something went wrong"


def test_an_agent_its_endpoint_refuses_crashes_and_every_view_says_why(
        settings, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The endpoint accepts the check before the run (GET /models) and refuses the chat
    requests with 401: the run is recorded as crashed with the endpoint's answer, which
    `a2rl show`, the report, the viewer and compare's runs not counted all show, and
    `a2rl run` exits 1 with it."""
    import typer
    from starlette.testclient import TestClient
    from typer.testing import CliRunner

    from a2rl.analysis import build_report, compare, render, render_text
    from a2rl.analysis.web.app import create_app
    from a2rl.cli import app
    from a2rl.cli.lifecycle import exit_on_agent_crash

    from .fake_openai import FakeOpenAI

    with FakeOpenAI(["done"]) as fake:
        fake.fail(401, times=20)
        summary = run_agent(settings, store, "llm", driver_model="m", agent_options={
            "llm_base_url": fake.base_url, "llm_retries": "0"})
    assert summary.agent_status == "crashed" and summary.final_score is None
    assert "HTTP 401: " in (summary.agent_error or "") and "injected 401" in summary.agent_error
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run.agent_error == summary.agent_error and run.end_kind == "agent_crashed"
    with pytest.raises(typer.Exit) as exc:
        exit_on_agent_crash(summary)
    assert exc.value.exit_code == 1
    env = {k: None for k in os.environ if k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(settings.home), A2RL_DB_URL=settings.database_url)
    shown = CliRunner().invoke(app, ["show", run.id], env=env).stdout
    assert "agent error" in shown and "HTTP 401" in shown and "final (test)     - (no " \
        "submission)" in shown
    assert "agent error" in render(build_report(store, run.id), "md")
    page = TestClient(create_app(settings.database_url)).get(f"/run/{run.id}").text
    assert 'class="agent-error"' in page and "HTTP 401" in page
    text = render_text(compare(store, run_ids=[run.id]))
    assert f"(agent crashed: {summary.agent_error})" in text


def test_run_options_reach_the_run(settings, store: Store) -> None:  # type: ignore[no-untyped-def]
    """`a2rl run --grading-clock paused --unsafe-local` as `a2rl create` takes them."""
    require_bwrap()
    summary = Orchestrator(settings, store).run(RunConfig(
        task_id="arith", agent="test-crashes", budget="5m", grading_clock="paused",
        unsafe_local=True))
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run.grading_clock == "paused" and run.config.unsafe_local is True
    assert run.config.grading_clock == "paused" and run.config.agent == "test-crashes"
    default = Orchestrator(settings, store).run(RunConfig(task_id="arith", agent="test-crashes",
                                                          budget="5m"))
    with store.session() as s:
        run = s.get(Run, default.run_id)
    assert run.grading_clock == "counted" and run.config.unsafe_local is False


def test_agent_process_is_sandboxed(settings, store: Store, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    home_file = Path.home() / f".a2rl-snoop-{os.getpid()}"
    home_file.write_text("user secret")
    other = settings.runs_dir / "r-someone" / "workspace" / "code.py"
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text("other run")
    monkeypatch.setenv("A2RL_TEST_SECRET", "sk-nope")
    try:
        summary = run_agent(settings, store, "test-snoops", agent_options={
            "SNOOP_DB": settings.database_url.removeprefix("sqlite:///"),
            "SNOOP_HOME_FILE": str(home_file), "SNOOP_OTHER_RUN": str(other)})
    finally:
        home_file.unlink()
    with store.session() as s:
        sha = s.get(Run, summary.run_id).agent_transcript_sha
    out = store.get_blob(sha).decode()
    assert "LEAK" not in out and out.count("blocked") == 4, out
    assert summary.agent_status == "finished"


def test_claude_code_run_end_to_end(settings, store: Store, agent_clis: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy")
    script = [Step("list_files", {"path": "."}), Step("run_command", {"command": "echo hi"}),
              Step("budget_status")]
    with FakeAnthropic(script) as fake:
        summary = run_agent(settings, store, "claude-code", driver_model=fake.model,
                            agent_options={"anthropic_base_url": fake.url})
    assert summary.agent_status == "finished", summary
    assert [c.tool for c in calls(store, summary.run_id)] == [  # its connection, counted
        "mcp.initialize", "list_files", "run_command", "budget_status"]
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run.agent == "claude-code" and run.agent_version and run.driver_model == fake.model
    lines = store.get_blob(run.agent_transcript_sha).decode().splitlines()
    assert lines and all(json.loads(line) for line in lines)


def test_ctrl_c_finalizes_cleanly(tmp_path: Path, settings,  # type: ignore[no-untyped-def]
                                  base_model_dir: Path) -> None:  # noqa: F811
    """SIGINT to the foreground group, as a terminal's Ctrl-C sends it, mid-run."""
    import signal
    import subprocess
    import sys
    import time

    from sqlmodel import select

    from a2rl.store import Job, ToolCall

    require_bwrap()
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env["A2RL_HOME"] = str(seed_base_model(tmp_path, base_model_dir))
    assert settings.database_url == f"sqlite:///{tmp_path / 'a2rl.db'}"  # seeded: _scored_baseline
    a2rl = str(Path(sys.executable).parent / "a2rl")
    proc = subprocess.Popen([a2rl, "run", "--task", "arith", "--agent", "reference", "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    store = Store(f"sqlite:///{tmp_path / 'a2rl.db'}")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # wait until training runs as a job
        time.sleep(0.5)
        with contextlib.suppress(Exception), store.session() as s:
            if s.exec(select(Job).where(Job.is_background)).first() is not None:
                break
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    summary = json.loads(out)
    with store.session() as s:
        run = s.get(Run, summary["run_id"])
        jobs = s.exec(select(Job).where(Job.run_id == run.id)).all()
        n_calls = len(s.exec(select(ToolCall).where(ToolCall.run_id == run.id)).all())
    assert run.status == "finished" and run.agent_status == "interrupted"
    assert run.final_score == run.baseline_test and n_calls >= 4
    assert all(j.state != "running" for j in jobs)
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if run.id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                leftovers.append(pid)
    assert leftovers == []  # no supervisor, job or server of the run is left
