"""Opening files inside a workspace so that the agent can never redirect us.

Why: the agent runs any code in its sandbox, so anything under its workspace can change between
a check and a use (a folder flipped to a symlink a few hundred times a second wins any
"resolve, check, then open by name" race). So no path under a workspace is ever opened by name
from the host's root: every open starts from a directory fd on the workspace root, and the
kernel resolves the rest with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS`: a path that would leave the root or pass through any symlink fails with
an error at resolution time, atomically. Where `openat2` is missing (Linux before 5.6, or a
seccomp filter that denies it), each component is opened with `openat(O_NOFOLLOW)` from the
previous one's fd: more system calls, the same guarantee.

Files are opened `O_NONBLOCK` (a FIFO cannot hang the server) and `fstat`ed on the open fd:
only regular files are read, only directories listed. Writes go to a temporary file in the
parent directory's fd and are renamed over the target, so a symlink or hard link planted at the
target is replaced, never written through. Walks are iterative with depth and entry caps (a
tower of 1,500 nested folders costs a bounded walk, never a RecursionError).

Every refusal is a `WorkspaceError`: a `ToolError` whose one line the agent can act on.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

SYS_OPENAT2 = 437  # the same number on every architecture (new syscalls share one table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
#: How deep and how wide a walk goes before it stops (and says so).
MAX_WALK_DEPTH = 64
MAX_WALK_ENTRIES = 200_000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceError(ToolError):
    """A path the agent gave that we will not follow; the message is one line it can act on."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def openat2(dirfd: int, path: str | bytes, flags: int, mode: int = 0,
            resolve: int = RESOLVE) -> int:
    """`openat2(2)` (Python 3.11 has no wrapper); raises OSError like `os.open`."""
    raw = os.fsencode(path)
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, resolve)
    while True:
        fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd),
                           ctypes.c_char_p(raw), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        # EAGAIN: a concurrent rename somewhere in the tree; the kernel asks us to retry
        if err not in (errno.EINTR, errno.EAGAIN):
            raise OSError(err, os.strerror(err), os.fsdecode(raw))


def _probe_openat2() -> bool:
    root = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        os.close(openat2(root, ".", os.O_PATH | os.O_CLOEXEC))
    except OSError as exc:
        return exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)
    finally:
        os.close(root)
    return True


#: Whether this kernel (and seccomp profile) has openat2; probed once.
HAVE_OPENAT2 = _probe_openat2()


def split_path(rel: str, *, what: str = "path") -> tuple[str, ...]:
    """The components of a workspace-relative path, refusing what can never be inside.

    Lexical only ('..' is folded where it stays inside); symlinks are the kernel's business
    at open time. `()` is the workspace root itself.
    """
    if not isinstance(rel, str) or not rel.strip():
        raise WorkspaceError(f"{what} is empty: give a path relative to the workspace, "
                             "e.g. 'code/train.py'")
    if "\x00" in rel:
        raise WorkspaceError(f"{what} contains a NUL byte")
    try:
        raw = rel.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise WorkspaceError(f"{what} is not valid UTF-8") from None
    if len(raw) > MAX_PATH_BYTES:
        raise WorkspaceError(f"{what} is too long ({len(raw)} bytes; at most {MAX_PATH_BYTES})")
    if rel.startswith("/"):
        raise WorkspaceError(
            f"{what} {rel!r} is absolute: paths are relative to the workspace root "
            "(for example 'code/train.py' or 'output/ckpt')")
    norm = posixpath.normpath(rel)
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    if parts and parts[0] == "..":
        raise WorkspaceError(f"{what} {rel!r} resolves outside the workspace (via '..'); "
                             "only files inside the workspace can be used")
    for p in parts:
        if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise WorkspaceError(f"a name in {what} is too long ({len(p)} characters; "
                                 f"at most {MAX_NAME_BYTES} bytes per name)")
    return parts


def show(parts: tuple[str, ...]) -> str:
    return "/".join(parts) or "."


