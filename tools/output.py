"""Bounding command output: one place decides truncation for every tool and backend."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pydantic import BaseModel


class BoundedOutput(BaseModel):
    text: str
    total_bytes: int
    truncated: bool


def bound_bytes(data: bytes, head: int, tail: int) -> BoundedOutput:
    """Keep the first `head` and last `tail` bytes; undecodable bytes become U+FFFD."""
    total = len(data)
    if total <= head + tail:
        return BoundedOutput(text=_decode(data), total_bytes=total, truncated=False)
    omitted = total - head - tail
    text = (_decode(data[:head]) + f"\n[... {omitted} bytes omitted; the full output is in the"
            " log file ...]\n" + _decode(data[-tail:] if tail else b""))
    return BoundedOutput(text=text, total_bytes=total, truncated=True)


def open_log(path: Path) -> int | None:
    """A descriptor on a regular file at `path`, never following a symlink nor blocking on a
    FIFO or device; None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def log_size(path: Path) -> int:
    fd = open_log(path)
    if fd is None:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_bounded(path: Path, head: int, tail: int, offset: int = 0) -> BoundedOutput:
    """Bound a file's content from `offset` on without reading more than head + tail bytes.

    Only a regular file is read (anything else reads as empty), by position on one descriptor,
    so the file cannot be swapped for another between its size and its content."""
    fd = open_log(path)
    if fd is None:
        return BoundedOutput(text="", total_bytes=0, truncated=False)
    try:
        size = os.fstat(fd).st_size
        offset = min(max(offset, 0), size)
        length = size - offset
        if length <= head + tail:
            return bound_bytes(_pread(fd, length, offset), head, tail)
        first = _pread(fd, head, offset)
        last = _pread(fd, tail, size - tail)
    finally:
        os.close(fd)
    omitted = length - head - tail
    text = (_decode(first) + f"\n[... {omitted} bytes omitted; the full output is in the log"
            " file ...]\n" + _decode(last))
    return BoundedOutput(text=text, total_bytes=length, truncated=True)


def read_head_tail(path: Path, head: int, tail: int) -> tuple[bytes, int]:
    """The first `head` and last `tail` bytes of a regular file (joined by a marker when some
    are left out) and its size; (b"", 0) when there is no such file."""
    fd = open_log(path)
    if fd is None:
        return b"", 0
    try:
        size = os.fstat(fd).st_size
        if size <= head + tail:
            return _pread(fd, size, 0), size
        marker = f"\n[... {size - head - tail} bytes omitted ...]\n".encode()
        return _pread(fd, head, 0) + marker + _pread(fd, tail, size - tail), size
    finally:
        os.close(fd)


def _pread(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
