"""The workspace path of the file an event's descriptor holds, checked against the kernel.

The kernel names the descriptor (`/proc/self/fd/N`) as the opener's mount shows it: the host's
workspace folder for a bubblewrap sandbox (bound at the same path), `/workspace` in a
container. Once the opener's sandbox is gone its mounts are detached and the same link reads
from the mount's own root (`/output/x`, or `/config.json` for a read-only input bound on its
own). So every candidate name is checked: it is the file's only if, looked up on the host's
mount of the workspace now, it is the same inode. A name that cannot be checked (the file was
renamed or deleted since) is the one the kernel gave where the mount is still attached (a
deleted file keeps its last name), else none: the access is then stored under `unnamed(st)`.

A folder chain deeper than PATH_MAX has no name the kernel can print (ENAMETOOLONG). A process
reaches such a file only from a folder it holds (its working folder, walked down to step by
step), so at the close, while the process is there, the name is rebuilt from that folder
upwards (`deep_name`): each folder's name found in its parent by inode, up to the workspace's
root. A file it did not reach that way stays unnamed.
"""

from __future__ import annotations

import errno
import os
import stat

DELETED = " (deleted)"
#: a stored path starting with "/" is not a workspace path: the kernel reported the access but
#: its file could not be named; the number is the file's inode on the workspace's filesystem
UNNAMED_PREFIX = "/unnamed/inode/"
MAX_DEPTH = 65_536  # folders walked up at most when rebuilding a deep name
PATH_MAX = 4096


def unnamed(st: os.stat_result) -> str:
    return f"{UNNAMED_PREFIX}{st.st_ino}"


class Namer:
    def __init__(self, host_root: str, roots: list[str], readonly: list[str]) -> None:
        self.host_root = host_root.rstrip("/") or "/"
        # longest first: /workspace before /w
        self.roots = sorted({r.rstrip("/") for r in [*roots, host_root] if r.rstrip("/")},
                            key=len, reverse=True)
        self.readonly = [r.strip("/") for r in readonly if r.strip("/")]
        st = os.stat(self.host_root)
        self.root_id = (st.st_dev, st.st_ino)

    def _is(self, rel: str, st: os.stat_result) -> bool:
        """Whether `rel` names the file `st` on the host's mount of the workspace now."""
        if not rel or rel.startswith("/") or "\0" in rel:
            return False
        try:
            if len(rel) < PATH_MAX // 2:
                here = os.lstat(f"{self.host_root}/{rel}")
            else:
                here = _lstat_deep(self.host_root, rel)
        except (OSError, ValueError):
            return False
        return (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)

    def checked(self, rel: str | None, st: os.stat_result) -> str | None:
        """`rel` if it names the file `st` now, else None."""
        return rel if rel is not None and self._is(rel, st) else None

    def shown(self, fd: int) -> str | None:
        """The kernel's name of the descriptor; None when it is longer than PATH_MAX."""
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            return None

    def name(self, fd: int, st: os.stat_result) -> str | None:
        shown = self.shown(fd)
        if shown is None:
            return None
        gone = st.st_nlink == 0 and shown.endswith(DELETED)
        if gone:
            shown = shown[: -len(DELETED)]
        attached = [shown[len(root) + 1:] for root in self.roots
                    if shown.startswith(root + "/")]
        detached: list[str] = []
        if shown.startswith("/"):
            tail = shown[1:]
            detached = [tail, *(f"{ro}/{tail}" for ro in self.readonly)]
        for rel in [*attached, *detached]:
            if self._is(rel, st):
                return rel
        if gone and attached:
            return attached[0]  # its last name, where its mount still showed it
        return None

    def deep_name(self, pid: int, st: os.stat_result) -> str | None:
        """The name of a file deeper than PATH_MAX that process `pid` opened from its working
        folder (or a folder below the workspace's root it holds there); None if not found."""
        try:
            here = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            base = _entry_named(here, st.st_ino, st.st_dev)
            if base is None:
                return None
            parts = [base]
            for _ in range(MAX_DEPTH):
                dst = os.fstat(here)
                if (dst.st_dev, dst.st_ino) == self.root_id:
                    return "/".join(reversed(parts))
                if dst.st_dev != self.root_id[0]:
                    return None
                up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here)
                os.close(here)
                here = up
                name = _entry_named(here, dst.st_ino, dst.st_dev)
                if name is None:
                    return None
                parts.append(name)
            return None
        except OSError:
            return None
        finally:
            os.close(here)


def _lstat_deep(root: str, rel: str) -> os.stat_result:
    """lstat of a path too long for one system call: folder by folder, never following a
    link on the way."""
    parts = rel.split("/")
    here = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            down = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=here)
            os.close(here)
            here = down
        return os.stat(parts[-1], dir_fd=here, follow_symlinks=False)
    finally:
        os.close(here)


def _entry_named(folder: int, ino: int, dev: int) -> str | None:
    """The name in the open folder `folder` of the inode `ino` (not following links)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.inode() != ino:
                continue
            try:
                found = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (found.st_dev, found.st_ino) == (dev, ino) and not stat.S_ISLNK(found.st_mode):
                return entry.name
    return None