_ERRORS = {
    errno.ENOENT: "{p!r} does not exist; use list_files to see what is there",
    errno.ELOOP: ("{p!r} is or passes through a symlink; symlinks are not followed (they could "
                  "lead outside the workspace)"),
    errno.EXDEV: "{p!r} resolves outside the workspace; only files inside it can be used",
    errno.ENOTDIR: ("{p!r}: a folder on the way is a file or a symlink (symlinks are not "
                    "followed)"),
    errno.ENAMETOOLONG: "{p!r} is too long for the filesystem",
    errno.EACCES: "{p!r}: permission denied",
    errno.EPERM: "{p!r}: operation not permitted",
    errno.ENXIO: "{p!r} is a socket or a device, not a regular file",
    errno.EISDIR: "{p!r} is a directory",
    errno.ENOSPC: "no space left in the workspace while writing {p!r}",
    errno.EDQUOT: "the workspace's disk quota is exhausted while writing {p!r}",
    errno.EROFS: "{p!r} is on a read-only filesystem",
    errno.EFBIG: "{p!r} is larger than the largest file allowed",
}


def explain(parts: tuple[str, ...], exc: OSError) -> WorkspaceError:
    """One line for an OSError on `parts` (the path as the agent gave it, normalized)."""
    template = _ERRORS.get(exc.errno or 0, "{p!r}: {e}")
    return WorkspaceError(template.format(p=show(parts), e=os.strerror(exc.errno or 0)))


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


@dataclass
class Entry:
    """One thing found by a walk: its workspace-relative parts and its lstat."""

    parts: tuple[str, ...]
    st: os.stat_result
    #: the fd of the directory holding it, valid only while the walk is at this entry
    dir_fd: int


