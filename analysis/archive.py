"""Run archives: `a2rl export RUN` writes one, `a2rl import ARCHIVE` loads it elsewhere.

An archive is a gzipped tar of plain members, so that it can be inspected with `tar` alone:

    manifest.json          format and versions, counts, sha256 and size of every other member
    report.json, report.md the report as computed by the exporting installation
    rows/<table>.jsonl     the run's rows, one JSON object a line (`a2rl.store.transfer`)
    blobs/<sha256>         every blob those rows reference, uncompressed

Import reads members into memory (nothing is extracted to disk), refuses an archive whose
manifest is missing, whose members do not match their recorded hashes (or are not listed), or
that was written by a newer format or store schema; then loads the rows in one transaction.
Importing a run that is already present with the same identity (task and creation time) is a
no-op, so re-importing a folder of archives is safe; a different run under the same id is
refused. Only finished runs are exported: a live run's rows are still changing, and its queued
grading requests would make the importing installation try to grade checkpoints it lacks.
Checkpoints themselves are not archived (their file hashes are, in the submission rows).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from a2rl import __version__
from a2rl.store import SCHEMA_VERSION as STORE_SCHEMA_VERSION
from a2rl.store import Store, aware
from a2rl.store.transfer import (
    RUN_TABLES,
    IdConflictError,
    RunDump,
    RunExistsError,
    dump_run,
    load_run,
)

from .render_md import render_markdown
from .report import build_report
from .schema import SCHEMA_VERSION as REPORT_SCHEMA_VERSION

FORMAT = "a2rl-run-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class ArchiveError(RuntimeError):
    """An archive that cannot be written or loaded; the message is one line for the user."""


class Member(BaseModel):
    sha256: str
    size: int


class Manifest(BaseModel):
    format: Literal["a2rl-run-archive"]
    format_version: int
    a2rl_version: str
    store_schema_version: int
    report_schema_version: str
    run_id: str
    task: str
    exported_at: str
    counts: dict[str, int]
    missing_blobs: list[str] = []
    members: dict[str, Member]


class ExportResult(BaseModel):
    run_id: str
    path: str
    bytes: int
    counts: dict[str, int]


class ImportResult(BaseModel):
    run_id: str
    imported: bool
    detail: str
    counts: dict[str, int]
    exported_by: str


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()


def export_run(store: Store, run_id: str, out: Path | None = None) -> ExportResult:
    """Write the archive of a finished run (default `a2rl-<run>.tar.gz` in the current folder).

    Raises KeyError for an unknown run and ArchiveError for a run that has not finished.
    """
    dump = dump_run(store, run_id)
    run = dump.rows["run"][0]
    if run["status"] != "finished":
        raise ArchiveError(f"run {run_id} is {run['status']}, not finished: end it first "
                           f"(a2rl finish {run_id})")
    report = build_report(store, run_id)
    members: dict[str, bytes] = {
        "report.json": (report.model_dump_json(indent=2) + "\n").encode(),
        "report.md": render_markdown(report).encode(),
    }
    members |= {f"rows/{name}.jsonl": _jsonl(dump.rows.get(name, [])) for name in RUN_TABLES}
    members |= {f"blobs/{sha}": data for sha, data in sorted(dump.blobs.items())}
    manifest = Manifest(
        format=FORMAT, format_version=FORMAT_VERSION, a2rl_version=__version__,
        store_schema_version=STORE_SCHEMA_VERSION, report_schema_version=REPORT_SCHEMA_VERSION,
        run_id=run_id, task=run["task_id"], exported_at=datetime.now(UTC).isoformat(),
        counts=dump.counts(), missing_blobs=dump.missing_blobs,
        members={name: Member(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
                 for name, data in members.items()})
    path = Path(out) if out else Path(f"a2rl-{run_id}.tar.gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    mtime = time.time()
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name, data in [(MANIFEST, (manifest.model_dump_json(indent=2) + "\n").encode()),
                               *members.items()]:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), mtime, 0o644
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(run_id=run_id, path=str(path), bytes=path.stat().st_size,
                        counts=manifest.counts)


def _read_members(path: Path) -> dict[str, bytes]:
    if not path.is_file():
        raise ArchiveError(f"{path} does not exist or is not a file")
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for info in tar:
                name = info.name
                if not info.isfile() or name.startswith("/") or ".." in name.split("/"):
                    raise ArchiveError(f"{path}: unexpected member {name!r}")
                if name in out:
                    raise ArchiveError(f"{path}: member {name!r} appears twice")
                fh = tar.extractfile(info)
                out[name] = fh.read() if fh else b""
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ArchiveError(f"{path} is not a readable .tar.gz archive: {exc}") from exc
    return out


def _check_versions(path: Path, doc: Any) -> None:
    """Refuse what this a2rl cannot read, before validating fields a newer format may change."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ArchiveError(f"{path} is not an a2rl run archive (manifest format is not {FORMAT})")
    for key, ours in (("format_version", FORMAT_VERSION),
                      ("store_schema_version", STORE_SCHEMA_VERSION)):
        theirs = doc.get(key)
        if not isinstance(theirs, int):
            raise ArchiveError(f"{path}: manifest has no integer {key}")
        if theirs > ours:
            raise ArchiveError(
                f"{path} was written by a newer a2rl ({doc.get('a2rl_version')}: {key} "
                f"{theirs}, this a2rl {__version__} reads up to {ours}); upgrade a2rl")


