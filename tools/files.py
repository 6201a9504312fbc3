"""read_file, list_files and edit_file: the agent's view of its workspace.

Every path goes through `workspace_fs`: opened from a handle on the workspace root, never
through a symlink, never blocking on a FIFO, only regular files read and only directories
listed. The work runs in a thread, so no argument holds the event loop.
"""

from __future__ import annotations

import difflib
import mimetypes
import os
import re
import stat
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import Field

from a2rl.layout import LOGS
from a2rl.sandbox.workspace_fs import (
    WalkCapped,
    WorkspaceError,
    WorkspaceFS,
    check_regular,
    explain,
    kind_of,
    read_fd,
    show,
)

from .results import EditFileResult, FileEntry, ListFilesResult, ReadFileResult
from .runtime import RunRuntime, current, in_thread

MAX_READ_BYTES = 2_000_000
MAX_LINE_CHARS = 2_000
MAX_ENTRIES = 500
MAX_DIFF_CHARS = 4_000
#: edit_file reads and writes whole files: larger ones are edited with run_command.
MAX_EDIT_BYTES = 10_000_000
#: Above this many characters (old + new) no diff is computed (see `_diff` for the bound on
#: the diff's time below it).
MAX_DIFF_INPUT_CHARS = 20_000_000
MAX_DIFF_WINDOW_LINES = 1_000
DIFF_CONTEXT = 2

_MAGIC = {
    b"\x89PNG": "PNG image", b"PK\x03\x04": "zip archive", b"\x7fELF": "ELF executable",
    b"\x1f\x8b": "gzip archive", b"GGUF": "GGUF model file",
}
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK


def _describe_binary(name: str, head: bytes) -> str:
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    suffix = PurePosixPath(name).suffix
    if suffix == ".safetensors":
        return "safetensors weights"
    if suffix in {".bin", ".pt", ".pth"}:
        return "binary weights file (pickle)"
    guess = mimetypes.guess_type(name)[0]
    return guess or "binary data"


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a cut multibyte char at the end is fine
    return False


#: The name of a job's log (`jobs.new_job_id()` + ".log"), written by the supervisor.
JOB_LOG = re.compile(r"j-[0-9a-f]{8}\.log")


def _target(rt: RunRuntime, path: str) -> tuple[WorkspaceFS, tuple[str, ...], tuple[str, ...]]:
    """(filesystem, parts inside it, prefix shown to the agent) for a path to read.

    Job logs may live outside the workspace, where jobs cannot replace them
    (`RunRuntime.job_logs`); `logs/...` is read from there, with the same opener.
    """
    parts = rt.workspace.parts(path)
    # Only the job logs' own names: the rest of logs/ is the agent's folder like any other.
    if len(parts) == 2 and parts[0] == LOGS and JOB_LOG.fullmatch(parts[1]):
        return WorkspaceFS(rt.job_logs.folder), parts[1:], (LOGS,)
    return rt.workspace.fs(rt.owner), parts, ()


def _read_file(rt: RunRuntime, path: str, offset: int, limit: int) -> ReadFileResult:
    fs, parts, prefix = _target(rt, path)
    fd, st = fs.open_node(parts)
    try:
        check_regular((*prefix, *parts), st)
        data = read_fd(fd, MAX_READ_BYTES)
    finally:
        os.close(fd)
    size = st.st_size
    if _is_binary(data[:8192]):
        kind = _describe_binary(parts[-1] if parts else "", data[:8192])
        return ReadFileResult(path=path, size=size, binary=True,
                              description=f"binary file: {kind}, {size} bytes; not shown")
    lines = data.decode("utf-8", errors="replace").splitlines()
    complete = size <= MAX_READ_BYTES
    page = lines[offset:offset + limit]
    shown = []
    for i, line in enumerate(page, start=offset + 1):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line)} chars]"
        shown.append(f"{i:6}\t{line}")
    end = offset + len(page)
    more = end < len(lines)
    return ReadFileResult(
        path=path, content="\n".join(shown), offset=offset, lines_returned=len(page),
        total_lines=len(lines) if complete else None, next_offset=end if more else None,
        size=size,
        description="" if complete else f"only the first {MAX_READ_BYTES} bytes are paged",
    )


