"""A run's cost ledger: what its driver model used and cost, what its jobs and its sandbox
used, and how long its grading took (the `Ledger` table, one row per run).

Who writes which part, and why in parts:
- the driver model's tokens and cost: the orchestrator (`a2rl run`), from the agent's
  transcript as the agent's connector reads it (`Connector.transcript_usage`), when the agent
  has stopped. The store cannot read transcripts (each agent's format is its connector's), so
  it takes the totals (`DriverUsage`); a run of an agent the user started (`a2rl create`) has
  no transcript, and its driver part stays unknown.
- the rest (`resources`): `finish_run`, once the sandbox is stopped and the run's last
  evaluation is done, from the job rows, the run's evaluations, its submissions' checks (its
  `validation` budget events: the server's work for it outside its sandbox) and what the
  sandbox's counters said (`SandboxUsage`).

A cost is `reported` when the agent states it (Claude Code's result event, an endpoint's
`usage.cost` in the `llm` loop), `computed` from the price table
(`Settings.prices`) for the driver model otherwise, else `unknown`. A reported cost of 0
for a non-zero usage is no report: agents print 0 for a model whose price they do not know.
Pure functions here, but for `record` and `stored`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlmodel import select

from a2rl.settings import ModelPrice

from .db import Store
from .models import BudgetEvent, Evaluation, Job, Ledger, aware, utcnow
from .status import BudgetEventKind, EvaluationKind

CostBasis = Literal["reported", "computed", "unknown"]


class DriverUsage(BaseModel):
    """The driver model's totals as a transcript states them (a connector's `Usage`):
    input tokens with the cached ones, output tokens, the cached part (read, written) and
    the cost the agent reported."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    source: str

    @property
    def tokens(self) -> int:
        """What `--max-tokens` counts: input (cached included) plus output."""
        return self.input_tokens + self.output_tokens


class SandboxUsage(BaseModel):
    """What a run's sandbox counted for its jobs' group (a cgroup, a container): CPU seconds
    and peak memory, summed over the sandbox's incarnations (a supervisor restarted gets a
    fresh group); `source` names the counters."""

    cpu_s: float | None = None
    memory_peak_bytes: int | None = None
    source: str


def price_for(prices: dict[str, ModelPrice], model: str | None) -> tuple[str, ModelPrice] | None:
    """The price table's entry for a driver model: by its name as given, else by the part
    after its last `/` (`openai/gpt-4o` finds `gpt-4o`); None when the table has neither."""
    if not model:
        return None
    for name in (model, model.rsplit("/", 1)[-1]):
        if name in prices:
            return name, prices[name]
    return None


def computed_cost(usage: DriverUsage, price: ModelPrice) -> float:
    """USD for `usage` at `price`: uncached input (cache writes at the input price), cached
    input at `cached_input` (default the input price), output at `output`."""
    cached = min(usage.cached_tokens, usage.input_tokens)
    cached_price = price.input if price.cached_input is None else price.cached_input
    return ((usage.input_tokens - cached) * price.input + cached * cached_price
            + usage.output_tokens * price.output) / 1e6


def cost_of(usage: DriverUsage, model: str | None, prices: dict[str, ModelPrice]
            ) -> tuple[float | None, CostBasis, str]:
    """(USD, basis, note): reported by the agent, else computed from the price table, else
    unknown; the note says from what."""
    reported = usage.cost_usd
    if reported is not None and (reported > 0 or usage.tokens == 0):
        return reported, "reported", f"reported by the agent ({usage.source})"
    found = price_for(prices, model)
    if found is not None:
        name, price = found
        cached = price.input if price.cached_input is None else price.cached_input
        return computed_cost(usage, price), "computed", (
            f"price table prices[{name!r}]: ${price.input:g} in, ${cached:g} cached in, "
            f"${price.output:g} out per million tokens")
    why = ("the agent reported $0 (its price for the model is unknown)"
           if reported == 0 else "the agent reports no cost")
    return None, "unknown", f"{why}, and prices has no price for {model or 'the model'}"


def driver_fields(usage: DriverUsage | None, model: str | None,
                  prices: dict[str, ModelPrice]) -> dict[str, Any]:
    """The ledger's driver columns for `usage` (None: the transcript states none)."""
    if usage is None:
        return {"input_tokens": None, "output_tokens": None, "cached_tokens": None,
                "cache_write_tokens": None, "usage_source": None, "cost_usd": None,
                "cost_basis": "unknown", "cost_note": "the agent's transcript states no usage"}
    cost, basis, note = cost_of(usage, model, prices)
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "usage_source": usage.source, "cost_usd": cost, "cost_basis": basis,
            "cost_note": note}


