"""What the store knows about a fleet: which of its runs are done, which are under way, and
marking the runs whose node was lost.

The store is the fleet's only ledger: a run belongs to a fleet through its `fleet_id`,
`fleet_repeat` and `fleet_node` columns (written by `a2rl run --fleet ...` on the node), so a
resumed fleet, `a2rl compare --fleet` and a second machine all see the same thing.
"""

from __future__ import annotations

from sqlmodel import select

from a2rl.server.run.clock import RunClock
from a2rl.store import Run, RunConfig, RunStatus, Store

from .plan import resume_key

#: Run states that count as done for resuming: the run was finalized (whatever the agent did).
DONE = RunStatus.finished
#: The state of a run whose node died or whose fleet stopped before it could finalize.
FAILED = RunStatus.failed


def fleet_runs(store: Store, fleet: str) -> list[Run]:
    with store.session() as s:
        return list(s.exec(select(Run).where(Run.fleet_id == fleet)
                           .order_by(Run.created_at)))  # type: ignore[arg-type]


def done_keys(store: Store, fleet: str) -> set[tuple[str, str, str, int]]:
    """Resume keys of the fleet's runs that finished; they are not run again."""
    return {resume_key(r) for r in fleet_runs(store, fleet) if r.status == DONE}


def started_keys(store: Store, fleet: str) -> set[tuple[str, str, str, int]]:
    """Resume keys with a run that has a row and has not failed (running, or done)."""
    return {resume_key(r) for r in fleet_runs(store, fleet) if r.status != FAILED}


def open_runs(store: Store, fleet: str, spec: RunConfig | None = None) -> list[Run]:
    """The fleet's runs that neither finished nor failed (optionally: of one planned run)."""
    return [r for r in fleet_runs(store, fleet) if r.status not in (DONE, FAILED)
            and (spec is None or resume_key(r) == resume_key(spec))]


def latest_run(store: Store, fleet: str, spec: RunConfig) -> Run | None:
    """The newest run of the fleet for `spec`'s key, in whatever state."""
    runs = [r for r in fleet_runs(store, fleet) if resume_key(r) == resume_key(spec)]
    return runs[-1] if runs else None


def mark_failed(store: Store, run_ids: list[str], reason: str) -> None:
    """Close runs that cannot finalize themselves (their node is gone), through their clock
    like any other end (`RunClock.close`: status, reason, time and the clock's event). They
    keep everything recorded so far; resuming the fleet makes a new run for their key."""
    for run_id in run_ids:
        with store.session() as s:
            run = s.get(Run, run_id)
        if run is None or run.status in (DONE, FAILED):
            continue
        RunClock(store, run_id).close(reason, status=FAILED)
