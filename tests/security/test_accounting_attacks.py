"""Attacks on the accounting of work done for a run (issue 43): everything the server does for
a run is counted to it, and no run can take the grader's work or another run's evaluation.

- Submission checks: refused submissions of an unchanged base copy, as fast as the tools
  answer, under `--max-submissions 1` (199 in 120 s cost 83 CPU-seconds that no budget saw);
  each is counted with the CPU the kernel measured, and a per-run rate refuses the flood.
- A serving process whose agent disconnects while it grades another run's request: the
  request is queued again at once, with its attempt given back, never failed or leased to a
  dead process for 12 minutes.
- DeepSearchQA: a dictionary sweep of the sandbox's search learns nothing from how many
  results were withheld, and the demonstrations in the workspace carry no hidden answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.server import create_run, finish_run
from a2rl.server.app import RunRegistry
from a2rl.settings import Settings
from a2rl.store import (
    BudgetEvent,
    BudgetEventKind,
    Evaluation,
    GradeRequest,
    GradeState,
    Run,
    Store,
    Submission,
    SubmissionStatus,
    ToolCall,
    ledger,
)
from a2rl.tasks.deepsearchqa import data

from ..conftest import backend_settings, require_bwrap
from ..helpers import wait_for, with_task_options
from ..test_deepsearchqa import CORPUS, FIXTURE
from .conftest import open_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

A2RL = str(Path(sys.executable).parent / "a2rl")


def _checks(store: Store, run_id: str) -> list[dict]:
    with store.session() as s:
        return [e.detail for e in s.exec(select(BudgetEvent).where(
            BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.validation)
            .order_by(BudgetEvent.id))]  # type: ignore[arg-type]


async def test_refused_submissions_are_counted_with_their_cpu_and_rate_limited(
        settings: Settings, store: Store) -> None:
    """An unchanged copy of the base model submitted in a loop under `--max-submissions 1`:
    every check is refused and never counts against the limit, as before; now each one the
    rate lets through is a `validation` event of the run with the CPU the kernel counted for
    its copy and its validating process, the fourth call within a minute is refused at once
    with the seconds to wait (nothing copied, nothing loaded), and the run's ledger sums the
    checks."""
    local = backend_settings(settings, "local").updated(
        {"grading.submission_checks_per_minute": 3})
    async for agent in open_agent(local, store, max_submissions=1):
        ws = Path(agent.run.workspace)
        shutil.copytree(ws / "base_model", ws / "output" / "base")
        for _ in range(3):
            err = await agent.refused("submit_checkpoint", path="output/base")
            assert "these weights are the base model's" in err, err
        began = time.monotonic()
        for _ in range(5):
            err = await agent.refused("submit_checkpoint", path="output/base")
            assert "at most 3 may be (grading.submission_checks_per_minute)" in err, err
            assert "submit again in" in err and len(err.strip().splitlines()) == 1, err
        assert time.monotonic() - began < 10  # refused unchecked: no copy, no loading
        checks = _checks(store, agent.run.id)
        assert [c["outcome"] for c in checks] == ["refused"] * 3  # the five not checked
        for c in checks:
            assert c["validator_cpu_s"] is not None and c["validator_cpu_s"] > 0, c
            assert c["server_cpu_s"] >= 0
            assert c["cpu_s"] == pytest.approx(c["server_cpu_s"] + c["validator_cpu_s"],
                                               abs=0.002)
        status = await agent.ok("budget_status")
        assert status["submissions_used"] == 0 and status["submission_checks_per_minute"] == 3
        copies = local.home_dir / "checkpoints" / agent.run.id
        assert not copies.exists() or not any(copies.iterdir())
        run_id = agent.run.id
    row = ledger.stored(store, run_id)
    assert row is not None and row.validations == 3
    assert row.validation_cpu_s == pytest.approx(sum(c["cpu_s"] for c in checks), abs=0.01)


def _victim(store: Store, model: Path) -> int:
    """Another run's submission, queued with a loadable model as its stored copy (the base
    model's files: what is evaluated does not matter, only that an evaluation starts); its
    run needs no sandbox, only its request is graded, by whichever process pumps."""
    with store.session() as s:
        s.add(Run(id="r-victim", task_id="arith", workspace="/nonexistent/workspace",
                  budget_s=600))
        s.add(Submission(id="s-v", run_id="r-victim", path="output/v", checkpoint_dir=str(model),
                         status=SubmissionStatus.queued))
        req = GradeRequest(run_id="r-victim", submission_id="s-v", split="dev")
        s.add(req)
        s.flush()
        assert req.id is not None
        return req.id


def _request(store: Store, req_id: int) -> GradeRequest:
    with store.session() as s:
        req = s.get(GradeRequest, req_id)
        assert req is not None
        return req


def test_a_disconnecting_agent_gives_back_the_evaluation_it_was_grading(
        settings: Settings, store: Store) -> None:
    """The attacker's `a2rl serve --run` (a real process over stdio) pumps the queue, so it
    takes the victim run's request and starts evaluating it; its agent then disconnects. The
    request is queued again at once, its attempt given back, its submission queued, and no
    failed evaluation is recorded (before: leased to the dead process for 12 minutes, or
    failed by the kill at exit)."""
    require_bwrap()
    local = backend_settings(settings, "local")
    attacker = create_run(local, store, task_id="arith", budget="30m", baseline=False).run
    req_id = _victim(store, Path(attacker.workspace) / "base_model")
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    env.update(A2RL_HOME=str(local.home_dir), A2RL_DB_URL=local.database_url)
    err_path = local.home_dir / "serve.err"
    with err_path.open("wb") as err_file:
        proc = subprocess.Popen([A2RL, "serve", "--run", attacker.id], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err_file)
    try:
        mine = f":{proc.pid}:"

        def grading_it() -> bool:
            req = _request(store, req_id)
            return req.state == GradeState.leased and mine in (req.lease_owner or "")

        assert wait_for(grading_it, 120), _request(store, req_id)
        assert proc.stdin is not None
        proc.stdin.close()  # the agent disconnects mid-evaluation
        assert proc.wait(timeout=60) == 0, err_path.read_text(errors="replace")[-2000:]
        req = _request(store, req_id)
        assert req.state == GradeState.queued and req.lease_owner is None, req
        assert req.attempts == 0  # its end was the server's, not the checkpoint's
        with store.session() as s:
            assert s.exec(select(Evaluation).where(Evaluation.run_id == "r-victim")).all() == []
            sub = s.get(Submission, "s-v")
            assert sub is not None and sub.status == SubmissionStatus.queued
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with store.session() as s:  # not graded here: the test is the hand-back
            req = s.get(GradeRequest, req_id)
            assert req is not None
            req.state = GradeState.done
            s.add(req)
        finish_run(local, store, attacker.id)


#: A page a real corpus could hold: a train question's search ("first crewed moon landing")
#: reaches it, and it carries a test answer (Triton)
MIXED_PAGE = {"id": "d99", "title": "Moon trivia", "text": (
    "The first crewed Moon landing took place in 1969; Triton is the largest moon of Neptune.")}
SWEEP = ["triton", "melville", "danube", "zebra", "quokka", "santiago", "saturn", "moon"]


def test_a_search_sweep_learns_nothing_from_withheld_counts(
        settings: Settings, store: Store, tmp_path: Path) -> None:
    """A dictionary sweep from inside the sandbox, one word per search over the raw socket:
    the answers carry the results only (no count of what was withheld), and a hidden answer
    ("triton", "melville", "danube") is answered exactly as a word of no page ("zebra"). The
    run's record keeps the counts. The workspace's demonstrations, built from the same
    search, carry no hidden answer although a page the train question finds has one."""
    require_bwrap()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(CORPUS.read_text() + json.dumps(MIXED_PAGE) + "\n")
    dsqa = with_task_options(backend_settings(settings, "local").updated(
        {"base_model": "tiny-llama"}), "deepsearchqa", data_dir=str(FIXTURE),
        corpus=str(corpus))
    created = create_run(dsqa, store, task_id="deepsearchqa", baseline=False)
    workspace = Path(created.run.workspace)
    demos = (workspace / "data" / "train.jsonl").read_text().lower()
    assert "crewed moon landing" in demos and "moon trivia" not in demos
    hidden = [r["answer"].lower() for split in ("dev", "test")
              for r in data.split_rows(data.load_rows(dsqa), split)]
    assert "triton" in hidden and not [a for a in hidden if a in demos]
    registry = RunRegistry(dsqa, store)
    rt = registry.get(created.run.id)
    sandbox = rt.sandbox.get()
    probe = (
        "import json, os, socket\n"
        "path = os.path.join(os.environ.get('A2RL_SERVICES_DIR', '../services'), "
        "'search.sock')\n"
        f"for word in {SWEEP!r}:\n"
        "    with socket.socket(socket.AF_UNIX) as s:\n"
        "        s.connect(path)\n"
        "        s.sendall((json.dumps({'query': word, 'k': 5}) + '\\n').encode())\n"
        "        data = b''\n"
        "        while not data.endswith(b'\\n'):\n"
        "            data += s.recv(65536)\n"
        "    print('ANSWER', word, data.decode().strip())\n")
    (workspace / "code" / "sweep.py").write_text(probe)
    try:
        sandbox.spawn("sweep", f"{sys.executable} code/sweep.py", "logs/sweep.log")
        job = sandbox.wait("sweep", 60)
        log = (rt.job_logs.folder / "sweep.log").read_text()
        assert job.exit_code == 0, log
        answers = {line.split(" ", 2)[1]: json.loads(line.split(" ", 2)[2])
                   for line in log.splitlines() if line.startswith("ANSWER ")}
        assert set(answers) == set(SWEEP), log
        for answer in answers.values():
            assert answer["ok"] and set(answer["result"]) == {"backend", "results"}, answer
            assert "withheld" not in json.dumps(answer), answer
        for word in ("triton", "melville", "danube"):
            assert answers[word] == answers["zebra"], (word, answers[word])
        assert answers["saturn"]["result"]["results"]  # a train answer is found
        moon = answers["moon"]["result"]["results"]
        assert moon and all("triton" not in json.dumps(r).lower() for r in moon)
        with store.session() as s:
            rows = s.exec(select(ToolCall).where(ToolCall.run_id == created.run.id,
                                                 ToolCall.tool == "service.search")).all()
        recorded = {r.arguments["query"]: r.result_summary for r in rows}
        assert '"recorded_only": {"withheld": 2}' in recorded["triton"], recorded["triton"]
        assert '"recorded_only": {"withheld": 0}' in recorded["zebra"]
    finally:
        sandbox.stop()
        for host in registry._services.get(created.run.id, []):
            host.stop()
        finish_run(dsqa, store, created.run.id)

