"""Run reports (`a2rl.analysis`) of runs made through the real server with known behaviour.

No real training: the "training" scripts name TRL trainers in their source (the route is read
from code and commands) and write a perturbed copy of the base as their checkpoint.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client

from a2rl.analysis import (
    SCHEMA_PATH,
    Report,
    build_report,
    compare,
    json_schema,
    render,
    render_csv,
    render_json,
    render_text,
)
from a2rl.analysis.render_md import SECTIONS
from a2rl.server import build_server, create_run, finish_run
from a2rl.settings import Settings
from a2rl.stats import NEWCOMBE_PAIRED_METHOD, paired_proportion_difference
from a2rl.store import Evaluation, Job, Run, Store, Submission, ToolCall

from .conftest import require, require_bwrap
from .helpers import text_of
from .test_grading_checks import save_perturbed

pytestmark = pytest.mark.timeout(600)

# The scripts write their checkpoint with the same helper the grading tests use, each run
# its own noise: two runs with byte-equal weights would be a copy, which the audit flags.


def _save(scale: float) -> str:
    return ("\n\n" + inspect.getsource(save_perturbed) + '\n\nif __name__ == "__main__":\n'
            f'    save_perturbed(Path("base_model"), Path(sys.argv[1]), {scale})\n')



HEAD = "from __future__ import annotations\n\nimport sys\nfrom pathlib import Path\n"
SFT = '''"""SFT with TRL; the test runs only the checkpoint-writing part."""
''' + HEAD + '''


def train(model, data, out):
    from trl import SFTConfig, SFTTrainer
    trainer = SFTTrainer(model=model, train_dataset=data, args=SFTConfig(output_dir=out))
    trainer.train()
''' + _save(0.3)
GRPO = '''"""GRPO with an exact-match reward; the test runs only the checkpoint-writing part."""
''' + HEAD + '''


def reward(completions, answer, **_):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def train(model, data, out):
    from trl import GRPOConfig, GRPOTrainer
    trainer = GRPOTrainer(model=model, reward_funcs=reward, train_dataset=data,
                          args=GRPOConfig(output_dir=out, num_generations=4))
    trainer.train()
''' + _save(0.25)
CRASH = '''import sys
for step, loss in enumerate([1.0, 0.9, 3.5, 42.0]):
    print(f"step {step} loss={loss}")
batch = {"input_ids": []}
print(batch["labels"])
'''


def line_of(source: str, needle: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


async def _command(c: Client, command: str) -> dict[str, Any]:
    r = (await c.call_tool("run_command", {"command": command, "wait_s": 60})).structured_content
    while r.get("status") == "running" or (r.get("job") or {}).get("state") == "running":
        r = (await c.call_tool("job_status", {"job_id": r.get("job_id") or r["job"]["id"],
                                              "wait_s": 60})).structured_content
    return r


async def _submit(c: Client, path: str, wait: bool = True) -> tuple[bool, str]:
    r = await c.call_tool("submit_checkpoint", {"path": path})
    if r.is_error:
        return False, text_of(r)
    sid = r.structured_content["submission_id"]
    for _ in range(20 if wait else 0):
        s = (await c.call_tool("get_score", {"submission_id": sid, "wait_s": 30}))
        if s.structured_content["status"] not in ("queued", "grading"):
            break
    return True, sid


async def _scenario(settings: Settings, store: Store, name: str) -> str:
    run = create_run(settings, store, task_id="arith", budget="30m", agent=f"fake-{name}",
                     seed=1).run
    server = build_server(settings, store, run_id=run.id, transport="memory")
    async with Client(server, mode="legacy") as c:
        if name == "sft":
            await c.call_tool("edit_file", {"path": "code/sft.py", "new_text": SFT})
            r = await _command(c, "python code/sft.py output/sft")
            assert (Path(run.workspace) / "output/sft/config.json").exists(), r
            assert (await _submit(c, "output/sft"))[0]
        elif name == "grpo":
            await c.call_tool("edit_file", {"path": "code/grpo.py", "new_text": GRPO})
            await _command(c, "python code/grpo.py output/grpo")
            assert (await _submit(c, "output/grpo", wait=False))[0]
        elif name == "copy":
            await _command(c, "cp -r base_model output/copy")
            ok, why = await _submit(c, "output/copy")
            assert not ok and "train before submitting" in why
        elif name == "crash":
            await c.call_tool("edit_file", {"path": "code/train.py", "new_text": CRASH})
            r = await _command(c, "python code/train.py")
            assert r.get("exit_code") or (r.get("job") or {}).get("exit_code"), r
        elif name == "idle":
            await c.call_tool("edit_file", {"path": "code/notes.md", "new_text": "todo\n"})
    finish_run(settings, store, run.id)
    return run.id


@pytest.fixture(scope="module")
def runs(a2rl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_bwrap()
    db = tmp_path_factory.mktemp("report") / "a2rl.db"
    settings = Settings(home=a2rl_home, db_url=f"sqlite:///{db}")
    store = Store(settings.database_url)
    ids: dict[str, str] = {}

    async def main() -> None:
        for name in ("sft", "grpo", "copy", "crash", "idle", "untouched"):
            ids[name] = await _scenario(settings, store, name)

    anyio.run(main)
    reports = {name: build_report(store, rid) for name, rid in ids.items()}
    yield {"store": store, "ids": ids, "reports": reports}
    store.close()


def _route(rep: Report) -> Any:
    assert len(rep.routes) >= 1, rep.routes
    return rep.routes[-1]


def test_sft_route_with_file_line(runs: dict[str, Any]) -> None:
    rep = runs["reports"]["sft"]
    route = _route(rep)
    assert route.route == "sft", route
    line = line_of(SFT, "from trl import SFTConfig, SFTTrainer")
    assert any(e.file == "code/sft.py" and e.line == line and "SFTTrainer" in e.text
               for e in route.evidence), route.evidence
    assert any(e.kind == "command" and "code/sft.py" in e.text for e in route.evidence)
    s = rep.summary
    assert s.submissions_valid == 1 and s.final_submission_id == route.submission_id
    assert s.final_test is not None and s.improvement is not None and s.baseline_test is not None
    iv = s.improvement  # paired over the arith test items, inside what is possible
    assert iv.method == NEWCOMBE_PAIRED_METHOD and iv.n_paired == 500
    assert -s.baseline_test <= iv.low <= iv.estimate <= iv.high <= 1 - s.baseline_test
    assert iv.estimate == pytest.approx(s.final_test - s.baseline_test)
    assert iv.within_noise == (iv.low <= 0 <= iv.high)
    assert "500 items paired by id" in render(rep, "md")
    assert s.final_provenance.get("checkpoint_hashes")
    assert len(rep.trajectory.points) == 1 and rep.trajectory.baseline == s.baseline_dev
    change = next(x for x in rep.code_history[0].changes if x.path == "code/sft.py")
    assert change.change == "added" and "+    from trl import SFTConfig, SFTTrainer" in change.diff
    # the task's own files are where the agent started, not code it added
    assert "TASK.md" in rep.code_history[0].files
    assert not [x for x in rep.code_history[0].changes if x.path == "TASK.md"]
    assert rep.metrics.valid_submission_rate == 1.0 and rep.metrics.time_to_first_valid_s
    assert rep.metrics.tool_calls_by_kind["edit_file"] == 1
    assert not [f for f in rep.failures if f.type != "diverged"], rep.failures


def test_grpo_route(runs: dict[str, Any]) -> None:
    route = _route(runs["reports"]["grpo"])
    assert route.route == "grpo", route
    line = line_of(GRPO, "from trl import GRPOConfig, GRPOTrainer")
    assert any(e.file == "code/grpo.py" and e.line == line for e in route.evidence)


def test_copy_of_base(runs: dict[str, Any]) -> None:
    rep = runs["reports"]["copy"]
    route = _route(rep)
    assert route.route == "copy_of_base"
    texts = [e.text for e in route.evidence]
    assert any("cp -r base_model output/copy" in t for t in texts), texts
    assert any("train before submitting" in t for t in texts), texts
    invalid = [f for f in rep.failures if f.type == "invalid_checkpoint"]
    assert invalid and "base weights" in invalid[0].message
    assert rep.summary.submissions_refused == 1 and rep.summary.submissions_valid == 0
    assert any(f.type == "no_submission" for f in rep.failures)
    # Evidence names the tool call it came from: the run_command of the job, the submission's.
    with runs["store"].session() as s:
        cmd = next(e for e in route.evidence if e.job_id)
        job = s.get(Job, cmd.job_id)
        assert job is not None and cmd.call_id is not None and cmd.call_id == job.tool_call_id
        assert s.get(ToolCall, cmd.call_id).tool == "run_command"  # type: ignore[union-attr]
        sub_ev = next(e for f in invalid for e in f.evidence if e.submission_id)
        sub = s.get(Submission, sub_ev.submission_id)
        assert sub is not None and sub_ev.call_id == sub.tool_call_id is not None
        assert s.get(ToolCall, sub_ev.call_id).tool == "submit_checkpoint"  # type: ignore[union-attr]


def test_crash_is_a_runtime_error_with_the_traceback(runs: dict[str, Any]) -> None:
    rep = runs["reports"]["crash"]
    crash = [f for f in rep.failures if f.type == "runtime_error"]
    assert len(crash) == 1, rep.failures
    assert crash[0].evidence[0].text == "KeyError: 'labels'"
    assert crash[0].evidence[0].kind == "log" and crash[0].evidence[0].line
    assert any(e.kind == "command" and "code/train.py" in e.text for e in crash[0].evidence)
    div = [f for f in rep.failures if f.type == "diverged"]
    assert div and "42" in div[0].message and "loss=42.0" in div[0].evidence[0].text


def test_untouched_run_reports_no_code_revision(runs: dict[str, Any]) -> None:
    """A run made and finished without a tool call: the task's files are no revision."""
    rep = runs["reports"]["untouched"]
    assert rep.metrics.tool_calls == 0 and rep.metrics.revisions == 0
    assert rep.code_history == []


