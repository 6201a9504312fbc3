"""read_file, list_files and edit_file: the agent's view of its workspace."""

from __future__ import annotations

import difflib
import mimetypes
import os
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from .results import EditFileResult, FileEntry, ListFilesResult, ReadFileResult
from .runtime import current

MAX_READ_BYTES = 2_000_000
MAX_LINE_CHARS = 2_000
MAX_ENTRIES = 500
MAX_DIFF_CHARS = 4_000

_MAGIC = {
    b"\x89PNG": "PNG image", b"PK\x03\x04": "zip archive", b"\x7fELF": "ELF executable",
    b"\x1f\x8b": "gzip archive", b"GGUF": "GGUF model file",
}


def _describe_binary(path: Path, head: bytes) -> str:
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    if path.suffix == ".safetensors":
        return "safetensors weights"
    if path.suffix in {".bin", ".pt", ".pth"}:
        return "binary weights file (pickle)"
    guess = mimetypes.guess_type(path.name)[0]
    return guess or "binary data"


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a cut multibyte char at the end is fine
    return False


async def read_file(
    path: Annotated[str, Field(description="file path relative to the workspace")],
    offset: Annotated[int, Field(ge=0, description="0-based line to start at")] = 0,
    limit: Annotated[int, Field(ge=1, le=5000, description="number of lines to return")] = 400,
) -> ReadFileResult:
    """Read a text file of the workspace, with line numbers, a page at a time.

    Lines are numbered from 1; pass `next_offset` back as `offset` to read the next page.
    A binary file (weights, archives) is described (type and size) instead of shown.
    Long lines are cut at 2,000 characters.
    """
    ws = current().runtime.workspace
    target = ws.resolve(path)
    if not target.exists():
        raise ToolError(f"{path!r} does not exist; use list_files to see what is there")
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory; use list_files(path={path!r})")
    size = target.stat().st_size
    with target.open("rb") as f:
        head = f.read(8192)
    if _is_binary(head):
        kind = _describe_binary(target, head)
        return ReadFileResult(path=path, size=size, binary=True,
                              description=f"binary file: {kind}, {size} bytes; not shown")

    def _read() -> ReadFileResult:
        with target.open("rb") as f:
            data = f.read(MAX_READ_BYTES)
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

    return await anyio.to_thread.run_sync(_read)


async def list_files(
    path: Annotated[str, Field(description="directory relative to the workspace")] = ".",
    depth: Annotated[int, Field(ge=1, le=6, description="how many levels to descend")] = 2,
) -> ListFilesResult:
    """List files and directories of the workspace with their sizes.

    Read-only inputs (the base model, the training data) are marked `read_only`.
    """
    rt = current().runtime
    ws = rt.workspace
    root = ws.resolve(path)
    if not root.exists():
        raise ToolError(f"{path!r} does not exist")
    if not root.is_dir():
        raise ToolError(f"{path!r} is a file; use read_file to read it")

    def _list() -> ListFilesResult:
        entries: list[FileEntry] = []
        truncated = False
        readonly = [Path(p) for p in ws.readonly]

        def walk(d: Path, level: int) -> None:
            nonlocal truncated
            try:
                children = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                return
            for entry in children:
                if len(entries) >= MAX_ENTRIES:
                    truncated = True
                    return
                p = Path(entry.path)
                ro = any(p == r or p.is_relative_to(r) for r in readonly)
                if entry.is_symlink():
                    entries.append(FileEntry(path=ws.relative(p), type="symlink", read_only=ro))
                elif entry.is_dir():
                    entries.append(FileEntry(path=ws.relative(p) + "/", type="dir", read_only=ro))
                    if level < depth:
                        walk(p, level + 1)
                else:
                    entries.append(FileEntry(path=ws.relative(p), type="file",
                                             size=entry.stat().st_size, read_only=ro))

        walk(root, 1)
        return ListFilesResult(path=path, entries=entries, truncated=truncated)

    return await anyio.to_thread.run_sync(_list)


def _diff(old: str, new: str, path: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=2)
    text = "".join(lines)
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + f"\n[... diff cut, {len(text)} chars in all]"
    return text


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
    ws = call.runtime.workspace
    target = ws.resolve(path, write=True)
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory")
    exists = target.exists()
    old = ""
    if exists:
        raw = target.read_bytes()
        if _is_binary(raw[:8192]):
            raise ToolError(f"{path!r} is a binary file; edit_file only edits text")
        old = raw.decode("utf-8", errors="replace")
    if old_text is None:
        new, count = new_text, 0
    else:
        if not exists:
            raise ToolError(f"{path!r} does not exist; omit old_text to create it")
        if old_text == "":
            raise ToolError("old_text is empty; omit it to overwrite the whole file")
        count = old.count(old_text)
        if count == 0:
            raise ToolError(f"old_text was not found in {path!r}; read_file it and copy the "
                            "exact text, whitespace included")
        if count > 1 and not replace_all:
            raise ToolError(f"old_text occurs {count} times in {path!r}; include more context "
                            "so that it matches once, or set replace_all=true")
        new = old.replace(old_text, new_text) if replace_all else old.replace(old_text, new_text, 1)
    created_dirs = [p for p in [target.parent, *target.parent.parents]
                    if p.is_relative_to(ws.root) and not p.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    data = new.encode("utf-8")
    target.write_bytes(data)
    if call.runtime.owner is not None:  # the sandbox's user must be able to change it too
        for p in [target, *created_dirs]:
            os.chown(p, *call.runtime.owner)
    rel = ws.relative(target)
    await anyio.to_thread.run_sync(
        lambda: call.runtime.scanner.scan("edit_file", call.tool_call_id, only=[rel]))
    return EditFileResult(path=rel, created=not exists, replacements=count,
                          diff=_diff(old, new, rel), bytes_written=len(data))
