"""The run's record of which workspace files each job opened, read and wrote, in the store.

The run's access recorder (`sandbox/recorder/`, started with its sandbox) appends what the
kernel reported to a journal in the run's host-only control folder; this module reads the
journal from where it last stopped into `JobFile` rows (one per job and path) and says, for
each job, whether a recorder watched it whole (`Job.files_recorded`). It runs when a job
settles (after asking the recorder to sync: everything the job's ended processes did is then
in the journal), before a submission's lineage is built, and when the run finishes, before
its audit. Reading is idempotent and serialized by a lock: rows carry their whole state, a
line read twice changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from a2rl.sandbox import access
from a2rl.store import Store
from a2rl.store.records import jobfiles

log = logging.getLogger(__name__)

STATE = "ingested.json"  # how far the journal was read, and the recorders' spans


@dataclass
class Coverage:
    """When recorders watched the run, from the journal: per recorder [start, end, why it
    ended, last heard] (end None: no end line yet), and why none could (error lines)."""

    spans: list[list[Any]] = field(default_factory=list)
    errors: list[list[Any]] = field(default_factory=list)

    def note(self, started: float, ended: float | None, live: bool) -> str:
        """`Job.files_recorded` for a job that ran from `started` to `ended` (None: not yet),
        `live` when the run's recorder (the latest) answered a sync after its end. A recorder
        that ended without a word counts as watching until it was last heard of (its last
        line): what it saw after that is lost with it."""
        end = ended if ended is not None else float("inf")
        overlapping, before = [], []
        for i, (start, stop, why, heard) in enumerate(self.spans):
            if stop is None:
                last = i == len(self.spans) - 1
                stop = float("inf") if last and live else heard
                why = why or "it stopped without a word"
            if start <= started and stop >= end:
                return "complete"
            if start <= end and stop >= started:
                overlapping.append((start, why))
            elif start <= started:
                before.append(why)
        if overlapping:
            start, why = overlapping[-1]
            if start > started:
                return "partial: the access recorder started after the job"
            return f"partial: the access recorder ended during the job ({why})"
        if before:
            return f"none: the access recorder ended before the job ({before[-1]})"
        if self.errors:
            return f"none: {self.errors[-1][1]}"
        return "none: no access recorder watched this run"


def folder_of(run_dir: Path) -> Path:
    return access.folder_of(run_dir / "control")


def job_files(store: Store, run_id: str, run_dir: Path, started: datetime,
              ended: datetime | None) -> str:
    """At a job's settle: the recorder synced, the journal read into the store, and the
    job's `files_recorded`. Never fails a settle: a record that cannot be read says so."""
    folder = folder_of(run_dir)
    try:
        live = sync(folder)
        coverage = ingest(store, run_id, folder)
    except Exception as exc:  # noqa: BLE001 - the job's end is recorded whatever this does
        log.warning("run %s: the access record could not be read: %s", run_id, exc)
        return f"partial: the access record could not be read ({exc})"
    return coverage.note(_aware(started).timestamp(),
                         _aware(ended).timestamp() if ended else None, live)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / "ingest.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def sync(folder: Path) -> bool:
    """Ask the run's recorder to put everything its jobs did until now in the journal; False
    when no recorder answers."""
    return folder.is_dir() and access.call(folder, "sync") is not None


def ingest(store: Store, run_id: str, folder: Path) -> Coverage:
    """Read the journal's new lines into the run's `JobFile` rows; the coverage so far."""
    if not folder.is_dir():
        return Coverage()
    with _locked(folder):
        state = _load(folder)
        coverage = Coverage(state.get("spans", []), state.get("errors", []))
        offset = int(state.get("offset", 0))
        rows: dict[tuple[str | None, str], list[Any]] = {}
        try:
            with open(folder / access.JOURNAL, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            data = b""
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        for raw in complete.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            _apply(line, rows, coverage)
        jobfiles.upsert(store, run_id, rows)
        state = {"offset": offset + len(complete), "spans": coverage.spans,
                 "errors": coverage.errors}
        _save(folder, state)
    return coverage


def _apply(line: dict[str, Any], rows: dict[tuple[str | None, str], list[Any]],
           coverage: Coverage) -> None:
    kind, at = line.get("t"), line.get("at")
    if not isinstance(at, (int, float)):
        return
    if kind == "rows":
        if coverage.spans and coverage.spans[-1][1] is None:
            coverage.spans[-1][3] = at  # the latest recorder was heard of
        for row in line.get("rows") or []:
            if isinstance(row, list) and len(row) == 8 and isinstance(row[1], str):
                key = (row[0] if isinstance(row[0], str) else None, row[1])
                rows[key] = _merged(rows.get(key), row)
    elif kind == "start":
        coverage.spans.append([at, None, None, at])
    elif kind == "end":
        if coverage.spans and coverage.spans[-1][1] is None:
            coverage.spans[-1][1], coverage.spans[-1][2] = at, str(line.get("why") or "")
    elif kind in ("error", "lost"):
        coverage.errors.append([at, str(line.get("why") or "unknown")])


def _merged(old: list[Any] | None, new: list[Any]) -> list[Any]:
    """Two states of one (job, path): a recorder's later line holds its whole state; a row of
    another recorder (one started after a restart) adds to it."""
    if old is None:
        return list(new)
    job, path, read, written, first, last, size, sha = new
    merged = [job, path, old[2] or read, old[3] or written, min(old[4], first),
              max(old[5], last), old[6], old[7]]
    if written:  # its size and hash are of the later write
        merged[6], merged[7] = size, sha
    return merged


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _load(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _save(folder: Path, state: dict[str, Any]) -> None:
    tmp = folder / (STATE + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, folder / STATE)
