"""Arrays and tables as the audit reads them: numpy files, safetensors, PyTorch checkpoints,
Parquet and Arrow (the Hugging Face datasets cache).

What is text in them is read: string and byte arrays, string columns (nested in lists and
structs: a chat dataset's `messages`), a safetensors header's metadata, a pickle's strings.
What is numbers is not: a float or integer tensor's bytes are counted (`Notes.numeric`) and
skipped, so a checkpoint's weights cost nothing and the read budget goes to text. Text hidden
in a float tensor's bytes, or tokenized into integer ids, is not found: that is an encoding
the agent chose against the audit, as encryption would be.

Pickles are never unpickled: a PyTorch checkpoint's `data.pkl` is read opcode by opcode
(`pickletools.genops`, which runs nothing) to learn each storage's dtype.
"""

from __future__ import annotations

import ast
import json
import pickletools
import struct
import zipfile
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

from .decode import CHUNK, PIECE, TEXT, Ctx, Out, plain_texts

#: safetensors dtypes whose bytes are text-like (read); the others are numbers (skipped)
BYTE_DTYPES = {"U8", "I8", "BOOL"}
#: PyTorch storage types whose bytes are text-like
BYTE_STORAGES = {"ByteStorage", "CharStorage", "BoolStorage"}
MAX_HEADER = 100 << 20
#: numpy's own files keep theirs under 64 KB; a larger one is not parsed (read raw instead)
MAX_NPY_HEADER = 1 << 20
MAX_PICKLE = 64 << 20


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated")
    return data


