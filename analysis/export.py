"""`a2rl export`: a finished run, or every run of a fleet, written in one of three formats.

    archive  a2rl's own run archive (`archive.py`), which `a2rl import` loads elsewhere
    atif     Harbor's Agent Trajectory Interchange Format (`formats/atif.py`)
    inspect  an Inspect AI eval log (`formats/inspect_log.py`)

A fleet is exported into one folder: one file per run, named by the run id, plus `index.json`
listing each run of the fleet with its file (or why it has none: a run not finished) and the
facts `a2rl compare` starts from (task, agent, driver model, scores). For `inspect` the folder is
also an Inspect log directory: `inspect view --log-dir FOLDER` lists every run.

Files are written beside their final name and renamed into place, so that an export that fails
half-way leaves no partial file under the name a reader would open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from sqlmodel import col, select

from a2rl import __version__
from a2rl.store import Run, Store

from .archive import ArchiveError
from .archive import export_run as export_archive
from .formats import InspectUnavailable, NotFinishedError, RunRecord, read_record
from .formats.atif import write_atif
from .formats.inspect_log import write_inspect

Format = Literal["archive", "atif", "inspect"]
FORMATS: tuple[str, ...] = ("archive", "atif", "inspect")
#: the file name after `a2rl-RUN` (one run) or `RUN` (in a fleet's folder)
SUFFIX = {"archive": ".tar.gz", "atif": ".trajectory.json", "inspect": ".eval"}
INDEX = "index.json"


class ExportError(RuntimeError):
    """An export that cannot be done; the message is one line for the user."""


class Written(BaseModel):
    run_id: str
    format: str
    path: str
    bytes: int
    counts: dict[str, int]

    def line(self) -> str:
        what = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in self.counts.items())
        return f"wrote {self.path} ({self.bytes} bytes: {what})"


class IndexEntry(BaseModel):
    run_id: str
    task: str
    agent: str | None
    driver_model: str | None
    status: str
    end_kind: str | None
    baseline_test: float | None
    final_test: float | None
    file: str | None  # relative to the index; None when not exported
    skipped: str | None = None  # why not


class FleetExport(BaseModel):
    fleet: str
    format: str
    folder: str
    index: str
    exported_at: str
    a2rl_version: str
    runs: list[IndexEntry]

    def line(self) -> str:
        done = sum(e.file is not None for e in self.runs)
        return (f"wrote {done} of {len(self.runs)} runs of fleet {self.fleet} to {self.folder} "
                f"(index: {self.index})")


def _check_out(fmt: str, out: Path) -> None:
    if fmt == "inspect" and out.suffix not in (".eval", ".json"):
        raise ExportError(f"{out}: an Inspect log is named .eval (its zip format) or .json")


def _atomic(path: Path, write: Callable[[Path], dict[str, int]]) -> dict[str, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer picks the format by the name's suffix (Inspect does): keep it on the temp file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{''.join(path.suffixes[-1:])}")
    try:
        counts = write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return counts


WRITERS: dict[str, Callable[[RunRecord, Path], dict[str, int]]] = {
    "atif": write_atif, "inspect": write_inspect}


def export_run(store: Store, run_id: str, fmt: str = "archive",
               out: Path | None = None) -> Written:
    """Write one finished run (default: `a2rl-RUN<suffix>` in the current folder).

    Raises KeyError for an unknown run and ExportError with a one-line reason otherwise.
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: {', '.join(FORMATS)}")
    path = Path(out) if out else Path(f"a2rl-{run_id}{SUFFIX[fmt]}")
    _check_out(fmt, path)
    if fmt == "archive":
        try:
            done = export_archive(store, run_id, path)
        except ArchiveError as exc:
            raise ExportError(str(exc)) from exc
        return Written(run_id=run_id, format=fmt, path=done.path, bytes=done.bytes,
                       counts={"tool_calls": done.counts["toolcall"],
                               "submissions": done.counts["submission"],
                               "blobs": done.counts["blob"]})
    try:
        rec = read_record(store, run_id)
        counts = _atomic(path, lambda p: WRITERS[fmt](rec, p))
    except (NotFinishedError, InspectUnavailable) as exc:
        raise ExportError(str(exc)) from exc
    return Written(run_id=run_id, format=fmt, path=str(path), bytes=path.stat().st_size,
                   counts=counts)


def export_fleet(store: Store, fleet: str, fmt: str = "archive",
                 out: Path | None = None) -> FleetExport:
    """Write every finished run of a fleet into one folder (default `a2rl-fleet-FLEET`), with
    `index.json`. Raises ExportError when the fleet has no run."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: {', '.join(FORMATS)}")
    with store.session() as s:
        runs = list(s.exec(select(Run).where(Run.fleet_id == fleet)
                           .order_by(col(Run.created_at))).all())
    if not runs:
        raise ExportError(f"fleet {fleet!r} has no runs in this store (a2rl runs --fleet lists "
                          "them)")
    folder = Path(out) if out else Path(f"a2rl-fleet-{fleet}")
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{folder} exists and is not a folder: --out names the fleet's folder")
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for run in runs:
        name = f"{run.id}{SUFFIX[fmt]}"
        entry = IndexEntry(run_id=run.id, task=run.task_id, agent=run.agent,
                           driver_model=run.driver_model, status=run.status,
                           end_kind=run.end_kind, baseline_test=run.baseline_test,
                           final_test=run.final_score, file=None)
        if run.status != "finished":
            entry.skipped = f"run is {run.status}, not finished"
        else:
            export_run(store, run.id, fmt, folder / name)
            entry.file = name
        entries.append(entry)
    result = FleetExport(fleet=fleet, format=fmt, folder=str(folder),
                         index=str(folder / INDEX), exported_at=datetime.now(UTC).isoformat(),
                         a2rl_version=__version__, runs=entries)
    text = json.dumps(result.model_dump(mode="json", exclude={"folder", "index"}), indent=2)

    def write_index(p: Path) -> dict[str, int]:
        p.write_text(text + "\n")
        return {"runs": len(entries)}

    _atomic(folder / INDEX, write_index)
    return result
