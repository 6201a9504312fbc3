"""A run's cost ledger: the driver's tokens and cost (reported, computed from the price table,
or unknown), its jobs' CPU seconds and peak memory, and its grading time; written when an
`a2rl run` ends, from a real run of the `llm` agent against the local fake OpenAI server."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from a2rl.clients.orchestrator import Orchestrator
from a2rl.settings import ModelPrice, Settings
from a2rl.store import Evaluation, Job, Run, RunConfig, Store, ToolCall, ledger

from . import fake_agents  # noqa: F401  (registers the test agents)
from .conftest import require_bwrap
from .fake_openai import Call, FakeOpenAI, Step

pytestmark = pytest.mark.timeout(240)

PRICE = ModelPrice(input=2.0, output=8.0, cached_input=0.5)
BURN = ("python3 -c 'import time\nt = time.process_time()\n"
        "while time.process_time() - t < 0.6: pass'")


def usage(**kw: object) -> ledger.DriverUsage:
    return ledger.DriverUsage(**{"input_tokens": 1000, "output_tokens": 100,
                                 "cached_tokens": 400, "source": "test", **kw})


def test_cost_basis() -> None:
    prices = {"gpt-x": PRICE}
    cost, basis, note = ledger.cost_of(usage(cost_usd=0.25), "gpt-x", prices)
    assert (cost, basis) == (0.25, "reported") and "test" in note
    # 600 uncached at $2, 400 cached at $0.5, 100 out at $8 per million
    cost, basis, note = ledger.cost_of(usage(), "openai/gpt-x", prices)
    assert basis == "computed" and cost == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    assert "prices['gpt-x']" in note
    # an agent's $0 for tokens it used is no price: the table's, else unknown
    assert ledger.cost_of(usage(cost_usd=0.0), "gpt-x", prices)[1] == "computed"
    cost, basis, note = ledger.cost_of(usage(cost_usd=0.0), "other", prices)
    assert (cost, basis) == (None, "unknown") and "reported $0" in note
    assert ledger.cost_of(usage(), None, prices)[:2] == (None, "unknown")
    fields = ledger.driver_fields(None, "gpt-x", prices)
    assert fields["cost_basis"] == "unknown" and fields["input_tokens"] is None


def test_resource_totals_from_rows() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [Job(id="a", run_id="r", command="x", log_path="l", cpu_s=1.5,
                memory_peak_bytes=100),
            Job(id="b", run_id="r", command="y", log_path="l", cpu_s=0.5,
                memory_peak_bytes=300),
            Job(id="c", run_id="r", command="z", log_path="l")]  # an older row: not measured
    evals = [Evaluation(run_id="r", split="dev", kind="submission", started_at=t0,
                        ended_at=t0 + timedelta(seconds=12)),
             Evaluation(run_id="r", split="test", kind="final", started_at=t0,
                        ended_at=t0 + timedelta(seconds=3.5)),
             Evaluation(run_id="r", split="dev", kind="baseline", started_at=t0,
                        ended_at=t0 + timedelta(seconds=100))]  # the base model's: not the run's
    f = ledger.resource_fields(jobs, evals, None)
    assert (f["jobs"], f["jobs_cpu_s"], f["jobs_memory_peak_bytes"]) == (3, 2.0, 300)
    assert (f["gpu_s"], f["gpu_memory_peak_bytes"]) == (None, None)
    assert (f["grading_s"], f["evaluations"]) == (15.5, 2)
    assert (f["validations"], f["validation_cpu_s"]) == (0, None)
    checks = [{"outcome": "refused", "cpu_s": 0.75}, {"outcome": "queued", "cpu_s": 1.25},
              {"outcome": "checking"}]  # a check whose server stopped before it was closed
    f = ledger.resource_fields(jobs, evals, None, checks)
    assert (f["validations"], f["validation_cpu_s"]) == (3, 2.0)


def _llm_run(settings: Settings, store: Store, cost: float | None,
             steps: list[Step] | None = None, **limits: float) -> tuple[Run, FakeOpenAI]:
    require_bwrap()
    steps = steps or [Call("run_command", {"command": BURN, "wait_s": 30}), "done"]
    with FakeOpenAI(steps, cost=cost) as fake:
        summary = Orchestrator(settings, store).run(RunConfig(
            task_id="arith", agent="llm", driver_model="vendor/fake-model", budget="5m",
            agent_options={"llm_base_url": fake.base_url}, **limits))
    assert not fake.errors, fake.errors[0]
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run is not None
    return run, fake


def test_an_llm_run_ledger_priced_by_the_table(settings: Settings, store: Store) -> None:
    settings = settings.updated({"prices": {"fake-model": PRICE}})
    run, fake = _llm_run(settings, store, cost=None)
    row = ledger.stored(store, run.id)
    assert row is not None
    sent_in = sum(u["prompt_tokens"] for u in fake.usages)
    sent_out = sum(u["completion_tokens"] for u in fake.usages)
    assert len(fake.usages) == 2 and sent_in > 0
    assert (row.input_tokens, row.output_tokens, row.cached_tokens) == (sent_in, sent_out, 0)
    assert row.cost_basis == "computed"
    assert row.cost_usd == pytest.approx((sent_in * 2 + sent_out * 8) / 1e6)
    assert row.usage_source == "llm response events (2)"
    # its one job, measured by the kernel, and no grading of its own (no submission)
    assert row.jobs == 1 and row.jobs_cpu_s is not None and row.jobs_cpu_s >= 0.5
    assert row.jobs_memory_peak_bytes is not None and row.jobs_memory_peak_bytes > 0
    assert (row.evaluations, row.grading_s) == (0, 0.0)
    _shown(settings, store, run, f"{sent_in:,} in (0 cached), {sent_out:,} out",
           f"${row.cost_usd:.4f} (computed: price table prices['fake-model']")


def _shown(settings: Settings, store: Store, run: Run, tokens: str, cost: str) -> None:
    """`a2rl show` (text and JSON), the viewer's run page and `a2rl compare` show it."""
    from starlette.testclient import TestClient
    from typer.testing import CliRunner

    from a2rl.analysis import compare
    from a2rl.analysis.web import create_app
    from a2rl.cli import app

    env = {"A2RL_HOME": str(settings.home), "A2RL_DB_URL": settings.db_url, "COLUMNS": "200"}
    out = CliRunner().invoke(app, ["show", run.id], env=env)
    assert out.exit_code == 0, out.output
    block = out.output.split("cost ledger\n", 1)[1]
    assert tokens in block and cost in block and "1: " in block, block
    out = CliRunner().invoke(app, ["show", run.id, "--json"], env=env)
    doc = json.loads(out.output)
    assert doc["ledger"]["input_tokens"] == ledger.stored(
        store, run.id).input_tokens  # type: ignore[union-attr]
    (job,) = doc["job_list"]  # each job's own account too
    assert job["cpu_s"] >= 0.5 and job["memory_peak_bytes"] > 0, job
    page = TestClient(create_app(settings.database_url)).get(f"/run/{run.id}").text
    assert 'id="ledger"' in page and tokens in page
    row = compare(store, run_ids=[run.id]).rows[0]
    assert row.cost_usd == ledger.stored(store, run.id).cost_usd  # type: ignore[union-attr]
    assert row.gain_per_dollar is None  # no final submission: no improvement to divide