def _wall_s(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (aware(end) - aware(start)).total_seconds())  # type: ignore[operator]


def resource_fields(jobs: list[Job], evaluations: list[Evaluation],
                    sandbox: SandboxUsage | None,
                    validations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ledger's columns that are not the driver's: the jobs summed (a total is null when
    no job measured it), the sandbox's counters, the run's own evaluations' wall time, and
    its submissions' checks (`validations`: the details of its `validation` budget events,
    refused submissions' included) with the CPU they took."""
    def total(values: list[Any]) -> Any:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    def peak(values: list[Any]) -> Any:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    own = [e for e in evaluations if e.kind != EvaluationKind.baseline]
    checks = validations or []
    checks_cpu = total([v.get("cpu_s") for v in checks])
    return {
        "jobs": len(jobs),
        "jobs_cpu_s": total([j.cpu_s for j in jobs]),
        "jobs_memory_peak_bytes": peak([j.memory_peak_bytes for j in jobs]),
        "gpu_s": total([j.gpu_s for j in jobs]),
        "gpu_memory_peak_bytes": peak([j.gpu_memory_peak_bytes for j in jobs]),
        "sandbox_cpu_s": sandbox.cpu_s if sandbox else None,
        "sandbox_memory_peak_bytes": sandbox.memory_peak_bytes if sandbox else None,
        "sandbox_source": sandbox.source if sandbox else None,
        "grading_s": round(sum(_wall_s(e.started_at, e.ended_at) for e in own), 3),
        "evaluations": len(own),
        "validations": len(checks),
        "validation_cpu_s": None if checks_cpu is None else round(checks_cpu, 3),
    }


def run_resources(store: Store, run_id: str, sandbox: SandboxUsage | None) -> dict[str, Any]:
    """`resource_fields` of the run's rows in the store."""
    with store.session() as s:
        jobs = list(s.exec(select(Job).where(Job.run_id == run_id)).all())
        evals = list(s.exec(select(Evaluation).where(Evaluation.run_id == run_id)).all())
        checks = [e.detail or {} for e in s.exec(select(BudgetEvent).where(
            BudgetEvent.run_id == run_id, BudgetEvent.kind == BudgetEventKind.validation))]
    return resource_fields(jobs, evals, sandbox, checks)


def record(store: Store, run_id: str, fields: dict[str, Any]) -> Ledger:
    """Write `fields` into the run's ledger row (made when missing); the others are kept."""
    known = set(Ledger.model_fields) - {"run_id", "computed_at"}
    if unknown := set(fields) - known:
        raise ValueError(f"not ledger fields: {sorted(unknown)}")
    with store.session() as s:
        row = s.get(Ledger, run_id) or Ledger(run_id=run_id)
        for key, value in fields.items():
            setattr(row, key, value)
        row.computed_at = utcnow()
        s.add(row)
        s.flush()
        return Ledger.model_validate(row.model_dump())


def stored(store: Store, run_id: str) -> Ledger | None:
    """The run's stored ledger, or None (a run not finalized yet, or one from before v7)."""
    with store.session() as s:
        row = s.get(Ledger, run_id)
        return Ledger.model_validate(row.model_dump()) if row is not None else None


class SpendLimit(BaseModel):
    """A run's spending limits on its driver model (`a2rl run --max-cost/--max-tokens`) and
    the price that turns tokens into dollars where the agent reports no cost. The `llm` loop
    checks it before each request; for a CLI agent the orchestrator checks the usage its
    transcript streams. A limit is met once passed, so one response may go beyond it."""

    max_cost_usd: float | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    price: ModelPrice | None = None

    @property
    def any(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None

    def cost(self, usage: DriverUsage) -> float | None:
        """The usage's cost as the ledger would say it: reported, else priced, else None."""
        reported = usage.cost_usd
        if reported is not None and (reported > 0 or usage.tokens == 0):
            return reported
        return computed_cost(usage, self.price) if self.price is not None else None

    def passed(self, usage: DriverUsage | None) -> str | None:
        """Why the run must stop (the limit passed, in words), or None."""
        if usage is None:
            return None
        if self.max_tokens is not None and usage.tokens >= self.max_tokens:
            return (f"spending limit: {usage.tokens:,} driver tokens used, --max-tokens "
                    f"{self.max_tokens:,}")
        cost = self.cost(usage)
        if self.max_cost_usd is not None and cost is not None and cost >= self.max_cost_usd:
            return f"spending limit: ${cost:.4f} of driver cost, --max-cost ${self.max_cost_usd:g}"
        return None
