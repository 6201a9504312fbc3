"""The channel between the tests' process and the candidate's: plain data in length-prefixed
frames.

A value crosses only as JSON built from exact builtin types: None, bool, int, float (nan and
inf included), str, list, and tagged one-key objects for tuple, dict, set and frozenset
(`{"tuple": [...]}`, `{"dict": [[key, value], ...]}`). `type(v) is T` decides, so a subclass
(an `int` whose `__eq__` always answers True) is refused, as is anything else (a generator, a
lazy object, a class instance). The receiver rebuilds fresh builtin values: nothing of the
sender's objects survives the trip, so no code of the sender runs on the receiving side.

A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON; a frame over
`MAX_FRAME_BYTES` is refused before it is read.

This file is stdlib only and has no imports of the package: its source is also shipped as is
into both processes (`grader.py` prepends it to each side's script).
"""

import json
import os
import struct

MAX_FRAME_BYTES = 4 << 20
MAX_DEPTH = 64
_HEADER = struct.Struct(">I")
_SCALARS = (type(None), bool, int, float, str)
_COLLECTIONS = {tuple: "tuple", set: "set", frozenset: "frozenset"}


class WireError(Exception):
    """A value that cannot cross, or a frame that is not one."""


def _tag(value: object, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [_tag(v, depth + 1) for v in value]
    if kind is dict:
        return {"dict": [[_tag(k, depth + 1), _tag(v, depth + 1)] for k, v in value.items()]}
    if kind in _COLLECTIONS:
        return {_COLLECTIONS[kind]: [_tag(v, depth + 1) for v in value]}
    raise WireError(f"a {kind.__name__} is not plain data")


def _untag(value: object, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind is list:
        return [_untag(v, depth + 1) for v in value]
    if kind is not dict:
        return value  # json.loads makes only None, bool, int, float, str besides
    if len(value) != 1:
        raise WireError("a tagged value has exactly one key")
    ((tag, items),) = value.items()
    if type(items) is not list:
        raise WireError(f"a {tag!r} holds a list")
    if tag == "dict":
        if any(type(pair) is not list or len(pair) != 2 for pair in items):
            raise WireError("a dict is a list of [key, value] pairs")
        return {_untag(k, depth + 1): _untag(v, depth + 1) for k, v in items}
    members = [_untag(v, depth + 1) for v in items]
    if tag == "tuple":
        return tuple(members)
    if tag == "set":
        return set(members)
    if tag == "frozenset":
        return frozenset(members)
    raise WireError(f"unknown tag {tag!r}")


def encode(value: object) -> bytes:
    """`value` as a frame's payload; WireError when it is not plain data."""
    try:
        text = json.dumps(_tag(value, 0), allow_nan=True, separators=(",", ":"))
    except (ValueError, RecursionError) as exc:  # an int past str()'s digit limit
        raise WireError(f"cannot encode: {exc}") from None
    return text.encode()


def decode(payload: bytes) -> object:
    """The plain value a payload holds; WireError for anything else."""
    if len(payload) > MAX_FRAME_BYTES:
        raise WireError(f"a frame over {MAX_FRAME_BYTES} bytes")
    try:
        return _untag(json.loads(payload.decode()), 0)
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:  # bad JSON, unhashable key
        raise WireError(f"not a plain value: {type(exc).__name__}") from None


def write_frame(fd: int, payload: bytes) -> None:
    data = _HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks: list[bytes] = []
    left = n
    while left:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> bytes | None:
    """The next frame's payload; None at end of stream; WireError over `limit`."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise WireError(f"a frame of {size} bytes (at most {limit})")
    payload = _read_exact(fd, size)
    if payload is None:
        raise WireError("the stream ended inside a frame")
    return payload