def test_an_llm_run_ledger_with_the_endpoints_cost(settings: Settings, store: Store) -> None:
    run, fake = _llm_run(settings, store, cost=0.0125)  # no price table: the endpoint's word
    row = ledger.stored(store, run.id)
    assert row is not None and row.cost_basis == "reported"
    assert row.cost_usd == pytest.approx(0.0125 * len(fake.usages))
    _shown(settings, store, run, f"{row.input_tokens:,} in", f"${row.cost_usd:.4f} (reported:")


def test_gains_and_lines() -> None:
    from a2rl.analysis.ledger_view import gain_per, gpu_hours, ledger_rows, size
    from a2rl.analysis.schema import LedgerSection

    assert gain_per(0.12, 0.5) == pytest.approx(0.24)
    assert [gain_per(None, 1.0), gain_per(0.1, None), gain_per(0.1, 0.0)] == [None] * 3
    s = LedgerSection(input_tokens=1200, output_tokens=30, cached_tokens=200, cost_usd=0.01,
                      cost_basis="computed", cost_note="price table", jobs=2,
                      jobs_cpu_s=12.25, jobs_memory_peak_bytes=3 << 29, gpu_s=1800.0,
                      gpu_memory_peak_bytes=5 << 30, grading_s=42.0, evaluations=3,
                      validations=4, validation_cpu_s=3.25)
    assert gpu_hours(s) == 0.5 and gpu_hours(None) is None
    rows = dict(ledger_rows(s))
    assert rows["driver tokens"] == "1,200 in (200 cached), 30 out"
    assert rows["driver cost"] == "$0.0100 (computed: price table)"
    assert rows["jobs"] == "2: 12.2 CPU-seconds, peak memory 1.5 GiB"
    assert rows["GPU"] == "0.500 GPU-hours, peak 5.0 GiB"
    assert rows["grading"] == "42s over 3 evaluations"
    assert rows["submission checks"] == "4: 3.2 CPU-seconds"
    assert dict(ledger_rows(LedgerSection()))["submission checks"] == "0: not measured"
    assert size(None) == "–" and size(512) == "512 B" and size(1536) == "1.5 KiB"
    assert ledger_rows(None)[0][0] == "ledger"