def test_never_submits(runs: dict[str, Any]) -> None:
    rep = runs["reports"]["idle"]
    assert [f.type for f in rep.failures] == ["no_submission"]
    s = rep.summary  # no submission: no final score and no improvement (the harness's rule)
    assert rep.routes == [] and s.final_test is None and s.final_note == "no submission"
    assert s.improvement is None and s.improvement_note == "no improvement: no submission"
    assert s.baseline_test is not None and s.end_kind == "agent_finished" and s.result
    assert rep.metrics.valid_submission_rate is None
    md = render(rep, "md")
    assert "| final test | – (no submission) |" in md
    assert "| improvement | – (no submission) |" in md
    assert "| status | finished (agent finished" in md


def test_json_matches_the_committed_schema(runs: dict[str, Any]) -> None:
    committed = json.loads(SCHEMA_PATH.read_text())
    assert committed == json.loads(json.dumps(json_schema())), \
        "analysis/report.schema.json is stale: python -m a2rl.analysis.schema"
    for rep in runs["reports"].values():
        doc = json.loads(render(rep, "json"))
        jsonschema.validate(doc, committed)
        assert doc["schema_version"] == committed["$id"].rsplit("/", 1)[1]


def test_markdown_has_the_sections(runs: dict[str, Any]) -> None:
    for rep in runs["reports"].values():
        md = render(rep, "md")
        for section in SECTIONS:
            assert f"\n## {section}\n" in md, section
    md = render(runs["reports"]["sft"], "md")
    assert "**SFT**" in md and "```diff" in md


