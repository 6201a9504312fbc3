"""`a2rl fleet`: run a plan on a Ray cluster, one Ray task per run, all into one store.

The loop: skip the plan's runs the store already has finished (resume), queue the rest as Ray
tasks, and follow them until each reports back, showing how many are queued, running, finished
and failed (running: its run row exists in the store). A task that fails without a report
(its node died, its worker crashed) leaves its run marked failed: runs are not retried in
place, because a run is not idempotent; resuming the fleet makes a new run for its key. Ctrl-C
cancels the queued runs and lets the started ones finalize (a cancelled task passes SIGINT to
its `a2rl run`), then closes whatever could not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from a2rl.store import RunConfig, Store

from . import cluster, ledger
from .node import RunOutcome
from .plan import FleetPlan, resume_key, run_label

Say = Callable[[str], None]
State = Literal["finished", "failed", "interrupted", "cancelled"]
#: How long a stopping fleet waits for its started runs to finalize (scoring the best
#: submission on a real task's test split takes minutes); Ctrl-C again stops waiting.
STOP_GRACE_S = 1800.0


class FleetRun(BaseModel):
    label: str
    task: str
    agent: str
    model: str | None
    repeat: int
    state: State
    run_id: str | None = None
    node_id: str | None = None
    host: str | None = None
    error: str | None = None


class FleetResult(BaseModel):
    fleet: str
    planned: int
    already_done: int
    runs: list[FleetRun]
    stopped: bool = False

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs:
            out[r.state] = out.get(r.state, 0) + 1
        return out


def _row(spec: RunConfig, state: State, **fields: Any) -> FleetRun:
    return FleetRun(label=run_label(spec), task=spec.task_id, agent=spec.agent or "",
                    model=spec.driver_model, repeat=spec.fleet_repeat or 0, state=state,
                    **fields)


class FleetRunner:
    def __init__(self, plan: FleetPlan, store: Store, db_url: str, say: Say = lambda _m: None,
                 address: str | None = None, local_resources: dict[str, float] | None = None,
                 poll_s: float = 1.0) -> None:
        self.plan, self.store, self.db_url, self.say = plan, store, db_url, say
        self.address, self.local_resources, self.poll_s = address, local_resources, poll_s
        self.results: list[FleetRun] = []
        self._last_progress = ""

    def run(self) -> FleetResult:
        planned = self.plan.runs()
        stale = ledger.open_runs(self.store, self.plan.name)
        if stale:  # one driver per fleet: a run left open by a stopped driver cannot finish
            ledger.mark_failed(self.store, [r.id for r in stale],
                               "abandoned: its fleet stopped before the run finalized")
            self.say(f"marked {len(stale)} run(s) left open by an earlier driver as failed")
        done = ledger.done_keys(self.store, self.plan.name)
        todo = [spec for spec in planned if resume_key(spec) not in done]
        self.say(f"fleet {self.plan.name}: {len(planned)} runs planned, "
                 f"{len(planned) - len(todo)} already finished, {len(todo)} to run")
        result = FleetResult(fleet=self.plan.name, planned=len(planned),
                             already_done=len(planned) - len(todo), runs=[])
        if not todo:
            return result
        with cluster.stdout_to_stderr():
            self._run_on_cluster(todo, result)
        result.runs = list(self.results)
        return result

    def _run_on_cluster(self, todo: list[RunConfig], result: FleetResult) -> None:
        cluster.connect(self.address, self.local_resources)
        try:
            problem = cluster.check_capacity(self.plan)
            if problem:
                raise RuntimeError(problem)
            env = {"A2RL_DB_URL": self.db_url}
            options = cluster.task_options(self.plan)
            pending = {cluster.submit(spec, env, options): spec for spec in todo}
            try:
                self._follow(pending)
            except KeyboardInterrupt:
                result.stopped = True
                self._stop(pending)
        finally:
            cluster.disconnect()  # a local Ray instance stops with it

    def _follow(self, pending: dict[Any, RunConfig]) -> None:
        import ray  # the optional extra: see `cluster.connect`

        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=self.poll_s)
            for ref in ready:
                self._collect(ref, pending.pop(ref))
            self._progress(pending)

    def _collect(self, ref: Any, spec: RunConfig) -> None:
        import ray  # the optional extra: see `cluster.connect`
        from ray.exceptions import RayError, RayTaskError, TaskCancelledError

        try:
            outcome = RunOutcome.model_validate_json(ray.get(ref))
        except TaskCancelledError:  # queued, or started and finalized on SIGINT
            run = ledger.latest_run(self.store, self.plan.name, spec)
            self.results.append(_row(spec, "interrupted", run_id=run.id, node_id=run.fleet_node)
                                if run else _row(spec, "cancelled"))
            return
        except RayError as exc:  # the node or its worker died: no report, the run is lost
            kind = "the fleet's task failed" if isinstance(exc, RayTaskError) else "node lost"
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            reason = f"{kind}: {type(exc).__name__}: {first}"
            lost = ledger.open_runs(self.store, self.plan.name, spec)
            ledger.mark_failed(self.store, [r.id for r in lost], reason)
            self.say(f"{run_label(spec)}: failed ({reason})")
            self.results.append(_row(spec, "failed", run_id=lost[0].id if lost else None,
                                     node_id=lost[0].fleet_node if lost else None,
                                     error=reason))
            return
        state: State = "interrupted" if outcome.interrupted else (
            "finished" if outcome.exit_code == 0 else "failed")
        if state == "failed":
            ledger.mark_failed(self.store, [r.id for r in ledger.open_runs(
                self.store, self.plan.name, spec)], "a2rl run failed on its node")
        why = f": {outcome.error.strip().splitlines()[-1][:300]}" if (
            state == "failed" and outcome.error and outcome.error.strip()) else ""
        self.say(f"{run_label(spec)}: {state} on {outcome.host} (run {outcome.run_id}){why}")
        self.results.append(_row(spec, state, run_id=outcome.run_id, node_id=outcome.node_id,
                                 host=outcome.host, error=outcome.error))

    def _progress(self, pending: dict[Any, RunConfig]) -> None:
        started = ledger.started_keys(self.store, self.plan.name)
        running = sum(resume_key(spec) in started for spec in pending.values())
        finished = sum(r.state == "finished" for r in self.results)
        line = (f"{len(pending) - running} queued, {running} running, {finished} finished, "
                f"{len(self.results) - finished} failed")
        if line != self._last_progress:
            self._last_progress = line
            self.say(f"fleet {self.plan.name}: {line}")

    def _stop(self, pending: dict[Any, RunConfig]) -> None:
        """Ctrl-C: cancel what is queued, let what started finalize, close what cannot."""
        import ray  # the optional extra: see `cluster.connect`

        self.say("stopping the fleet: queued runs are cancelled, started runs finalize "
                 "(Ctrl-C again to stop waiting)")
        for ref in pending:
            ray.cancel(ref)
        deadline = time.monotonic() + STOP_GRACE_S
        try:
            while time.monotonic() < deadline and (
                    pending or ledger.open_runs(self.store, self.plan.name)):
                ready, _ = ray.wait(list(pending), num_returns=len(pending),
                                    timeout=self.poll_s) if pending else ([], [])
                for ref in ready:
                    self._collect(ref, pending.pop(ref))
                if not pending:
                    time.sleep(self.poll_s)
        except KeyboardInterrupt:
            pass
        for spec in pending.values():
            self.results.append(_row(spec, "cancelled"))
        left = ledger.open_runs(self.store, self.plan.name)
        if left:
            ledger.mark_failed(self.store, [r.id for r in left],
                               "the fleet stopped before the run finalized")
            self.say(f"{len(left)} run(s) did not finalize in time and were marked failed")
