"""Bounding command output: one place decides truncation for every tool and backend."""

from __future__ import annotations

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


def read_bounded(path: Path, head: int, tail: int, offset: int = 0) -> BoundedOutput:
    """Bound a file's content from `offset` on without reading more than head + tail bytes."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return BoundedOutput(text="", total_bytes=0, truncated=False)
    offset = min(max(offset, 0), size)
    length = size - offset
    with path.open("rb") as f:
        f.seek(offset)
        if length <= head + tail:
            return bound_bytes(f.read(length), head, tail)
        first = f.read(head)
        f.seek(size - tail)
        last = f.read(tail)
    omitted = length - head - tail
    text = (_decode(first) + f"\n[... {omitted} bytes omitted; the full output is in the log"
            " file ...]\n" + _decode(last))
    return BoundedOutput(text=text, total_bytes=length, truncated=True)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