async def read_file(
    path: Annotated[str, Field(description="file path relative to the workspace")],
    offset: Annotated[int, Field(ge=0, description="0-based line to start at")] = 0,
    limit: Annotated[int, Field(ge=1, le=5000, description="number of lines to return")] = 400,
) -> ReadFileResult:
    """Read a text file of the workspace, with line numbers, a page at a time.

    Lines are numbered from 1; pass `next_offset` back as `offset` to read the next page.
    A binary file (weights, archives) is described (type and size) instead of shown.
    Long lines are cut at 2,000 characters. Symlinks are not followed.
    """
    rt = current().runtime
    return await in_thread(_read_file, rt, path, offset, limit)


def _list_files(rt: RunRuntime, path: str, depth: int) -> ListFilesResult:
    fs, parts, prefix = _target(rt, path)
    st = fs.lstat(parts)
    if st is None:
        raise WorkspaceError(f"{path!r} does not exist")
    if stat.S_ISREG(st.st_mode):
        raise WorkspaceError(f"{path!r} is a file; use read_file to read it")
    entries: list[FileEntry] = []
    truncated = False
    try:
        for entry in fs.walk(parts, max_depth=depth, max_entries=MAX_ENTRIES):
            shown = (*prefix, *entry.parts)
            ro = rt.workspace.is_readonly(shown)
            mode = entry.st.st_mode
            if stat.S_ISDIR(mode):
                entries.append(FileEntry(path=show(shown) + "/", type="dir", read_only=ro))
            elif stat.S_ISREG(mode):
                entries.append(FileEntry(path=show(shown), type="file", size=entry.st.st_size,
                                         read_only=ro))
            else:
                entries.append(FileEntry(path=show(shown), type=kind_of(mode), read_only=ro))
    except WalkCapped:
        truncated = True
    return ListFilesResult(path=path, entries=entries, truncated=truncated)


async def list_files(
    path: Annotated[str, Field(description="directory relative to the workspace")] = ".",
    depth: Annotated[int, Field(ge=1, le=6, description="how many levels to descend")] = 2,
) -> ListFilesResult:
    """List files and directories of the workspace with their sizes.

    Read-only inputs (the base model, the training data) are marked `read_only`.
    """
    rt = current().runtime
    return await in_thread(_list_files, rt, path, depth)


def _diff(old: str, new: str, path: str) -> str:
    """A unified diff, cut at MAX_DIFF_CHARS, in bounded time whatever the input.

    Lines common to both ends are stripped first (linear), so an edit in one place is diffed
    on that place only. difflib (quadratic in the worst case: 10,000 lines of a few repeated
    values take it tens of seconds) only sees a changed region of at most MAX_DIFF_WINDOW_LINES
    lines; a larger one is shown as its old lines removed and its new lines added.
    """
    if len(old) + len(new) > MAX_DIFF_INPUT_CHARS:
        return (f"[diff not computed for a change this large: {len(old)} -> {len(new)} "
                "characters; read_file shows the result]")
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    lo = max(0, head - DIFF_CONTEXT)
    wa, wb = a[lo:len(a) - max(0, tail - DIFF_CONTEXT)], b[lo:len(b) - max(0, tail - DIFF_CONTEXT)]
    if wa == wb:
        return ""
    header = [f"--- a/{path}\n", f"+++ b/{path}\n"]
    if len(wa) + len(wb) <= MAX_DIFF_WINDOW_LINES:
        body = list(difflib.unified_diff(wa, wb, n=DIFF_CONTEXT))[2:]
        body = [_HUNK.sub(lambda m: _shift(m, lo), line) if line.startswith("@@") else line
                for line in body]
    else:
        body = [f"@@ -{lo + 1},{len(wa)} +{lo + 1},{len(wb)} @@\n"]
        for sign, lines in (("-", wa), ("+", wb)):  # half of the room for each side
            size = 0
            for i, x in enumerate(lines):
                if size > MAX_DIFF_CHARS // 2:
                    body.append(f"{sign}[... {len(lines) - i} more lines]\n")
                    break
                body.append(sign + x)
                size += len(x) + 1
    out: list[str] = []
    for line in header + body:
        if not line.endswith("\n"):  # the last line of a file without a final newline
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    text = "".join(out)
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + "\n[... diff cut]"
    return text


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _shift(m: re.Match[str], lo: int) -> str:
    """A hunk header of a diff of the window starting at line `lo`, in the file's numbers."""
    return (f"@@ -{int(m[1]) + lo}{m[2] or ''} +{int(m[3]) + lo}{m[4] or ''} @@")