def _range_chunks(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    f.seek(start)
    left = end - start
    while left > 0:
        data = f.read(min(CHUNK, left))
        if not data:
            return
        left -= len(data)
        yield data


# -- numpy -----------------------------------------------------------------------------------

def npy_texts(f: BinaryIO, ctx: Ctx) -> Iterator[Out]:
    """A `.npy` array read front to back: strings decoded, bytes and objects (a pickle's
    strings are plain in it) read as they are, numbers skipped."""
    magic = _read(f, 8)
    major = magic[6]
    size = struct.unpack("<H" if major == 1 else "<I", _read(f, 2 if major == 1 else 4))[0]
    if size > MAX_NPY_HEADER:
        raise ValueError(f"npy header of {size} bytes")
    header = ast.literal_eval(_read(f, size).decode("latin-1" if major < 3 else "utf-8"))
    dtype = np.dtype(header["descr"])
    count = int(np.prod(header.get("shape", ()), dtype=np.int64)) * dtype.itemsize
    rest = (f.read(CHUNK) for _ in iter(int, 1))
    chunks = _until_empty(rest)
    if dtype.kind == "U":
        yield from plain_texts(_utf32(chunks), ctx)
    elif dtype.kind in "SOV" or dtype.itemsize == 1:
        yield from plain_texts(chunks, ctx)
    else:
        ctx.notes.numeric += count


def _until_empty(chunks: Iterator[bytes]) -> Iterator[bytes]:
    for data in chunks:
        if not data:
            return
        yield data


def _utf32(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """UTF-32 (numpy's `U` strings) as UTF-8; the NUL padding between strings stays NUL, the
    boundary no n-gram spans."""
    left = b""
    for data in chunks:
        data = left + data
        cut = len(data) - len(data) % 4
        data, left = data[:cut], data[cut:]
        yield data.decode("utf-32-le", "replace").encode("utf-8", "replace")


# -- safetensors -------------------------------------------------------------------------------

def safetensors_texts(f: BinaryIO, size: int, ctx: Ctx) -> Iterator[Out]:
    """The header (names and `__metadata__`: strings) and every byte tensor; number tensors'
    bytes are skipped. Offsets are the file's own and trusted only within its size."""
    f.seek(0)
    n = struct.unpack("<Q", _read(f, 8))[0]
    raw = _read(f, n)
    header = json.loads(raw)
    yield from plain_texts(iter((raw,)), ctx)
    base = 8 + n
    for name, spec in header.items():
        if name == "__metadata__" or not isinstance(spec, dict):
            continue
        begin, end = (int(x) for x in spec.get("data_offsets", (0, 0)))
        begin, end = min(base + begin, size), min(base + end, size)
        if spec.get("dtype") in BYTE_DTYPES:
            for role, data, new in plain_texts(_range_chunks(f, begin, end), ctx):
                yield role, data, True if role == TEXT and new else new
        else:
            ctx.notes.numeric += max(end - begin, 0)


# -- PyTorch checkpoints (zip) -----------------------------------------------------------------

def storage_dtypes(pkl: bytes) -> dict[str, str]:
    """storage key -> storage type name ("FloatStorage", ...) of a PyTorch `data.pkl`, read
    opcode by opcode: a small stack machine that knows strings, ints, globals, tuples and the
    memo, and only the size of every other opcode's effect (from `pickletools`' own table)."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    found: dict[str, str] = {}
    for op, arg, _ in pickletools.genops(pkl):
        name = op.name
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("GLOBAL", "INST"):
            stack.append(("global", str(arg).replace("\n", " ")))
        elif name == "STACK_GLOBAL":
            attr, module = stack.pop(), stack.pop()
            stack.append(("global", f"{module} {attr}"))
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = stack[-1] if stack else None
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else None
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo.get(int(arg)))
        elif name == "TUPLE":
            at = marks.pop()
            items = tuple(stack[at:])
            del stack[at:]
            stack.append(items)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            k = int(name[-1])
            items = tuple(stack[-k:])
            del stack[-k:]
            stack.append(items)
        elif name == "BINPERSID":
            pid = stack.pop()
            if (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"
                    and isinstance(pid[1], tuple) and pid[1][:1] == ("global",)):
                found[str(pid[2])] = pid[1][1].rsplit(" ", 1)[-1]
            stack.append(None)
        elif (isinstance(arg, str | bytes | int) and not op.stack_before
              and len(op.stack_after) == 1):
            stack.append(arg)  # a string or an int pushed
        else:
            before = op.stack_before
            if any(s.name == "mark" for s in before):
                del stack[marks.pop():]
                before = before[:[s.name for s in before].index("mark")]
            if before:
                del stack[len(stack) - len(before):]
            stack.extend(None for s in op.stack_after if s.name != "mark")
            if any(s.name == "mark" for s in op.stack_after):
                marks.append(len(stack))
    return found


def torch_storage_kinds(z: zipfile.ZipFile, infos: list[zipfile.ZipInfo],
                        ctx: Ctx) -> dict[str, str]:
    """member name -> "numeric" | "bytes" for a PyTorch checkpoint's storages (`*/data/<key>`
    beside `*/data.pkl`); {} for any other zip, or when its pickle cannot be read (then every
    member is read as it is)."""
    pkls = [i for i in infos if i.filename.endswith("data.pkl") and i.file_size <= MAX_PICKLE]
    kinds: dict[str, str] = {}
    for info in pkls:
        prefix = info.filename[:-len("data.pkl")]
        try:
            dtypes = storage_dtypes(z.read(info))
        except Exception as exc:  # noqa: BLE001 - any malformed pickle: its storages are read
            ctx.notes.error(f"pickle {info.filename[:80]}", exc)
            continue
        ctx.notes.formats.add("torch")
        for key, kind in dtypes.items():
            kinds[f"{prefix}data/{key}"] = "bytes" if kind in BYTE_STORAGES else "numeric"
    return kinds


# -- Parquet and Arrow -------------------------------------------------------------------------

def columnar_texts(kind: str, source: object, ctx: Ctx) -> Iterator[Out]:
    """Every string in a Parquet file or an Arrow IPC file or stream, batch by batch: each
    column's strings (found through lists, structs and maps) one per line; numbers skipped."""
    # pyarrow (~50 ms) only for the Parquet and Arrow files that need it
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(source, bytes | bytearray | memoryview):
        source = pa.BufferReader(source)
    if kind == "parquet":
        batches: Iterator[Any] = pq.ParquetFile(source).iter_batches(batch_size=8192)
    elif kind == "arrow_file":
        reader = pa.ipc.open_file(source)
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        batches = iter(pa.ipc.open_stream(source))
    for batch in batches:
        yield PIECE, "\n".join(batch.schema.names).encode(), True
        for column in batch.columns:
            for leaf in _leaves(column, ctx):
                for role, data, new in plain_texts(iter((leaf,)), ctx):
                    yield role, data, True if role == TEXT else new


def _leaves(arr: Any, ctx: Ctx) -> Iterator[bytes]:
    """The strings of an Arrow array (nested ones too), joined one a line."""
    import pyarrow as pa  # loaded by `columnar_texts`, its only caller
    import pyarrow.types as t

    typ = arr.type
    if t.is_dictionary(typ):
        yield from _leaves(arr.dictionary_decode(), ctx)
    elif t.is_string(typ) or t.is_binary(typ) or t.is_large_string(typ) or t.is_large_binary(typ):
        yield _joined(arr)
    elif t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        yield from _leaves(arr.flatten(), ctx)
    elif t.is_struct(typ):
        for i in range(typ.num_fields):
            yield from _leaves(arr.field(i), ctx)
    elif t.is_map(typ):
        yield from _leaves(arr.keys, ctx)
        yield from _leaves(arr.items, ctx)
    elif isinstance(arr, pa.Array) and (t.is_string_view(typ) or t.is_binary_view(typ)):
        yield b"\n".join(v for v in arr.to_pylist() if v is not None
                         for v in [v.encode() if isinstance(v, str) else v])
    else:
        ctx.notes.numeric += arr.nbytes


def _joined(arr: Any) -> bytes:
    """A string or binary array's values, each followed by a newline, from its buffers: no
    Python step per value (a cached dataset holds millions)."""
    n = len(arr)
    if n == 0:
        return b""
    large = arr.type.id in (_large_ids())
    _, offsets_buf, data_buf = arr.buffers()
    width = 8 if large else 4
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32, count=n + 1,
                            offset=arr.offset * width).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = (np.frombuffer(data_buf, np.uint8, count=end - start, offset=start)
            if data_buf is not None and end > start else np.zeros(0, np.uint8))
    lengths = np.diff(offsets)
    out = np.empty(len(data) + n, np.uint8)
    shift = np.repeat(np.arange(n, dtype=np.int64), lengths)
    out[np.arange(len(data), dtype=np.int64) + shift] = data
    out[offsets[1:] - start + np.arange(n, dtype=np.int64)] = 10  # after each value: "\n"
    return out.tobytes()


def _large_ids() -> set[int]:
    import pyarrow as pa  # loaded by `columnar_texts` (see there)

    return {pa.large_string().id, pa.large_binary().id}