def test_the_cost_ledger_of_a_finished_run(runs: dict[str, Any]) -> None:
    """finish_run stored what the jobs used and how long the run's grading took; the driver
    part is unknown (no agent of ours drove it, so no transcript was read)."""
    led = runs["reports"]["sft"].ledger
    assert led is not None and led.jobs >= 1
    assert led.jobs_cpu_s is not None and led.jobs_cpu_s > 0.5, led  # a real SFT ran
    assert led.jobs_memory_peak_bytes is not None and led.jobs_memory_peak_bytes > 50 << 20
    assert led.evaluations >= 2 and led.grading_s > 0, led  # its dev submission and the test
    assert (led.cost_basis, led.cost_usd, led.input_tokens, led.gpu_s) == (
        "unknown", None, None, None)
    md = render(runs["reports"]["sft"], "md")
    ledger_md = md.split("\n## Cost ledger\n", 1)[1].split("\n## ", 1)[0]
    assert "CPU-seconds" in ledger_md and f"over {led.evaluations} evaluations" in ledger_md
    assert "| GPU | not measured |" in ledger_md and "| driver cost | unknown |" in ledger_md
    assert 'id="ledger"' in render(runs["reports"]["sft"], "html")


def test_html_is_self_contained(runs: dict[str, Any]) -> None:
    for rep in runs["reports"].values():
        page = render(rep, "html")
        assert not re.search(r"https?://", page)
        assert "<script" not in page and "<link" not in page and "src=" not in page
        assert 'id="score-plot"' in page and 'id="timeline-plot"' in page


