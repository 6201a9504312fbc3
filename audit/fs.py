"""The agent's workspace as the audit opens it: from directory fds, one name at a time, never
through a link, at any depth.

Why not paths: the workspace is the agent's, and it shapes it against its reader. A chain of
folders deeper than PATH_MAX makes any path-based call (pathlib, `os.walk`, `open(path)`)
fail with ENAMETOOLONG, which crashed the contamination check before (issue 43); a symlink
swapped in for a folder would lead a path-based reader out of the workspace. Here every open
is `openat(dir_fd, name, O_NOFOLLOW)` of one component, so no path is ever longer than a
name, a link is never followed (ELOOP/ENOTDIR: noted, not read), and only regular files are
read (O_NONBLOCK: a FIFO cannot hang the audit). The walk is iterative (no recursion limit)
and holds at most `MAX_HELD` directory fds: an ancestor that must be left open is closed past
that and reopened from its nearest open ancestor when the walk comes back to it.

Failures are values, not exceptions: a file or folder that cannot be opened is reported with
its reason (`Problem`), and the checks say what they could not read instead of crashing.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: directory fds one reader keeps open at most (its chain of parents, a walk's ancestors)
MAX_HELD = 256
#: entries a walk lists at most before it stops (and says so)
MAX_WALK_ENTRIES = 2_000_000


def split(rel: str) -> tuple[str, ...] | None:
    """The components of a workspace-relative path as the store names it; None for one that
    cannot name a file below the root (empty, `..`, NUL)."""
    parts = tuple(p for p in rel.split("/") if p not in ("", "."))
    if not parts or ".." in parts or "\x00" in rel:
        return None
    return parts


_WHY = {errno.ENOENT: "gone", errno.ELOOP: "a symlink", errno.ENOTDIR: "a link or file on the way",
        errno.ENAMETOOLONG: "name too long", errno.EACCES: "permission denied",
        errno.EMFILE: "out of file descriptors", errno.EINVAL: "not a regular file"}


def why(exc: OSError) -> str:
    """An OSError as the few words a summary shows."""
    return _WHY.get(exc.errno or 0, os.strerror(exc.errno or 0))


@dataclass
class Walked:
    """What a walk saw besides its files: entries listed, whether it stopped at its cap, and
    the folders it could not list (path -> reason)."""

    entries: int = 0
    stopped: bool = False
    problems: dict[str, str] = field(default_factory=dict)


@dataclass
class _Frame:
    parts: tuple[str, ...]
    fd: int | None
    pending: deque[str] | None = None


class Tree:
    """Files below `root` (a folder the host owns; everything under it is the agent's)."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._chain: list[tuple[str, int]] = []  # the open folders of the last parent opened

    def close(self) -> None:
        for _, fd in self._chain:
            os.close(fd)
        self._chain = []
        os.close(self.root_fd)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one file at a time ---------------------------------------------------------------

    def _parent(self, parts: tuple[str, ...]) -> tuple[int, bool]:
        """An fd of the folder `parts` and whether the caller must close it. The chain of
        folders opened last is kept (up to MAX_HELD), so files read in path order cost one
        open each, whatever their depth."""
        keep = 0
        while (keep < len(self._chain) and keep < len(parts)
               and self._chain[keep][0] == parts[keep]):
            keep += 1
        for _, fd in self._chain[keep:]:
            os.close(fd)
        del self._chain[keep:]
        fd = self._chain[-1][1] if self._chain else self.root_fd
        owned = False
        for name in parts[keep:]:
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            finally:
                if owned:
                    os.close(fd)
            if len(self._chain) < MAX_HELD and not owned:
                self._chain.append((name, nfd))
            else:
                owned = True
            fd = nfd
        return fd, owned

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result:
        """The stat of `parts` itself (OSError as the kernel gives it)."""
        fd, owned = self._parent(parts[:-1])
        try:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        finally:
            if owned:
                os.close(fd)

    def open(self, parts: tuple[str, ...]) -> tuple[int, os.stat_result]:
        """An fd of the regular file `parts` and its fstat; OSError otherwise (ELOOP for a
        link, EINVAL for a FIFO, device or folder)."""
        fd, owned = self._parent(parts[:-1])
        try:
            return open_at(fd, parts[-1])
        finally:
            if owned:
                os.close(fd)

    # -- the whole tree -------------------------------------------------------------------

    def walk(self, walked: Walked, max_entries: int = MAX_WALK_ENTRIES,
             ) -> Iterator[tuple[tuple[str, ...], os.stat_result, int]]:
        """(parts, lstat, the fd of its folder: valid until the next step) of every regular
        file, depth first, names sorted; links and special files are listed, never followed
        or opened. Stops after `max_entries` listed entries (`walked.stopped`)."""
        stack = [_Frame((), os.dup(self.root_fd))]
        held = 1
        try:
            while stack:
                fr = stack[-1]
                if fr.pending is None:
                    assert fr.fd is not None
                    fr.pending = deque()
                    try:
                        with os.scandir(fr.fd) as it:
                            entries = sorted(it, key=lambda e: e.name)
                    except OSError as exc:
                        walked.problems["/".join(fr.parts) or "."] = why(exc)
                        entries = []
                    for entry in entries:
                        walked.entries += 1
                        if walked.entries > max_entries:
                            walked.stopped = True
                            return
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                fr.pending.append(entry.name)
                            elif entry.is_file(follow_symlinks=False):
                                st = os.stat(entry.name, dir_fd=fr.fd, follow_symlinks=False)
                                if stat.S_ISREG(st.st_mode):
                                    yield (*fr.parts, entry.name), st, fr.fd
                        except OSError:
                            continue  # gone since the listing
                if not fr.pending:
                    if fr.fd is not None:
                        os.close(fr.fd)
                        held -= 1
                    stack.pop()
                    continue
                name = fr.pending.popleft()
                if fr.fd is None:
                    fr.fd = self._reopen(stack)
                    held += 1
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fr.fd)
                except OSError as exc:
                    walked.problems["/".join((*fr.parts, name))] = why(exc)
                    continue
                if not fr.pending or held >= MAX_HELD:  # not needed again, or too many held
                    os.close(fr.fd)
                    fr.fd = None
                    held -= 1
                stack.append(_Frame((*fr.parts, name), child))
                held += 1
        finally:
            for fr in stack:
                if fr.fd is not None:
                    os.close(fr.fd)

    def _reopen(self, stack: list[_Frame]) -> int:
        """The fd of the top frame's folder, opened again from its nearest open ancestor."""
        top = stack[-1]
        for anc in reversed(stack[:-1]):
            if anc.fd is not None:
                fd, rest, owned = anc.fd, top.parts[len(anc.parts):], False
                break
        else:
            fd, rest, owned = self.root_fd, top.parts, False
        for name in rest:
            nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            if owned:
                os.close(fd)
            fd, owned = nfd, True
        return fd if owned else os.dup(fd)


def open_at(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """The regular file `name` of the folder `dir_fd`, opened without following a link and
    without blocking; OSError(EINVAL) when it is not a regular file."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", name)
    return fd, st


def open_file(path: Path) -> tuple[int, os.stat_result]:
    """A host file the audit owns the folder of (a job's log in the supervisor's folder),
    opened as `open_at` does."""
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(parent, path.name)
    finally:
        os.close(parent)
