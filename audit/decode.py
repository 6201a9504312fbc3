"""The texts inside what a job read or wrote, whatever its name says: the contamination check's
decoders.

The field's training data is rarely plain text. SFT data is JSON lines, where every newline of
a code item is the two characters `\\n` (the tokenizer would read `\\` and `n`); datasets are
cached as Arrow or Parquet; archives are gzip, zstd, tar, zip; arrays are numpy files; a
string can be base64. A file is recognised by its bytes (its magic, never its name) and
decoded into the texts it holds, each a stream of chunks with a role:

- `TEXT`: the file's own text, or the decoded content of a container (a tar's members, a
  column of strings), streamed contiguously;
- `UNESCAPED`: the same text with JSON/Python string escapes undone (JSON files are matched
  in this form only: their escapes are JSON's, not the item's);
- `PIECE`: a whole text found inside another (a base64 run decoded), matched on its own.

Everything is bounded, because the agent shapes these files against the audit: every byte a
decoder emits is taken from the file's `Quota` (a decompression bomb is cut at its share of
the read budget, and the cut is noted, never silent); containers nest at most `MAX_DEPTH`
deep; archives are read at most `MAX_MEMBERS` members; a random-access container found inside
a stream is held in memory at most `MEM_CAP` bytes. Numeric arrays (float and integer
tensors, a checkpoint's weights) are not text: their bytes are counted (`Notes.numeric`) and
skipped, while byte and string arrays are read (`audit/arrays.py`).
"""

from __future__ import annotations

import binascii
import bz2
import gzip
import io
import lzma
import re
import struct
import tarfile
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

TEXT, UNESCAPED, PIECE = 0, 1, 2
#: what a decoder yields: (role, bytes, whether a new text starts here)
Out = tuple[int, bytes, bool]

CHUNK = 4 << 20
MAX_DEPTH = 4
MAX_MEMBERS = 100_000
MEM_CAP = 256 << 20
#: a base64 run shorter than this is not decoded (shorter ones are mostly words)
B64_MIN = 16
#: a decoded base64 run is text when this share of its bytes is printable
TEXTY = 0.85
#: bytes of a text carried into the next chunk so no escape or base64 run is cut
CARRY = 64 << 10

# JSON's and Python's invalid escapes (`\q`, a regular expression's `\d`) are kept as they are
warnings.filterwarnings("ignore", "invalid escape sequence", DeprecationWarning)

try:  # optional: zstd where the zstandard wheel is installed (it is with the dev tools)
    import zstandard
except ImportError:  # pragma: no cover - depends on the environment
    zstandard = None


class Cut(Exception):
    """The file's quota is used up: its decoding stops here (noted, not silent)."""


@dataclass
class Quota:
    """Bytes one file's decoders may still emit (None: no limit)."""

    left: int | None = None

    def take(self, data: bytes) -> bytes:
        """`data`, or the part of it the quota still allows; Cut when nothing is left."""
        if self.left is None:
            return data
        if self.left <= 0:
            raise Cut
        if len(data) > self.left:
            data = data[:self.left]
        self.left -= len(data)
        return data


@dataclass
class Notes:
    """What decoding one source found: its formats, the numeric bytes it skipped, where it
    was cut and what it could not decode (for the check's summary)."""

    formats: set[str] = field(default_factory=set)
    numeric: int = 0
    cut: bool = False
    errors: list[str] = field(default_factory=list)

    def error(self, what: str, exc: BaseException) -> None:
        if len(self.errors) < 5:
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:200])


@dataclass
class Ctx:
    quota: Quota
    notes: Notes
    #: the quota of pieces found inside texts (base64 runs): separate, as a file's raw text
    #: already took its own share
    pieces: Quota = field(default_factory=Quota)
    depth: int = 0

    def deeper(self) -> Ctx:
        return Ctx(self.quota, self.notes, self.pieces, self.depth + 1)


# -- recognising a format ------------------------------------------------------------------