def test_html_in_headless_chromium(runs: dict[str, Any], tmp_path: Path) -> None:
    page = render(runs["reports"]["sft"], "html")
    assert page.count("<svg") == 2 and 'class="point"' in page and 'class="job"' in page
    chromium = shutil.which("chromium") or ("/usr/bin/chromium"
                                            if Path("/usr/bin/chromium").exists() else None)
    require(chromium is not None, "chromium is not installed: apt-get install chromium")
    html = tmp_path / "report.html"
    html.write_text(page)
    png = tmp_path / "shot.png"
    p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'u'}",
                        f"--screenshot={png}", "--window-size=1200,2000", html.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert png.exists(), p.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000, len(data)


def test_compare_tabulates_the_runs(runs: dict[str, Any]) -> None:
    c = compare(runs["store"], task="arith")
    assert len(c.rows) == 5 and runs["ids"]["untouched"] not in {r.run_id for r in c.rows}
    routes = {r.agent: r.best_route for r in c.rows}
    assert routes["fake-sft"] == "sft" and routes["fake-grpo"] == "grpo"
    assert routes["fake-idle"] is None
    assert len(c.groups) == 5 and list(c.leaderboard) == ["arith"]
    assert render_csv(c).splitlines()[0].startswith("run_id,task,agent")
    assert json.loads(render_json(c))["rows"][0]["task"] == "arith"
    assert compare(runs["store"], agent="fake-sft").rows[0].agent == "fake-sft"
    # no GPU measured and no driver cost known: no gain per GPU-hour nor per dollar, not 0
    sft = next(r for r in c.rows if r.agent == "fake-sft")
    assert sft.improvement is not None and sft.cost_basis == "unknown"
    assert (sft.gpu_hours, sft.gain_per_gpu_hour, sft.gain_per_dollar) == (None, None, None)
    assert "gain/GPUh" in render_text(c) and "gain_per_dollar" in render_csv(c).splitlines()[0]


def test_report_of_10000_tool_calls_is_fast(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'big.db'}")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with store.session() as s:
        s.add(Run(id="big", task_id="arith", workspace=str(tmp_path), budget_s=36_000,
                  started_at=t0, deadline=t0 + timedelta(hours=10), ended_at=t0 + timedelta(
                      hours=10), status="finished", baseline_dev=0.1, baseline_test=0.1,
                  final_score=0.1))
        s.add_all(ToolCall(run_id="big", tool=("run_command", "read_file", "edit_file")[i % 3],
                           started_at=t0 + timedelta(seconds=3 * i), duration_ms=500,
                           is_error=i % 97 == 0) for i in range(10_000))
        s.add_all(Job(id=f"j{i}", run_id="big", command=f"python code/t{i}.py", state="exited",
                      exit_code=0, started_at=t0 + timedelta(seconds=300 * i),
                      ended_at=t0 + timedelta(seconds=300 * i + 100)) for i in range(100))
        s.add(Submission(id="s1", run_id="big", path="output/a", status="refused",
                         error="output/a does not exist", created_at=t0 + timedelta(hours=1)))
    start = time.perf_counter()
    rep = build_report(store, "big")
    html, md = render(rep, "html"), render(rep, "md")
    elapsed = time.perf_counter() - start
    store.close()
    assert rep.metrics.tool_calls == 10_000 and len(rep.timeline.tool_calls) == 10_000
    assert rep.timeline.idle_gaps  # the last 2 h have no call and no job
    assert html and md
    assert elapsed < 5.0, f"report of 10,000 tool calls took {elapsed:.2f}s"


def _eval_store(tmp_path: Path, base_items: list[dict[str, Any]],
                final_items: list[dict[str, Any]]) -> Store:
    """A finished arith run with a baseline and a final test evaluation, written by hand."""
    store = Store(f"sqlite:///{tmp_path / 'paired.db'}")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    base = sum(i["correct"] for i in base_items) / 10 if base_items else 0.2
    final = sum(i["correct"] for i in final_items) / 10 if final_items else 0.9
    with store.session() as s:
        s.add(Run(id="p", task_id="arith", workspace=str(tmp_path), budget_s=600, started_at=t0,
                  deadline=t0 + timedelta(minutes=10), status="finished", baseline_dev=base,
                  baseline_test=base, final_score=final, final_submission_id="s1"))
        s.add(Submission(id="s1", run_id="p", path="output/a", status="graded",
                         created_at=t0 + timedelta(minutes=1)))
        s.add(Evaluation(kind="baseline", split="test", score=base, n_items=10,
                         items=base_items))
        s.add(Evaluation(run_id="p", submission_id="s1", kind="submission", split="test",
                         score=final, n_items=10, items=final_items))
    return store


