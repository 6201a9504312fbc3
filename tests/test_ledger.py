"""A run's cost ledger: the driver's tokens and cost (reported, computed from the price table,
or unknown), its jobs' CPU seconds and peak memory, and its grading time; written when an
`a2rl run` ends, from a real run of the `llm` agent against the local fake OpenAI server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2rl.clients.orchestrator import Orchestrator
from a2rl.settings import ModelPrice, Settings
from a2rl.store import Evaluation, Job, Run, RunConfig, Store, ledger

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
    assert "model_prices['gpt-x']" in note
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


def _llm_run(settings: Settings, store: Store, cost: float | None) -> tuple[Run, FakeOpenAI]:
    require_bwrap()
    steps: list[Step] = [Call("run_command", {"command": BURN, "wait_s": 30}), "done"]
    with FakeOpenAI(steps, cost=cost) as fake:
        summary = Orchestrator(settings, store).run(RunConfig(
            task_id="arith", agent="llm", driver_model="vendor/fake-model", budget="5m",
            agent_options={"llm_base_url": fake.base_url}))
    assert not fake.errors, fake.errors[0]
    with store.session() as s:
        run = s.get(Run, summary.run_id)
    assert run is not None
    return run, fake


def test_an_llm_run_ledger_priced_by_the_table(settings: Settings, store: Store) -> None:
    settings = settings.model_copy(update={"model_prices": {"fake-model": PRICE}})
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


def test_an_llm_run_ledger_with_the_endpoints_cost(settings: Settings, store: Store) -> None:
    run, fake = _llm_run(settings, store, cost=0.0125)  # no price table: the endpoint's word
    row = ledger.stored(store, run.id)
    assert row is not None and row.cost_basis == "reported"
    assert row.cost_usd == pytest.approx(0.0125 * len(fake.usages))