def sniff(head: bytes, tail: bytes = b"") -> str:
    """The format of data starting with `head` (and ending with `tail`, when known)."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bz2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:4] == b"PAR1" and (not tail or tail[-4:] == b"PAR1"):
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow_file"
    if head[:4] == b"\xff\xff\xff\xff" and len(head) >= 8:
        return "arrow_stream"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if len(head) > 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < (100 << 20):
        return "safetensors"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    return "plain"


COMPRESSED = {"gzip", "zstd", "bz2", "xz", "zip", "parquet"}


# -- text: escapes and base64 --------------------------------------------------------------

_ESCAPE = re.compile(rb'\\[nrtbf"\\/u]')
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
#: byte -> "A" in the base64 alphabet, "." elsewhere: runs are then found with `bytes.find`
#: (a regular expression over a gigabyte of text cost 11 s; this, a few tenths)
_B64_MASK = bytes(ord("A") if b in _B64_ALPHABET else ord(".") for b in range(256))
_PRINTABLE = bytes(b for b in range(256) if 32 <= b < 127 or b in (9, 10, 13) or b >= 0x80)


def unescape(data: bytes) -> bytes:
    """`data` with JSON's (and Python's) string escapes undone, UTF-8 kept: `\\n` a newline,
    `\\u00e9` an é, `\\"` a quote. One pass in C (the escapes of a gigabyte of JSON lines are
    undone at about 150 MB/s): non-ASCII characters become escapes themselves first, so raw
    UTF-8 and `\\u` escapes decode alike."""
    text = data.replace(b"\\/", b"/").decode("utf-8", "surrogateescape")
    plain = text.encode("ascii", "backslashreplace").decode("unicode_escape", "ignore")
    return plain.encode("utf-8", "surrogatepass")


def has_escapes(data: bytes) -> bool:
    return b"\\" in data and _ESCAPE.search(data) is not None


def _safe_cut(data: bytes) -> int:
    """Where a chunk of a text may be cut without splitting an escape, a base64 run or a
    UTF-8 character: after its last newline (or space) within CARRY bytes of its end."""
    floor = max(len(data) - CARRY, 0)
    for sep in (b"\n", b" "):
        at = data.rfind(sep, floor)
        if at >= 0:
            return at + 1
    return len(data)


def _texty(data: bytes) -> bool:
    """Whether decoded bytes are text: UTF-8 (nearly all of it) and printable. Random bytes,
    which a long hex or word run decodes to, are neither."""
    if not data or len(data.translate(None, _PRINTABLE)) > (1 - TEXTY) * len(data):
        return False
    return data.decode("utf-8", "replace").count("\ufffd") <= (1 - TEXTY) * len(data) / 4


def _b64_runs(text: bytes) -> Iterator[bytes]:
    """The runs of B64_MIN or more base64 characters in `text` (their `=` padding kept, an
    unpadded run cut to a multiple of four)."""
    mask = text.translate(_B64_MASK)
    needle = b"A" * B64_MIN
    pos = mask.find(needle)
    while pos >= 0:
        end = mask.find(b".", pos)
        end = len(text) if end < 0 else end
        pad = 0
        while pad < 2 and text[end + pad:end + pad + 1] == b"=":
            pad += 1
        run = text[pos:end + pad]
        yield run if pad else run[:len(run) - len(run) % 4]
        pos = mask.find(needle, end)


def base64_pieces(text: bytes, ctx: Ctx) -> Iterator[Out]:
    """The texts of the base64 runs in `text`: decoded, and decoded again when they hold a
    format (a gzip in base64), else kept when they are text."""
    for run in _b64_runs(text):
        try:
            data = binascii.a2b_base64(run)
        except (binascii.Error, ValueError):
            continue
        kind = sniff(data[:512])
        if kind != "plain" and ctx.depth < MAX_DEPTH:
            ctx.notes.formats.add(f"base64+{kind}")
            inner = Ctx(ctx.pieces, ctx.notes, ctx.pieces, ctx.depth + 1)
            try:
                for _, out, _ in bytes_texts(data, inner):
                    yield PIECE, out, True
            except Cut:
                raise
            except Exception as exc:  # noqa: BLE001 - a run that only looks like a format
                # (random bytes that start like a gzip): noted, and the text around it is
                # still read, once; the file is not read again raw past its grant
                ctx.notes.error(f"base64 run as {kind}", exc)
        elif _texty(data):
            ctx.notes.formats.add("base64")
            yield PIECE, ctx.pieces.take(data), True


def plain_texts(chunks: Iterator[bytes], ctx: Ctx) -> Iterator[Out]:
    """A text's chunks as the matcher reads them: the text itself (unless it is JSON, whose
    escapes are JSON's), its unescaped form where it has escapes, and the base64 runs in it.
    Every byte of the text is taken from the quota; a cut still emits what was taken."""
    json_mode: bool | None = None
    first_text = True
    unescaped_last = False  # the previous piece of text went to the unescaped stream too
    started_unescaped = False
    carry = b""
    cut = False
    for chunk in _with_end(chunks):
        if chunk is None or cut:  # the end: what was carried is whole
            data, carry = carry, b""
        else:
            try:
                data = ctx.quota.take(chunk)
            except Cut:
                cut, data = True, b""
            if json_mode is None and data.strip():
                json_mode = data.lstrip()[:1] in (b"{", b"[")
                if json_mode:
                    ctx.notes.formats.add("json")
            data = carry + data
            at = _safe_cut(data) if len(data) > CARRY and not cut else len(data) * cut
            data, carry = data[:at], data[at:]
        if data:
            escaped = has_escapes(data)
            if not json_mode:
                yield TEXT, data, first_text
                first_text = False
            if escaped or json_mode:
                clear = unescape(data) if escaped else data
                yield UNESCAPED, clear, not (started_unescaped and unescaped_last)
                started_unescaped = unescaped_last = True
                data = clear
            else:
                unescaped_last = False
            if ctx.depth < MAX_DEPTH:
                yield from base64_pieces(data, ctx)
        if chunk is None or cut:
            break
    if cut:
        raise Cut


def _with_end(chunks: Iterator[bytes]) -> Iterator[bytes | None]:
    yield from chunks
    yield None


# -- streams: compressed data, tar ---------------------------------------------------------

def _reader_chunks(reader: BinaryIO, head: bytes = b"") -> Iterator[bytes]:
    if head:
        yield head
    while True:
        data = reader.read(CHUNK)
        if not data:
            return
        yield data


class _Peeked(io.RawIOBase):
    """A stream whose first bytes were read to sniff it, read again from the start."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:  # type: ignore[override]
        if self.head:
            n = min(len(buf), len(self.head))
            buf[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read(len(buf))
        buf[:len(data)] = data
        return len(data)


def decompressor(kind: str, raw: BinaryIO) -> BinaryIO:
    """A reader of the decompressed data (each read bounded: a bomb costs its quota)."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    if kind == "zstd":
        if zstandard is None:
            raise ValueError("zstd data, and the zstandard package is not installed")
        return zstandard.ZstdDecompressor().stream_reader(raw)  # type: ignore[return-value]
    raise ValueError(kind)


def stream_texts(reader: BinaryIO, ctx: Ctx) -> Iterator[Out]:
    """The texts of a stream read once, front to back (a decompressed file, a tar member)."""
    head = reader.read(512)
    kind = sniff(head) if ctx.depth < MAX_DEPTH else "plain"
    if kind in ("gzip", "zstd", "bz2", "xz"):
        ctx.notes.formats.add(kind)
        yield from stream_texts(decompressor(kind, _Peeked(head, reader)), ctx.deeper())
    elif kind == "tar":
        ctx.notes.formats.add("tar")
        with tarfile.open(fileobj=_Peeked(head, reader), mode="r|") as tar:
            yield from tar_texts(tar, ctx.deeper())
    elif kind == "npy":
        # arrays imports this module's names: a load-time cycle (and numpy with it)
        from .arrays import npy_texts

        ctx.notes.formats.add("npy")
        yield from npy_texts(_Peeked(head, reader), ctx)
    elif kind in ("zip", "parquet", "arrow_file", "arrow_stream", "safetensors"):
        cap = MEM_CAP if ctx.quota.left is None else min(MEM_CAP, max(ctx.quota.left, 0))
        data = head + reader.read(cap)
        if reader.read(1):  # too large to hold (or past the quota): read as it is
            ctx.notes.formats.add(f"{kind} (too large inside a stream: read raw)")
            yield from plain_texts(_reader_chunks(reader, data), ctx)
        else:
            yield from bytes_texts(data, ctx)
    else:
        yield from plain_texts(_reader_chunks(reader, head), ctx)


def tar_texts(tar: tarfile.TarFile, ctx: Ctx) -> Iterator[Out]:
    """Each regular member's texts, members in order, at most MAX_MEMBERS."""
    for n, member in enumerate(tar):
        if n >= MAX_MEMBERS:
            ctx.notes.errors.append(f"tar: more than {MAX_MEMBERS} members, the rest not read")
            ctx.notes.cut = True
            return
        if not member.isfile():
            continue
        f = tar.extractfile(member)
        if f is not None:
            yield from _member(stream_texts(f, ctx), member.name)


def _member(outs: Iterator[Out], name: str) -> Iterator[Out]:
    """A member's texts, each starting a new text (no gram spans two members); its name is
    a text too (names carry words)."""
    yield PIECE, name.encode(errors="replace"), True
    starts: set[int] = set()
    for role, data, new in outs:
        yield role, data, new or role not in starts
        starts.add(role)


# -- random access: zip, and what lives in memory ------------------------------------------

def zip_entries(f: BinaryIO, size: int) -> int | None:
    """The number of entries a zip's end record declares (zip64 included), without reading its
    central directory (a million entries would cost minutes to parse); None if not found."""
    tail_len = min(size, (64 << 10) + 22)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return None
    count = struct.unpack("<H", tail[at + 10:at + 12])[0]
    if count != 0xFFFF:
        return count
    loc = tail.rfind(b"PK\x06\x07", 0, at)
    if loc < 0:
        return None
    offset = struct.unpack("<Q", tail[loc + 8:loc + 16])[0]
    f.seek(offset)
    record = f.read(56)
    return struct.unpack("<Q", record[32:40])[0] if record[:4] == b"PK\x06\x06" else None


def zip_texts(f: BinaryIO, size: int, ctx: Ctx) -> Iterator[Out]:
    """Each member's texts; a PyTorch checkpoint's numeric storages skipped by their dtype."""
    count = zip_entries(f, size)
    if count is None or count > MAX_MEMBERS:
        ctx.notes.errors.append(f"zip: {count if count is not None else 'no'} entries "
                                "declared: read raw")
        f.seek(0)
        yield from plain_texts(_reader_chunks(f), ctx)
        return
    f.seek(0)
    with zipfile.ZipFile(f) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        from .arrays import torch_storage_kinds  # a load-time cycle: see `stream_texts`

        storages = torch_storage_kinds(z, infos, ctx)
        for info in infos:
            kind = storages.get(info.filename)
            if kind == "numeric":
                ctx.notes.numeric += info.file_size
                continue
            try:
                with z.open(info) as member:
                    yield from _member(stream_texts(member, ctx.deeper()), info.filename)
            except (RuntimeError, zipfile.BadZipFile, NotImplementedError, OSError,
                    EOFError, lzma.LZMAError, zlib_error) as exc:
                ctx.notes.error(f"zip member {info.filename[:80]}", exc)


try:
    from zlib import error as zlib_error
except ImportError:  # pragma: no cover
    zlib_error = OSError  # type: ignore[assignment,misc]


def bytes_texts(data: bytes, ctx: Ctx) -> Iterator[Out]:
    """The texts of bytes held in memory (a stored revision, a member, a base64 run)."""
    kind = sniff(data[:512], data[-8:]) if ctx.depth < MAX_DEPTH else "plain"
    if kind == "plain":
        yield from plain_texts(iter((data,)), ctx)
        return
    ctx.notes.formats.add(kind)
    # what a container inflates to is taken from the pieces' quota: a stored revision or a
    # log is bounded by the store, what it decompresses to is not
    inner = Ctx(ctx.pieces, ctx.notes, ctx.pieces, ctx.depth)
    yield from random_access_texts(kind, io.BytesIO(data), len(data), inner, lambda: data)


def random_access_texts(kind: str, f: BinaryIO, size: int, ctx: Ctx,
                        buffer: Callable[[], object]) -> Iterator[Out]:
    """The texts of a seekable file object `f` of format `kind`; `buffer()` gives what
    pyarrow maps (a memory map of the file, or the bytes)."""
    from . import arrays  # a load-time cycle: see `stream_texts`

    if kind == "zip":
        yield from zip_texts(f, size, ctx.deeper())
    elif kind in ("parquet", "arrow_file", "arrow_stream"):
        yield from arrays.columnar_texts(kind, buffer(), ctx)
    elif kind == "safetensors":
        yield from arrays.safetensors_texts(f, size, ctx)
    elif kind == "npy":
        yield from arrays.npy_texts(f, ctx)
    else:
        yield from stream_texts(f, ctx)