def test_paired_interval_from_stored_items(tmp_path: Path) -> None:
    """8 of 10 items turn correct, none turns wrong: Newcombe's paired interval over the items
    matched by id, inside [-0.2, 0.8]; the Wald interval of the old report reached past it."""
    base = [{"id": f"t{i}", "correct": i < 2} for i in range(10)]
    final = [{"id": f"t{i}", "correct": True} for i in reversed(range(10))]
    store = _eval_store(tmp_path, base, final)
    rep = build_report(store, "p")
    assert rep.summary.profile == "a2rl" and "| profile | a2rl |" in render(rep, "md")
    c = compare(store)
    store.close()
    iv = rep.summary.improvement
    assert iv is not None and iv.n_paired == 10 and rep.summary.improvement_note is None
    _, low, high = paired_proportion_difference([True] * 10, [i < 2 for i in range(10)])
    assert (iv.estimate, iv.low, iv.high) == (pytest.approx(0.8), low, high)
    assert iv.high <= 0.8 and iv.low > 0 and not iv.within_noise
    row = c.rows[0]
    assert (row.improvement_low, row.improvement_high, row.within_noise) == (low, high, False)
    assert f"[{low:+.3f},{high:+.3f}]" in render_text(c)


def test_no_per_item_results_means_no_interval_and_says_why(tmp_path: Path) -> None:
    """A baseline recorded without per-item results (an older a2rl): no number is made up."""
    final = [{"id": f"t{i}", "correct": True} for i in range(10)]
    store = _eval_store(tmp_path, [], final)
    rep = build_report(store, "p")
    c = compare(store)
    store.close()
    s = rep.summary
    assert s.improvement is None and s.improvement_note is not None
    assert "baseline test evaluation kept no per-item results" in s.improvement_note
    for fmt in ("md", "html"):
        assert "+0.800 (no interval: the baseline test evaluation" in render(rep, fmt)
    doc = json.loads(render(rep, "json"))
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    row = c.rows[0]
    assert row.improvement == pytest.approx(0.8) and row.improvement_low is None
    assert row.within_noise is None and row.improvement_note == s.improvement_note


def test_failure_types_from_records() -> None:
    """The failures the fake runs cannot produce cheaply, from hand-made records."""
    from a2rl.analysis.data import RunData
    from a2rl.analysis.failures import find_failures
    from a2rl.store import Evaluation

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    logs = {"oom": b"step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate\n",
            "nan": b"{'loss': 2.1}\n{'loss': 1.7}\n{'loss': nan}\n", "slow": b"step 1\n"}
    run = Run(id="r", task_id="arith", workspace="/w", budget_s=600, started_at=t0,
              deadline=t0 + timedelta(seconds=600), ended_at=t0 + timedelta(seconds=600),
              status="finished")
    jobs = [Job(id=k, run_id="r", command=f"python code/{k}.py", log_path=f"logs/{k}.log",
                log_blob_sha=k, state=state, exit_code=code, started_at=t0,
                ended_at=t0 + timedelta(seconds=end))
            for k, state, code, end in [("oom", "exited", 1, 50), ("nan", "exited", 0, 60),
                                        ("slow", "killed", None, 600), ("k9", "exited", 137, 9)]]
    subs = [Submission(id="s", run_id="r", path="output/a", status="failed",
                       created_at=t0 + timedelta(seconds=100))]
    trace = "Traceback (most recent call last):\n" + '  File "g.py", line 1, in f\n' * 40 + \
        "RuntimeError: vLLM engine died\n"
    evals = [Evaluation(run_id="r", submission_id="s", split="dev", status="failed",
                        error=trace, started_at=t0 + timedelta(seconds=101))]
    d = RunData(run=run, calls=[], jobs=jobs, submissions=subs, evaluations=evals, snapshots={},
                budget_events=[], revisions=0, baseline_test_n=None, blobs=logs)
    found = find_failures(d)
    got = {(f.type, f.job_id or f.submission_id) for f in found}
    grader = next(f for f in found if f.type == "grader_error")
    # the evidence is the error's end (the exception), not its first lines
    assert grader.evidence[0].text.endswith("RuntimeError: vLLM engine died")
    assert "vLLM engine died" in grader.message and len(grader.evidence[0].text) <= 310
    assert got == {("out_of_memory", "oom"), ("out_of_memory", "k9"), ("diverged", "nan"),
                   ("budget_kill", "slow"), ("grader_error", "s")}, got


