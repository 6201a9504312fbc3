"""The grader-owned copy of a submitted checkpoint, taken out of the workspace first.

Why copy first: the agent's jobs keep running while we look at a submission, so the folder can
change between any check and any use (the base weights swapped back in after validation, a
file replaced by a symlink to a host secret). So the submitted folder is copied once, through
`workspace_fs` (from a handle on the workspace, no symlink followed), into a grader-owned area,
and everything after (validation, hashing, grading) looks at that copy only. The copy refuses
what has no place in a checkpoint: symlinks, hard-linked files (their content is shared with a
file outside the folder), FIFOs, sockets and devices, and anything over the caps on file size,
total size (a sparse file counts at its full size: the copy would be that large), file count
and depth. The sha256 of every file is computed on the bytes copied, so a score can be traced
to exact bytes.

Why in the tools: it reads the agent's workspace, where the walls are the tools' to draw
(`workspace_fs`); grading sees only the copy and never imports the tools.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from a2rl.sandbox.workspace_fs import WalkCapped, WorkspaceError, WorkspaceFS, kind_of, show

_CHUNK = 1 << 20


class CopyCaps(BaseModel):
    """What a checkpoint copy may hold."""

    max_file_bytes: int = 200 * 2**30
    max_total_bytes: int = 400 * 2**30
    max_files: int = 2_000
    max_depth: int = 4


class CopyRefused(ValueError):
    """The submitted folder holds something a checkpoint may not; the message says what."""


def copy_checkpoint(src: Path, dest: Path, *, parts: tuple[str, ...] = (),
                    caps: CopyCaps | None = None, shown: str | None = None) -> dict[str, str]:
    """Copy the checkpoint folder `parts` below `src` into a new directory `dest`; return
    relpath -> sha256 of the bytes copied.

    `src` is a folder we trust (a workspace root); `parts` is opened from it without following
    any symlink (see the module docstring for what is refused, with `CopyRefused`). Written to
    a temporary sibling and renamed, so `dest` is either complete or absent.
    """
    caps = caps or CopyCaps()
    shown = shown or show(parts)
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    fs = WorkspaceFS(Path(src))
    hashes: dict[str, str] = {}

    def judged() -> Iterator[tuple[Any, tuple[str, ...], str]]:
        """The folder's entries, each refused or passed by the caps, the total counted."""
        total = 0
        for entry in fs.walk(parts, max_depth=caps.max_depth + 1, max_entries=caps.max_files):
            rel_parts = entry.parts[len(parts):]
            rel = "/".join(rel_parts)
            st = entry.st
            if stat.S_ISDIR(st.st_mode):
                if len(rel_parts) > caps.max_depth:
                    raise CopyRefused(f"{shown}/{rel} is nested more than {caps.max_depth} "
                                      "folders deep: a checkpoint is a flat folder")
                yield entry, rel_parts, rel
                continue
            if not stat.S_ISREG(st.st_mode):
                raise CopyRefused(f"{shown}/{rel} is a {kind_of(st.st_mode)}: a checkpoint holds "
                                  "regular files only (symlinks are not followed)")
            if st.st_nlink > 1:
                raise CopyRefused(f"{shown}/{rel} is a hard link ({st.st_nlink} names share it): "
                                  "save real files (save_pretrained does)")
            if st.st_size > caps.max_file_bytes:
                raise CopyRefused(f"{shown}/{rel} is {st.st_size} bytes, more than the "
                                  f"{caps.max_file_bytes} a checkpoint file may have")
            total += st.st_size
            if total > caps.max_total_bytes:
                raise CopyRefused(f"{shown} holds more than {caps.max_total_bytes} bytes (sparse "
                                  "files count at their full size)")
            yield entry, rel_parts, rel

    try:
        # Judged whole before a byte is copied: a folder of sparse files over the total cap
        # costs the grader no disk; the copy below judges again what it finds then.
        for _ in judged():
            pass
        for entry, rel_parts, rel in judged():
            if stat.S_ISDIR(entry.st.st_mode):
                (tmp / rel).mkdir(mode=0o700)
                continue
            hashes[rel] = _copy_file(entry.dir_fd, rel_parts[-1], entry.st, tmp / rel, shown,
                                     rel, caps.max_file_bytes)
        os.rename(tmp, dest)
    except WalkCapped:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CopyRefused(f"{shown} holds more than {caps.max_files} files and folders") from None
    except WorkspaceError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CopyRefused(str(exc)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dict(sorted(hashes.items()))


def _copy_file(dir_fd: int, name: str, seen: os.stat_result, target: Path, shown: str,
               rel: str, max_bytes: int) -> str:
    """Copy one file opened by name from its folder's fd (O_NOFOLLOW, O_NONBLOCK), checked
    again on the open fd: the same inode as listed, still regular, still one link."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError as exc:
        raise CopyRefused(f"{shown}/{rel} cannot be opened ({os.strerror(exc.errno or 0)}; "
                          "symlinks are not followed)") from None
    try:
        st = os.fstat(fd)
        if ((st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(st.st_mode)
                or st.st_nlink > 1):
            raise CopyRefused(f"{shown}/{rel} changed while it was being copied: submit once "
                              "the checkpoint is saved")
        h = hashlib.sha256()
        copied = 0
        with open(target, "xb") as out:
            while chunk := os.read(fd, _CHUNK):
                copied += len(chunk)
                if copied > max(st.st_size, seen.st_size) or copied > max_bytes:
                    raise CopyRefused(f"{shown}/{rel} grew while it was being copied: submit "
                                      "once the checkpoint is saved")
                h.update(chunk)
                out.write(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)
