"""Every text an agent produced in a run, streamed: what the text checks read.

Sources, each with the evidence a flag names: tool calls' arguments (commands, edited files'
contents, failed calls included), revisions' stored contents (each distinct content once; the
task's initial files are the task's, not the agent's), job output logs, and the files left in
the workspace that no stored revision holds (large generated training data: the revision
scanner stores files up to `revision_max_bytes`).

Why the workspace is read with care: it is the agent's. Files are opened without following
symlinks and only when they are regular files (no FIFO, no device); the sandbox is stopped
when the audit runs, and a file is read in chunks, so a huge one costs bounded memory.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from a2rl.store.queries import INITIAL_SOURCE

from .record import RunRecord

CHUNK = 4 << 20
#: what no agent text is: model weights and archives (read as text they only cost time)
BINARY_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy", ".npz",
                   ".img", ".so", ".pyc", ".gz", ".zip", ".tar", ".zst", ".arrow", ".parquet")
#: folders the task laid out and the agent does not write (the base model's weights)
SKIP_DIRS = {"base_model", ".git", "__pycache__", ".cache"}


@dataclass(frozen=True)
class Source:
    """Where a text came from: a label for matches and the evidence a flag shows."""

    kind: str  # tool_call | revision | job | file
    ref: str  # the id (tool call, revision, job) or the workspace path
    path: str = ""
    #: the stored blob's sha when the text is one (a job's log): equal shas, equal texts, so
    #: a reader can match one and give its result to the others
    blob: str = ""
    #: a workspace file's size when it was listed (0 for the others)
    size: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.ref}"


def tool_call_text(call: object) -> str:
    args = getattr(call, "arguments", None) or {}
    return json.dumps(args, ensure_ascii=False) if not isinstance(args, str) else args


def _read_chunks(path: Path) -> Iterator[bytes]:
    """A regular file's bytes in chunks; nothing for a link, FIFO or device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        while chunk := os.read(fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)


def workspace_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every regular file under `root`, not following links."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS
                       and not (base / d).is_symlink()]
        for name in filenames:
            if name.endswith(BINARY_SUFFIXES):
                continue
            path = base / name
            yield path.relative_to(root).as_posix(), path


def workspace_root(record: RunRecord) -> Path | None:
    """The run's workspace folder on the host while its files are there (a run being
    finished, a plain-folder workspace); None once its volume is detached (the files are then
    in workspace.img, and the stored revisions are what the audit reads)."""
    if not record.run.workspace:
        return None
    root = Path(record.run.workspace)
    try:
        if root.is_symlink() or not root.is_dir() or not any(root.iterdir()):
            return None
    except OSError:
        return None
    return root


def agent_texts(record: RunRecord, *, tool_calls: bool = True,
                workspace: bool = True) -> Iterator[tuple[Source, Iterator[bytes]]]:
    """Every text of the run's agent, as (source, its bytes in chunks)."""
    if tool_calls:
        for call in record.tool_calls:
            yield Source("tool_call", str(call.id)), iter((tool_call_text(call).encode(),))
    stored: dict[str, set[int | None]] = {}
    seen_blobs: set[str] = set()
    for rev in record.revisions:
        if rev.source == INITIAL_SOURCE or not rev.blob_sha:
            continue
        stored.setdefault(rev.path, set()).add(rev.size)
        if not rev.content_stored or rev.blob_sha in seen_blobs:
            continue
        seen_blobs.add(rev.blob_sha)
        try:
            data = record.blob(rev.blob_sha)
        except KeyError:
            continue
        yield Source("revision", str(rev.id), rev.path), iter((data,))
    for job in record.jobs:
        log, sha = _job_log(record, job)
        if log is not None:
            yield Source("job", job.id, blob=sha), log
    root = workspace_root(record) if workspace else None
    if root is not None:
        initial = {r.path for r in record.revisions if r.source == INITIAL_SOURCE}
        # the task's inputs, mounted read-only in the sandbox: the agent cannot have written them
        given = [p.strip("/") for p in (record.run.config or {}).get("readonly_paths") or []]
        for rel, path in workspace_files(root):
            if any(rel == g or rel.startswith(g + "/") for g in given):
                continue
            try:
                size = path.lstat().st_size
            except OSError:
                continue
            stored_sizes = stored.get(rel, set())
            if size in stored_sizes and size <= CHUNK:
                continue  # the stored revision of that content was read
            if rel in initial and not stored_sizes:
                continue  # the task's file, unchanged since creation
            yield Source("file", rel, rel, size=size), _read_chunks(path)


def _job_log(record: RunRecord, job: object) -> tuple[Iterator[bytes] | None, str]:
    """The job's output and the sha of the blob it came from ("" when read from its file)."""
    sha = getattr(job, "log_blob_sha", None)
    if sha:
        try:
            return iter((record.blob(sha),)), sha
        except KeyError:
            pass
    log_path = getattr(job, "log_path", "")
    if log_path and Path(log_path).is_file():
        return _read_chunks(Path(log_path)), ""
    return None, ""