def _edit_file(rt: RunRuntime, tool_call_id: int, path: str, new_text: str,
               old_text: str | None, replace_all: bool) -> EditFileResult:
    ws = rt.workspace
    parts = ws.parts(path, write=True)
    if not parts:
        raise WorkspaceError(f"{path!r} is the workspace itself, not a file")
    fs = ws.fs(rt.owner)
    rel = show(parts)
    old, mode, exists = "", 0o644, True
    try:
        fd = fs.open(parts, _READ_FLAGS)
    except FileNotFoundError:
        exists = False
    except OSError as exc:
        raise explain(parts, exc) from None
    if exists:
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise WorkspaceError(f"{path!r} is a directory")
            check_regular(parts, st)
            if st.st_size > MAX_EDIT_BYTES:
                raise WorkspaceError(f"{path!r} is {st.st_size} bytes: edit_file edits files of "
                                     f"at most {MAX_EDIT_BYTES} bytes (use run_command)")
            raw = read_fd(fd, MAX_EDIT_BYTES + 1)
        finally:
            os.close(fd)
        if _is_binary(raw[:8192]):
            raise WorkspaceError(f"{path!r} is a binary file; edit_file only edits text")
        old, mode = raw.decode("utf-8", errors="replace"), st.st_mode & 0o777
    if old_text is None:
        new, count = new_text, 0
    else:
        if not exists:
            raise WorkspaceError(f"{path!r} does not exist; omit old_text to create it")
        if old_text == "":
            raise WorkspaceError("old_text is empty; omit it to overwrite the whole file")
        count = old.count(old_text)
        if count == 0:
            raise WorkspaceError(f"old_text was not found in {path!r}; read_file it and copy "
                                 "the exact text, whitespace included")
        if count > 1 and not replace_all:
            raise WorkspaceError(f"old_text occurs {count} times in {path!r}; include more "
                                 "context so that it matches once, or set replace_all=true")
        new = old.replace(old_text, new_text) if replace_all else old.replace(old_text, new_text, 1)
    try:
        data = new.encode("utf-8")
    except UnicodeEncodeError:
        raise WorkspaceError("new_text holds characters that cannot be written as UTF-8 "
                             "(lone surrogates)") from None
    if len(data) > MAX_EDIT_BYTES:
        raise WorkspaceError(f"the new {path!r} would be {len(data)} bytes: edit_file writes "
                             f"files of at most {MAX_EDIT_BYTES} bytes")
    fs.write(parts, data, mode=mode)
    rt.scanner.scan("edit_file", tool_call_id, only=[rel])
    return EditFileResult(path=rel, created=not exists, replacements=count,
                          diff=_diff(old, new, rel), bytes_written=len(data))


async def edit_file(
    path: Annotated[str, Field(description="file path relative to the workspace")],
    new_text: Annotated[str, Field(description="the new content, or the replacement text")],
    old_text: Annotated[str | None, Field(
        description="text to replace; omit to create or overwrite the whole file")] = None,
    replace_all: Annotated[bool, Field(
        description="replace every occurrence of old_text instead of exactly one")] = False,
) -> EditFileResult:
    """Create, overwrite or edit a text file in the workspace.

    Without `old_text` the file is written with `new_text` (directories are created).
    With `old_text`, exactly one occurrence is replaced by `new_text`; if it occurs several
    times, give more surrounding context or set `replace_all`. Returns a short diff.
    """
    call = current()
    return await in_thread(_edit_file, call.runtime, call.tool_call_id, path,
                                          new_text, old_text, replace_all)