def test_route_markers() -> None:
    from a2rl.analysis import classify

    def route(files: dict[str, str], cmds: list[str], **kw: Any) -> str:
        return classify("output/x", kw.get("error"), kw.get("near", False), 1e-9,
                        files, [("j", c) for c in cmds])[0]

    dpo = "from trl import DPOTrainer\nDPOTrainer(model=m)\n"
    loop = "loss = F.cross_entropy(logits, y)\nloss.backward()\nmodel.save_pretrained(o)\n"
    assert route({"code/d.py": dpo}, ["python code/d.py --out output/x"]) == "dpo"
    assert route({"code/l.py": loop}, ["python code/l.py output/x"]) == "sft"
    # a hand-written policy gradient: group-normalized advantages are GRPO, plain ones REINFORCE
    pg = "adv = r - baseline\nloss = -(logp * advantages).mean()\nloss.backward()\n"
    grouped = "advantages += [(r - m) / s for r in group]\n" + pg
    assert route({"code/g.py": grouped}, ["python code/g.py --out output/x"]) == "grpo"
    assert route({"code/p.py": pg}, ["python code/p.py --out output/x"]) == "rloo_reinforce"
    from a2rl.clients.reference import script  # the reference agent's online GRPO (level 3)

    assert route({"code/grpo_env.py": script("grpo_env.py")},
                 ["python code/grpo_env.py --init output/sft --out output/x"]) == "grpo"
    assert route({"code/n.py": "m.save_pretrained('output/x')\n"}, []) == "no_training"
    assert route({}, ["trl grpo --output_dir output/x"]) == "grpo"
    assert route({}, ["cp -r base_model output/x"]) == "copy_of_base"
    assert route({"code/d.py": dpo}, ["python code/d.py"], near=True) == "copy_of_base"
    assert route({"code/r.py": "RewardTrainer(model)\n"}, ["python code/r.py"]) == "reward_model"
    assert route({}, []) == "unknown"


@pytest.mark.parametrize("hostile", [
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "a`b", "``x``", "` lead",
    "trail `", "  both  ", "a | b", "line\nbreak\r\nand\rmore", "[x](javascript:alert(1))",
    "<!-- c -->", "&amp; &lt;", "*em* _u_ \\| ~~s~~ ![i](x)", "", "```"])
def test_markdown_helpers_render_agent_text_as_itself(hostile: str) -> None:
    """Each helper, rendered by a real CommonMark renderer, shows exactly the characters it
    was given (line breaks as spaces), in one element, with no markup of its own."""
    import html as html_lib

    from markdown_it import MarkdownIt

    from a2rl.analysis.md_escape import cell, code, fence, one_line, text

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    shown = one_line(hostile)
    span = md.render(f"- x {code(hostile)} y")
    assert re.fullmatch(r"<ul>\n<li>x <code>(.*)</code> y</li>\n</ul>\n", span, re.S), span
    inner = re.search(r"<code>(.*)</code>", span, re.S).group(1)  # type: ignore[union-attr]
    assert html_lib.unescape(inner) == (shown or " ")
    para = md.render(f"x {text(hostile)} y")
    assert para == f"<p>x {html_lib.escape(shown, quote=False)} y</p>\n", para
    table = md.render(f"| a | b |\n|---|---|\n| {cell(code(hostile))} | {cell(text(hostile))} |")
    cells = re.findall(r"<td>(.*?)</td>", table, re.S)
    assert len(cells) == 2, table
    assert html_lib.unescape(re.sub(r"</?code>", "", cells[0])) == (shown or " ")
    assert html_lib.unescape(cells[1]) == shown.strip()  # a cell's own spaces are trimmed
    block = md.render("\n".join(fence([hostile, "after"], "diff")) + "\noutside\n")
    assert block.count("<pre>") == 1 and block.endswith("<p>outside</p>\n"), block
