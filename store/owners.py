"""Who holds a run (`Run.owner`, schema v6), cheaply: no server import, so that every
command can ask at its start whether some run is overdue (`overdue_runs`) and import the
server's finalization (`a2rl.server.run.owner`) only when one is. The rules are described
there.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sqlalchemy import or_
from sqlmodel import select

from .db import Store
from .models import Run, utcnow
from .records.runs import swap_owner
from .status import RunStatus

#: End reasons of runs found overdue (the vocabulary of `Run.end_reason`)
BUDGET_EXHAUSTED = "budget exhausted"
#: an orchestrated run (`a2rl run`) whose orchestrator ended without finalizing it: the agent
#: was cut off at an unknown moment, so this is no result
OWNER_LOST = "owner lost"


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22: starttime


def process_owner(pid: int | None = None) -> str:
    """This process (or `pid`) as a run's owner: `host:pid:start`."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or 0}"


def owner_gone(owner: str | None) -> bool:
    """Whether `owner` is a process of this host that no longer runs (None: nobody holds the
    run). An owner elsewhere is never judged gone."""
    if not owner:
        return True
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    now = _start_ticks(int(pid))
    if now is None:
        return True
    return start.isdigit() and start != "0" and start != now


def take_if_free(store: Store, run_id: str) -> bool:
    """Become the run's owner when nobody live holds it; True when this process owns it."""
    me = process_owner()
    with store.session() as s:
        run = s.get(Run, run_id)
    if run is None or run.ended_at is not None:
        return False
    if run.owner == me:
        return True
    return owner_gone(run.owner) and swap_owner(store, run_id, run.owner, me)


def _is_local(runs_dir: Path, run: Run) -> bool:
    folder = Path(run.workspace).parent
    return folder.is_dir() and folder.resolve().parent == runs_dir.resolve()


def end_reason_of_lost(run: Run) -> str:
    """Why a run found past its deadline without its owner ended: an orchestrated run whose
    orchestrator never recorded how its agent ended lost its owner mid-run; any other (a run
    made with `a2rl create`, served until its server stopped) had its whole budget."""
    if run.status == RunStatus.running and run.agent is not None and run.agent_status is None:
        return OWNER_LOST
    return BUDGET_EXHAUSTED


def overdue_runs(runs_dir: Path, store: Store) -> list[Run]:
    """This machine's runs nobody live holds that should have ended: running past their
    deadline, or left half finalized."""
    now = utcnow()
    with store.session() as s:
        rows = s.exec(select(Run).where(Run.ended_at.is_(None), or_(  # type: ignore[union-attr]
            (Run.status == RunStatus.running) & (Run.deadline < now),  # type: ignore[operator]
            Run.status == RunStatus.finalizing))).all()
    return [r for r in rows if _is_local(runs_dir, r) and owner_gone(r.owner)]