def _stopped_by_a_limit(store: Store, run: Run, words: str) -> None:
    assert run.agent_status == "budget" and run.end_kind == "budget_exhausted", run
    assert (run.end_reason or "").startswith("budget exhausted (spending limit: "), run
    assert words in (run.end_reason or ""), run.end_reason


def test_the_llm_agent_stops_at_max_tokens(settings: Settings, store: Store) -> None:
    """Past --max-tokens after its first response, the loop runs that response's call and
    asks for nothing more; the run ends as its budget's end, saying which limit."""
    steps: list[Step] = [Call("budget_status") for _ in range(6)] + ["done"]
    run, fake = _llm_run(settings, store, None, steps, max_tokens=1)
    assert len(fake.requests) == 1 and len(fake.issued) == 1
    _stopped_by_a_limit(store, run, "--max-tokens 1")
    with store.session() as s:
        assert len(s.exec(select(ToolCall).where(ToolCall.run_id == run.id)).all()) == 1
    stop = json.loads(store.get_blob(run.agent_transcript_sha).splitlines()[-1])
    assert stop["reason"] == "spending_limit" and "--max-tokens" in stop["note"], stop


def test_the_llm_agent_stops_at_max_cost(settings: Settings, store: Store) -> None:
    """The endpoint's reported cost, $0.01 a response: past $0.025 after the third."""
    steps: list[Step] = [Call("budget_status") for _ in range(6)] + ["done"]
    run, fake = _llm_run(settings, store, 0.01, steps, max_cost=0.025)
    assert len(fake.requests) == 3
    _stopped_by_a_limit(store, run, "--max-cost $0.025")
    row = ledger.stored(store, run.id)
    assert row is not None and row.cost_usd == pytest.approx(0.03)


def test_a_cli_agent_is_stopped_when_its_streamed_usage_passes_max_tokens(
        settings: Settings, store: Store) -> None:
    """A process agent streaming Claude Code's stream-json (1,050 tokens every 0.2 s, for
    ever) is stopped by the orchestrator within a poll of passing --max-tokens 3000."""
    require_bwrap()
    started = time.monotonic()
    summary = Orchestrator(settings, store).run(RunConfig(
        task_id="arith", agent="test-spends", budget="5m", max_tokens=3000))
    assert time.monotonic() - started < 120
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run is not None
    _stopped_by_a_limit(store, run, "--max-tokens 3,000")
    row = ledger.stored(store, run.id)
    assert row is not None and row.usage_source is not None
    assert row.input_tokens is not None and 3000 <= row.input_tokens + row.output_tokens < 9000


def test_spend_limits() -> None:
    free = ledger.SpendLimit()
    assert not free.any and free.passed(usage()) is None
    tokens = ledger.SpendLimit(max_tokens=1100)
    assert tokens.passed(usage()) == ("spending limit: 1,100 driver tokens used, --max-tokens "
                                      "1,100")
    assert tokens.passed(usage(output_tokens=99)) is None and tokens.passed(None) is None
    priced = ledger.SpendLimit(max_cost_usd=0.002, price=PRICE)  # usage() costs $0.0022
    assert "$0.0022 of driver cost, --max-cost $0.002" in (priced.passed(usage()) or "")
    assert priced.passed(usage(output_tokens=50)) is None  # $0.0018
    assert priced.passed(usage(cost_usd=0.001)) is None  # the agent's own word first
    unpriced = ledger.SpendLimit(max_cost_usd=0.002)
    assert unpriced.passed(usage()) is None and unpriced.passed(usage(cost_usd=0.5))


def test_bad_limits_are_one_line_errors(settings: Settings) -> None:
    from typer.testing import CliRunner

    from a2rl.cli import app

    env = {"A2RL_HOME": str(settings.home), "A2RL_DB_URL": settings.db_url, "COLUMNS": "200"}
    for flag, value in (("--max-cost", "0"), ("--max-tokens", "-5")):
        out = CliRunner().invoke(app, ["run", "--agent", "llm", "--model", "m", flag, value,
                                       "--llm-base-url", "http://127.0.0.1:9/v1"], env=env)
        assert out.exit_code == 2 and "Traceback" not in out.output, out.output
        assert flag in out.output and "greater than 0" in out.output, out.output