def read_archive(path: Path) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest and members of an archive, after checking every member against it."""
    path = Path(path)
    members = _read_members(path)
    if MANIFEST not in members:
        raise ArchiveError(f"{path} has no {MANIFEST}: not an a2rl run archive")
    try:
        doc = json.loads(members.pop(MANIFEST))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: {MANIFEST} is not JSON ({exc})") from exc
    _check_versions(path, doc)
    try:
        manifest = Manifest.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ArchiveError(f"{path}: bad manifest ({'.'.join(map(str, first['loc']))}: "
                           f"{first['msg']})") from exc
    extra = sorted(set(members) - set(manifest.members))
    if extra:
        raise ArchiveError(f"{path}: member {extra[0]} is not listed in the manifest")
    for name, want in manifest.members.items():
        data = members.get(name)
        if data is None:
            raise ArchiveError(f"{path}: member {name} is missing")
        if len(data) != want.size or hashlib.sha256(data).hexdigest() != want.sha256:
            raise ArchiveError(f"{path}: member {name} does not match its sha256 in the "
                               "manifest (corrupted or tampered)")
        if name.startswith("blobs/") and name.removeprefix("blobs/") != want.sha256:
            raise ArchiveError(f"{path}: blob {name} is not named by its content's sha256")
    return manifest, members


def _dump_of(path: Path, manifest: Manifest, members: dict[str, bytes]) -> RunDump:
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for name in RUN_TABLES:
            data = members.get(f"rows/{name}.jsonl", b"").decode()
            rows[name] = [json.loads(line) for line in data.splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: rows are not JSON lines ({exc})") from exc
    runs = rows["run"]
    if len(runs) != 1 or runs[0].get("id") != manifest.run_id:
        raise ArchiveError(f"{path}: rows/run.jsonl does not hold exactly run {manifest.run_id}")
    blobs = {name.removeprefix("blobs/"): data for name, data in members.items()
             if name.startswith("blobs/")}
    return RunDump(run_id=manifest.run_id, rows=rows, blobs=blobs,
                   missing_blobs=manifest.missing_blobs)


def _same_run(existing: Any, row: dict[str, Any]) -> bool:
    try:
        created = datetime.fromisoformat(row.get("created_at") or "")
    except ValueError:
        return False
    return existing.task_id == row.get("task_id") and aware(existing.created_at) == aware(created)


def import_run(store: Store, path: Path) -> ImportResult:
    """Load an archive into `store`. Raises ArchiveError with a one-line reason."""
    path = Path(path)
    manifest, members = read_archive(path)
    dump = _dump_of(path, manifest, members)
    try:
        counts = load_run(store, dump)
    except RunExistsError as exc:
        if not _same_run(exc.existing, dump.rows["run"][0]):
            raise ArchiveError(f"a different run with id {dump.run_id} already exists in this "
                               "store; import into another store (A2RL_HOME or A2RL_DB_URL)"
                               ) from exc
        return ImportResult(run_id=dump.run_id, imported=False, counts={},
                            detail="already present, nothing imported",
                            exported_by=manifest.a2rl_version)
    except IdConflictError as exc:
        raise ArchiveError(str(exc)) from exc
    except ValidationError as exc:
        raise ArchiveError(f"{path}: a row does not fit this a2rl's store "
                           f"({exc.errors()[0]['msg']})") from exc
    return ImportResult(run_id=dump.run_id, imported=True, counts=counts,
                        detail=f"imported {counts.get('toolcall', 0)} tool calls, "
                               f"{counts.get('submission', 0)} submissions, "
                               f"{counts.get('blob', 0)} new blobs",
                        exported_by=manifest.a2rl_version)