class WorkspaceFS:
    """Safe file access below `root` (a host path we own; everything under it is the agent's).

    `owner` (uid, gid): who must own what we create, when the sandbox's user is not ours.
    `use_openat2=False` forces the per-component fallback (tests cover both).
    """

    def __init__(self, root: Path, *, owner: tuple[int, int] | None = None,
                 use_openat2: bool | None = None) -> None:
        self.root = Path(root)
        self.owner = owner
        self.use_openat2 = HAVE_OPENAT2 if use_openat2 is None else use_openat2

    # -- opening ------------------------------------------------------------------------

    def _root_fd(self) -> int:
        return os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def open(self, parts: tuple[str, ...], flags: int, mode: int = 0o644) -> int:
        """An fd for `parts` opened with `flags` (O_NOFOLLOW and O_CLOEXEC added); OSError as
        the kernel gives it (ELOOP for any symlink on the way, EXDEV for an escape)."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        root = self._root_fd()
        try:
            if self.use_openat2:
                return openat2(root, "/".join(parts) or ".", flags, mode)
            return self._open_by_components(root, parts, flags, mode)
        finally:
            os.close(root)

    @staticmethod
    def _open_by_components(root: int, parts: tuple[str, ...], flags: int, mode: int) -> int:
        if not parts:
            return os.open(".", flags & ~os.O_NOFOLLOW, mode, dir_fd=root)
        fd = os.dup(root)
        try:
            for name in parts[:-1]:
                # a symlink here fails with ENOTDIR (O_PATH|O_NOFOLLOW|O_DIRECTORY)
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
                os.close(fd)
                fd = nxt
            return os.open(parts[-1], flags, mode, dir_fd=fd)
        finally:
            os.close(fd)

    def open_node(self, parts: tuple[str, ...]) -> tuple[int, os.stat_result]:
        """Open `parts` for reading without blocking, whatever it is; (fd, fstat)."""
        try:
            fd = self.open(parts, _READ_FLAGS)
        except OSError as exc:
            raise explain(parts, exc) from None
        return fd, os.fstat(fd)

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        """The stat of `parts` itself (a symlink is not followed), None when absent."""
        if not parts:
            return os.stat(self.root)
        try:
            parent = self.open(parts[:-1], os.O_PATH | os.O_DIRECTORY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise explain(parts, exc) from None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise explain(parts, exc) from None
        finally:
            os.close(parent)

    # -- reading ------------------------------------------------------------------------

    def read(self, parts: tuple[str, ...], max_bytes: int) -> tuple[bytes, os.stat_result]:
        """Up to `max_bytes` of the regular file `parts`, and its fstat (size is the whole)."""
        fd, st = self.open_node(parts)
        try:
            check_regular(parts, st)
            return read_fd(fd, max_bytes), st
        finally:
            os.close(fd)

    def walk(self, parts: tuple[str, ...] = (), *, max_depth: int = MAX_WALK_DEPTH,
             max_entries: int = MAX_WALK_ENTRIES, prune: frozenset[str] = frozenset(),
             regular_only: bool = False, stats: WalkStats | None = None,
             ) -> Iterator[Entry]:
        """Every entry below the directory `parts`, depth first, names sorted; symlinks are
        reported and never followed; folders deeper than `max_depth` are not entered (counted
        in `stats.deep`).

        `regular_only`: only folders and regular files are reported and counted; links and
        special files are passed over by their directory entry's type, without a stat (a
        hundred thousand symlinks cost a listing, not the walk's cap: issue 43).

        Iterative (one fd per level held), so the depth of the tree costs no Python stack.
        Raises `WalkCapped` after `max_entries` entries.
        """
        fd, st = self.open_node(parts)
        if not stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise WorkspaceError(f"{show(parts)!r} is a {kind_of(st.st_mode)}, not a directory")
        stack: list[tuple[int, tuple[str, ...], Iterator[str]]] = []
        count = 0
        listing = _regular_names if regular_only else _sorted_names
        try:
            stack.append((fd, parts, iter(listing(fd))))
            while stack:
                dfd, dparts, names = stack[-1]
                name = next(names, None)
                if name is None:
                    os.close(dfd)
                    stack.pop()
                    continue
                try:
                    est = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                count += 1
                if count > max_entries:
                    raise WalkCapped(max_entries)
                child = (*dparts, name)
                yield Entry(child, est, dfd)
                if stat.S_ISDIR(est.st_mode) and "/".join(child) not in prune:
                    if len(stack) >= max_depth:
                        if stats is not None:
                            stats.deep += 1
                        continue
                    try:
                        cfd = os.open(name, _DIR_FLAGS | os.O_NONBLOCK, dir_fd=dfd)
                    except OSError:
                        continue  # replaced by a symlink or a file since: not entered
                    stack.append((cfd, child, iter(listing(cfd))))
        finally:
            for dfd, _, _ in stack:
                os.close(dfd)

    # -- writing ------------------------------------------------------------------------

    def makedirs(self, parts: tuple[str, ...]) -> tuple[int, list[tuple[str, ...]]]:
        """An O_PATH fd on the directory `parts`, created (mkdirat, one level at a time) where
        missing; also the folders created, chowned to `owner`."""
        created: list[tuple[str, ...]] = []
        fd = self._root_fd()
        try:
            for i, name in enumerate(parts):
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                    created.append(parts[:i + 1])
                    if self.owner is not None:
                        os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as exc:
            os.close(fd)
            raise explain(parts, exc) from None
        return fd, created

    def write(self, parts: tuple[str, ...], data: bytes, *, mode: int = 0o644
              ) -> list[tuple[str, ...]]:
        """Replace (or create) the file `parts` with `data`: a temporary file in the parent's
        fd, then `renameat` over the name. Returns the folders created on the way."""
        if not parts:
            raise WorkspaceError("'.' is the workspace itself, not a file")
        parent, created = self.makedirs(parts[:-1])
        tmp = f".{parts[-1][:200]}.a2rl-{secrets.token_hex(4)}.tmp"
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=parent)
            except OSError as exc:
                raise explain(parts, exc) from None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode & 0o777)
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
            except OSError as exc:
                os.close(fd)
                os.unlink(tmp, dir_fd=parent)
                raise explain(parts, exc) from None
            os.close(fd)
            try:
                os.rename(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except OSError as exc:
                os.unlink(tmp, dir_fd=parent)
                raise explain(parts, exc) from None
        finally:
            os.close(parent)
        return created


class WalkCapped(Exception):
    """A walk met more entries than its cap."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"more than {cap} entries")
        self.cap = cap


@dataclass
class WalkStats:
    """What a walk passed over: folders below its depth cap."""

    deep: int = 0


def _sorted_names(dir_fd: int) -> list[str]:
    try:
        return sorted(os.listdir(dir_fd))
    except OSError:
        return []


def _regular_names(dir_fd: int) -> list[str]:
    """The folders' and regular files' names (by the entry's type: no stat), sorted."""
    try:
        with os.scandir(dir_fd) as it:
            return sorted(e.name for e in it
                          if e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False))
    except OSError:
        return []


def check_regular(parts: tuple[str, ...], st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"{show(parts)!r} is a directory; use list_files(path="
                             f"{show(parts)!r})")
    if not stat.S_ISREG(st.st_mode):
        raise WorkspaceError(f"{show(parts)!r} is a {kind_of(st.st_mode)}, not a regular file; "
                             "only regular files are read")


def read_fd(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
