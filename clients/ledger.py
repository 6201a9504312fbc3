"""The driver's part of a run's cost ledger: the token totals (and cost) that the agent's
stored transcript states, read by the connector whose parser recognizes it, priced by the
price table where the agent reports no cost (`a2rl.store.ledger`).

Here, not in the store, because only the connectors read transcripts; the orchestrator calls
it once the agent has stopped and its transcript is stored.
"""

from __future__ import annotations

import logging

from a2rl.settings import Settings
from a2rl.store import Run, Store, ledger

from .registry import parse_transcript, transcript_usage
from .transcript import driver_usage

log = logging.getLogger(__name__)


def run_driver_usage(store: Store, run: Run) -> ledger.DriverUsage | None:
    """The totals the run's stored transcript states; None without one, or where its
    format states none."""
    data = store.get_blob(run.agent_transcript_sha) if run.agent_transcript_sha else None
    if not data:
        return None
    fmt, _ = parse_transcript(data, run.agent)
    return driver_usage(transcript_usage(data, fmt))


def record_driver(settings: Settings, store: Store, run_id: str) -> None:
    """Write the driver's columns of the run's ledger; a transcript's bytes are the agent's,
    so a failure is logged and the ledger's driver part stays unknown."""
    try:
        with store.session() as s:
            run = s.get(Run, run_id)
            assert run is not None
        usage = run_driver_usage(store, run)
        ledger.record(store, run_id, ledger.driver_fields(usage, run.driver_model,
                                                          settings.prices))
    except Exception:  # noqa: BLE001 - a run's end never fails for its ledger
        log.exception("run %s: the driver's ledger failed", run_id)
