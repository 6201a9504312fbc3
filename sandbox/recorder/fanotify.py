"""fanotify(7) through ctypes: the group, the filesystem mark, the events and the answers.

Python has no binding; libc has `fanotify_init` and `fanotify_mark`, and the rest is reading
and writing fixed structs on the group's descriptor. Only what the recorder uses is here: a
content-class group (permission events, so an opener waits, alive, until it is named) whose
events carry a pidfd of their process (`FAN_REPORT_PIDFD`, Linux 5.15), and a mark on a whole
filesystem (`FAN_MARK_FILESYSTEM`, Linux 4.20)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from dataclasses import dataclass

FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_CLASS_CONTENT = 0x4
FAN_UNLIMITED_QUEUE = 0x10
FAN_REPORT_PIDFD = 0x80

FAN_MARK_ADD = 0x1
FAN_MARK_FILESYSTEM = 0x100

FAN_CLOSE_WRITE = 0x8
FAN_CLOSE_NOWRITE = 0x10
FAN_Q_OVERFLOW = 0x4000
FAN_OPEN_PERM = 0x10000

FAN_ALLOW = 0x1
FAN_NOFD = -1
FAN_EVENT_INFO_TYPE_PIDFD = 4
AT_FDCWD = -100

METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
INFO_HEADER = struct.Struct("=BBH")  # info_type, pad, len
RESPONSE = struct.Struct("=iI")  # fd, response

#: what the recorder listens for: every open (answered) and every close, read or written
MASK = FAN_OPEN_PERM | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_init.restype = ctypes.c_int
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]
_libc.fanotify_mark.restype = ctypes.c_int


class FanotifyError(OSError):
    """The kernel refused the group or the mark (one line, for the run's record)."""


def _fail(what: str) -> FanotifyError:
    errno = ctypes.get_errno()
    return FanotifyError(errno, f"{what}: {os.strerror(errno)}")


def open_group() -> int:
    """A content-class group whose queue never drops an event. Event descriptors are opened
    read-only and non-blocking (a FIFO would otherwise hold the recorder); they never raise
    events themselves (the kernel opens them with FMODE_NONOTIFY)."""
    flags = (FAN_CLOEXEC | FAN_NONBLOCK | FAN_CLASS_CONTENT | FAN_UNLIMITED_QUEUE
             | FAN_REPORT_PIDFD)
    fd = _libc.fanotify_init(flags, os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC | os.O_NONBLOCK)
    if fd < 0:
        raise _fail("fanotify_init")
    return int(fd)


def mark_filesystem(group: int, path: str) -> None:
    """Watch every file of the filesystem `path` is on, through whichever mount it is
    opened (a bind mount in a sandbox, a container's)."""
    if _libc.fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, MASK, AT_FDCWD,
                           path.encode()) < 0:
        raise _fail(f"fanotify_mark on {path}")


@dataclass(slots=True)
class Event:
    mask: int
    fd: int  # a descriptor on the file (FAN_NOFD for an overflow)
    pid: int  # the process that caused it, as this (the host's) pid namespace numbers it
    pidfd: int  # a pidfd of that process when it was read; < 0 once it was reaped

    @property
    def permission(self) -> bool:
        return bool(self.mask & FAN_OPEN_PERM)


def parse(buf: bytes) -> list[Event]:
    """The events in one read of the group's descriptor."""
    events = []
    offset = 0
    while offset + METADATA.size <= len(buf):
        length, _vers, _, meta_len, mask, fd, pid = METADATA.unpack_from(buf, offset)
        if length < METADATA.size:
            break  # never from a sane kernel; stop rather than loop
        pidfd = -1
        info = offset + meta_len
        while info + INFO_HEADER.size <= offset + length:
            kind, _pad, info_len = INFO_HEADER.unpack_from(buf, info)
            if info_len <= 0:
                break
            if kind == FAN_EVENT_INFO_TYPE_PIDFD:
                pidfd = struct.unpack_from("=i", buf, info + INFO_HEADER.size)[0]
            info += info_len
        events.append(Event(mask, fd, pid, pidfd))
        offset += length
    return events


def allow(group: int, fd: int) -> None:
    """Let the opener of a permission event go on."""
    with contextlib.suppress(OSError):  # ENOENT: the opener is gone, nothing waits
        os.write(group, RESPONSE.pack(fd, FAN_ALLOW))
