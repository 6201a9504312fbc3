"""`a2rl export --format atif|inspect`: a run in the field's formats, checked by each format's
own reference code: Harbor's ATIF validator (`python -m harbor.utils.trajectory_validator`, run
out of Harbor's published wheel, tests/harness_wheels.py) and inspect_ai's `read_eval_log`.

The run is made by the `llm` agent against a local fake of an OpenAI-compatible server, through
the real server and sandbox (its transcript stored as the orchestrator stores it), then
finished. Its graded submission is added as rows: the real grader writes them only after about
30 s of grading a trained checkpoint, and what is under test here is how the record is written
out. The real stdout of the pinned Claude Code, Codex and Gemini CLI (tests/fixtures/transcripts)
is exported too, in place of the run's own transcript. A second run, left running, makes the
fleet whose export lists it as not exported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlmodel import select

from a2rl.analysis.export import export_fleet, export_run
from a2rl.analysis.formats import read_record, to_atif
from a2rl.analysis.formats.record import conversation
from a2rl.analysis.formats.usage import transcript_usage
from a2rl.clients.base import AgentContext, McpEndpoint
from a2rl.clients.llm import LlmConnector
from a2rl.clients.prompt import task_prompt
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.store import Evaluation, GradeRequest, Run, Store, Submission, ToolCall

from .conftest import require_bwrap
from .fake_openai import Call, FakeOpenAI
from .harness_wheels import HARBOR, require_wheel

pytestmark = pytest.mark.timeout(300)
A2RL = str(Path(sys.executable).parent / "a2rl")
FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
FLEET = "f-export"
#: one call per turn, then two calls in one turn, then the final text
SCRIPT: list[Any] = [
    Call("list_files", {"path": "."}),
    Call("run_command", {"command": "echo hello", "wait_s": 30}),
    Call("read_file", {"path": "no/such/file.txt"}),
    [Call("budget_status"), Call("list_files", {"path": "code"})],
    Call("submit_checkpoint", {"path": "output/none"}),
    "I looked around and stopped.",
]
SUBMISSION = "s-0export"
DEV, TEST = 0.5, 0.45


def _a2rl(home: Path, db: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    full.update(A2RL_HOME=str(home), A2RL_DB_URL=db, **env)
    return subprocess.run([A2RL, *args], env=full, capture_output=True, text=True, timeout=120)


def _harbor_validate(*paths: Path) -> None:
    """Harbor's own validator on each file: exit 0 and its "valid" line, or the errors."""
    wheel = require_wheel(HARBOR)
    env = {**os.environ, "PYTHONPATH": str(wheel)}
    for path in paths:
        p = subprocess.run([sys.executable, "-m", "harbor.utils.trajectory_validator",
                            str(path)], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "Trajectory is valid" in p.stdout, (path, p.stdout,
                                                                         p.stderr)


def _one_line_error(p: Any, *needles: str) -> str:
    """A mistake's result (the CLI's runner's): exit 2, one `a2rl:` line, the needles in it."""
    assert p.exit_code == 2, (p.exit_code, p.stderr, p.exception)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("a2rl: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


async def _llm_agent(settings: Settings, store: Store, run: Run, home: Path) -> LlmConnector:
    agent = LlmConnector()
    with FakeOpenAI(list(SCRIPT)) as fake:
        ctx = AgentContext(run_id=run.id, prompt=task_prompt(run), home=home,
                           endpoint=McpEndpoint(url="memory://", token="unused"),
                           model="fake-model", budget_s=run.budget_s,
                           options={"llm_base_url": fake.base_url, "llm_backoff_s": "0.01"})
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as client:
            await agent.run(client, ctx)
    assert not fake.errors, fake.errors[0]
    return agent


def _graded_final(store: Store, run_id: str) -> None:
    """A submission graded on dev and, as the run's final one, on test (the rows grading and
    finalizing leave), on the run's last submit_checkpoint call."""
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.ended_at is not None
        call = s.exec(select(ToolCall).where(ToolCall.run_id == run_id,
                                             ToolCall.tool == "submit_checkpoint")).first()
        assert call is not None
        s.add(Submission(id=SUBMISSION, run_id=run_id, path="output/ck", status="graded",
                         tool_call_id=call.id, created_at=run.ended_at,
                         file_hashes={"model.safetensors": "0" * 64}))
        for split, score in (("dev", DEV), ("test", TEST)):
            ev = Evaluation(run_id=run_id, submission_id=SUBMISSION, split=split, score=score,
                            n_items=20, started_at=run.ended_at, ended_at=run.ended_at,
                            items=[{"id": "1", "correct": True}, {"id": "2", "correct": False}])
            s.add(ev)
            s.flush()
            s.add(GradeRequest(run_id=run_id, submission_id=SUBMISSION, split=split,
                               state="done", evaluation_id=ev.id))
        run.final_submission_id, run.final_score = SUBMISSION, TEST
        s.add(run)


@pytest.fixture(scope="module")
def made(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_bwrap()
    tmp = tmp_path_factory.mktemp("export-formats")
    db = f"sqlite:///{tmp / 'a2rl.db'}"
    settings = Settings(home=a2rl_home, db_url=db)
    store = Store(db)
    run = create_run(settings, store, task_id="arith", budget="30m", agent="llm").run
    agent = anyio.run(_llm_agent, settings, store, run, tmp / "agent-home")
    sha = store.put_blob("\n".join(json.dumps(m) for m in agent.transcript).encode())
    with store.session() as s:  # as the orchestrator records an in-process agent
        row = s.get(Run, run.id)
        assert row is not None
        row.agent_transcript_sha = sha
        row.driver_model, row.agent_status, row.agent_exit_code = "fake-model", "exited", 0
        row.fleet_id = FLEET
        s.add(row)
    finish_run(settings, store, run.id)
    _graded_final(store, run.id)
    live = create_run(settings, store, task_id="arith", budget="30m", agent="by-hand").run
    with store.session() as s:
        row = s.get(Run, live.id)
        assert row is not None
        row.fleet_id = FLEET
        s.add(row)
    usage = [e["usage"] for e in agent.transcript if e.get("kind") == "response"]
    with store.session() as s:
        calls = list(s.exec(select(ToolCall).where(ToolCall.run_id == run.id)
                            .order_by(ToolCall.id)).all())  # type: ignore[arg-type]
    yield {"home": a2rl_home, "db": db, "store": store, "run": run.id, "live": live.id,
           "tmp": tmp, "calls": calls, "prompt": sum(u["prompt_tokens"] for u in usage),
           "completion": sum(u["completion_tokens"] for u in usage), "settings": settings}
    finish_run(settings, store, live.id)
    store.close()


def test_atif_is_valid_and_holds_the_run(made: dict[str, Any]) -> None:
    out = made["tmp"] / "atif" / "run.trajectory.json"
    p = _a2rl(made["home"], made["db"], "export", made["run"], "--format", "atif", "--out",
              str(out), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["path"] == str(out)
    _harbor_validate(out)
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == "ATIF-v1.7" and doc["session_id"] == made["run"]
    assert doc["agent"]["name"] == "llm" and doc["agent"]["model_name"] == "fake-model"
    steps = doc["steps"]
    assert steps[0]["source"] == "system" and steps[1]["source"] == "user"  # the llm loop's own
    assert "post-training a base model" in steps[1]["message"]
    # every call the server recorded, once, in order, with its recorded result
    calls = [c for s in steps for c in s.get("tool_calls", [])]
    assert [c["extra"]["seq"] for c in calls] == [c.seq for c in made["calls"]]
    assert all(c["extra"]["recorded"] for c in calls)
    assert [c["function_name"] for c in calls] == [c.tool for c in made["calls"]]
    results = {r["source_call_id"]: r for s in steps for r in s.get("observation", {})
               .get("results", [])}
    for c, row in zip(calls, made["calls"], strict=True):
        assert results[c["tool_call_id"]]["extra"]["is_error"] == row.is_error
        assert c["arguments"] == row.arguments
    failed = next(c for c in calls if c["function_name"] == "read_file")
    assert results[failed["tool_call_id"]]["extra"]["is_error"]
    assert "no/such/file.txt" in results[failed["tool_call_id"]]["content"]
    # one step per call (two calls of one response too), the last words a step of their own
    assert all(len(s.get("tool_calls", [])) <= 1 for s in steps)
    assert [s["source"] for s in steps[2:2 + len(calls)]] == ["agent"] * len(calls)
    assert steps[2 + len(calls)] == {"step_id": 3 + len(calls), "source": "agent",
                                     "message": SCRIPT[-1]}
    assert steps[-1]["source"] == "system" and steps[-1]["extra"]["a2rl_kind"] == "result"
    m = doc["final_metrics"]
    assert (m["total_prompt_tokens"], m["total_completion_tokens"]) == (made["prompt"],
                                                                        made["completion"])
    assert m["total_steps"] == len(steps) and m["extra"]["tool_calls"] == len(made["calls"])
    extra = doc["extra"]
    assert extra["summary"]["final_test"] == TEST and extra["summary"]["best_dev"] == DEV
    refused, graded = extra["submissions"]  # output/none, refused; then the graded one
    assert refused["path"] == "output/none" and refused["status"] == "refused", refused
    assert graded["id"] == SUBMISSION and graded["status"] == "graded"
    assert {e["split"]: e["score"] for e in graded["evaluations"]} == {"dev": DEV, "test": TEST}
    assert extra["audit"]["status"] in ("clean", "flags", "flagged")  # audited at finish
    assert extra["score_trajectory"]["points"][0]["score"] == DEV


def test_atif_of_each_agent_cli_transcript(made: dict[str, Any], tmp_path: Path) -> None:
    """The real stdout of Claude Code, Codex and Gemini CLI: their steps, calls and token
    counts, in place of the run's own transcript (so no call is the server's record)."""
    rec = read_record(made["store"], made["run"])
    written = []
    for fmt, cost in (("claude-code", 0.0007), ("codex", None), ("gemini-cli", None)):
        data = (FIXTURES / f"{fmt}.jsonl").read_bytes()
        detected, messages = conversation(data, [])
        assert detected == fmt
        doc = to_atif(dataclasses.replace(rec, transcript_format=fmt, messages=messages,
                                          calls={}, usage=transcript_usage(data, fmt)))
        path = tmp_path / f"{fmt}.json"
        path.write_text(doc.model_dump_json(exclude_none=True))
        written.append(path)
        calls = [c for s in doc.steps for c in s.tool_calls or []]
        assert [c.function_name for c in calls] == ["list_files", "run_command",
                                                    "budget_status", "submit_checkpoint"], fmt
        assert not any((c.extra or {})["recorded"] for c in calls)
        last = doc.steps[[i for i, s in enumerate(doc.steps) if s.tool_calls][-1]]
        assert last.observation and (last.observation.results[-1].extra or {})["is_error"]
        assert any(s.source == "agent" and s.message == "All done." for s in doc.steps), fmt
        m = doc.final_metrics
        assert m and (m.total_prompt_tokens, m.total_completion_tokens) == (50, 25), fmt
        assert m.total_cost_usd == pytest.approx(cost) if cost else m.total_cost_usd is None
        # Claude Code's and Codex's streams do not carry the prompt: the one a2rl gave is the
        # first step; Gemini CLI's does
        users = [s for s in doc.steps if s.source == "user"]
        if fmt == "gemini-cli":
            assert [u.message for u in users] == ["Solve the task in TASK.md."]
        else:
            assert users == [doc.steps[0]] and users[0].message == rec.prompt
            assert (users[0].extra or {})["a2rl_kind"] == "task_prompt"
    _harbor_validate(*written)


def test_inspect_log_reads_back_with_inspect(made: dict[str, Any]) -> None:
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool

    out = made["tmp"] / "inspect" / "run.eval"  # Inspect's zip format, through the CLI
    p = _a2rl(made["home"], made["db"], "export", made["run"], "--format", "inspect", "--out",
              str(out))
    assert p.returncode == 0 and p.stdout.startswith(f"wrote {out}"), p.stderr
    as_json = export_run(made["store"], made["run"], "inspect", out.with_suffix(".json"))
    for path in (out, Path(as_json.path)):  # and its JSON
        log = read_eval_log(str(path))
        assert log.status == "success" and log.eval.task == "a2rl/arith"
        assert log.eval.model == "fake-model" and log.results is not None
        assert log.eval.viewer is not None and log.eval.viewer.trust_content is False
        assert log.results.scores[0].name == "final_test"
        assert log.results.scores[0].metrics["mean"].value == TEST
        assert log.samples is not None and len(log.samples) == 1
        sample = log.samples[0]
        assert sample.id == made["run"] and sample.scores is not None
        assert sample.scores["final_test"].value == TEST
        assert sample.scores["final_test"].answer == SUBMISSION
        assert sample.output.completion == SCRIPT[-1]
        asked = [tc for m in sample.messages if isinstance(m, ChatMessageAssistant)
                 for tc in m.tool_calls or []]
        answered = {m.tool_call_id: m for m in sample.messages if isinstance(m, ChatMessageTool)}
        assert [tc.function for tc in asked] == [c.tool for c in made["calls"]]
        assert [tc.arguments for tc in asked] == [c.arguments for c in made["calls"]]
        assert set(answered) == {tc.id for tc in asked}
        errors = [m.function for m in answered.values() if m.error is not None]
        assert errors == [c.tool for c in made["calls"] if c.is_error] and "read_file" in errors
        usage = sample.model_usage["fake-model"]
        assert usage.input_tokens + (usage.input_tokens_cache_read or 0) == made["prompt"]
        assert usage.output_tokens == made["completion"]
        assert sample.metadata["summary"]["final_test"] == TEST
        assert sample.metadata["submissions"][-1]["id"] == SUBMISSION
        assert sample.metadata["audit"]["status"] in ("clean", "flags", "flagged")


def test_a_fleet_exports_one_file_per_run_and_an_index(made: dict[str, Any]) -> None:
    from inspect_ai.log import read_eval_log

    folder = made["tmp"] / "fleet-atif"
    p = _a2rl(made["home"], made["db"], "export", "--fleet", FLEET, "--format", "atif", "--out",
              str(folder))
    assert p.returncode == 0 and f"wrote 1 of 2 runs of fleet {FLEET}" in p.stdout, p.stderr
    export_fleet(made["store"], FLEET, "inspect", made["tmp"] / "fleet-inspect")
    for fmt in ("atif", "inspect"):
        folder = made["tmp"] / f"fleet-{fmt}"
        index = json.loads((folder / "index.json").read_text())
        assert index["fleet"] == FLEET and index["format"] == fmt
        by_id = {e["run_id"]: e for e in index["runs"]}
        assert set(by_id) == {made["run"], made["live"]}
        assert by_id[made["live"]]["file"] is None
        assert "not finished" in by_id[made["live"]]["skipped"]
        done = by_id[made["run"]]
        assert done["final_test"] == TEST and done["agent"] == "llm"
        assert sorted(x.name for x in folder.iterdir()) == sorted(["index.json", done["file"]])
        if fmt == "atif":
            _harbor_validate(folder / done["file"])
        else:
            assert read_eval_log(str(folder / done["file"])).eval.run_id == made["run"]


def test_export_mistakes_are_one_line_and_leave_nothing(made: dict[str, Any], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (the CLI's own runner): each mistake is exit 2 and one line, nothing written."""
    from typer.testing import CliRunner

    from a2rl.cli import app

    env = {**{k: None for k in os.environ if k.startswith("A2RL_")},
           "A2RL_HOME": str(made["home"]), "A2RL_DB_URL": made["db"]}

    def cli(*args: str) -> Any:
        return CliRunner().invoke(app, ["export", *args], env=env)

    run, out = made["run"], tmp_path / "out"
    _one_line_error(cli(made["live"], "--format", "atif", "--out", str(out / "x.json")),
                    "not finished", "a2rl finish")
    _one_line_error(cli(run, "--format", "inspect", "--out", str(out / "x.txt")), ".eval", ".json")
    _one_line_error(cli(run, "--format", "pdf"), "--format")
    _one_line_error(cli(), "--fleet")
    _one_line_error(cli(run, "--fleet", FLEET), "one of them")
    _one_line_error(cli("--fleet", "f-nope"), "f-nope", "no runs")
    _one_line_error(cli("r-nope", "--format", "atif"), "r-nope", "does not exist")
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # as if not installed: imports fail
    _one_line_error(cli(run, "--format", "inspect", "--out", str(out / "x.eval")),
                    "needs inspect-ai", "pip install 'a2rl-bench[inspect]'")
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
