"""Hashed n-grams of normalized text, vectorized, streamed: the contamination check's engine.

Normalization: ASCII letters lowercased; a token is a run of letters, digits or non-ASCII bytes
(a UTF-8 word stays whole), or one ASCII punctuation mark; whitespace separates and is dropped.
Punctuation is kept as tokens (unlike word-only decontamination) because the hidden items of
arithmetic and code tasks are mostly symbols: `47+85` must not read as `47 85`.

Why hashes and numpy: the audit reads every text an agent produced, a gigabyte of generated
training data included, on every run. A token's hash is a polynomial over its bytes and an
n-gram's a polynomial over its tokens' hashes, both computed from prefix sums (mod 2**64, with
the base's inverse powers to shift), so one chunk costs a dozen array passes and no Python
loop; membership in the hidden items' set is a binary search in a sorted array. Collisions of
64-bit hashes are negligible against a few hundred thousand hidden n-grams.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: byte -> 0 separator, 1 word byte, 2 punctuation (a token of its own)
_CLASS = np.zeros(256, np.uint8)
for _b in range(256):
    _c = chr(_b)
    if _b >= 0x80 or _c.isalnum():
        _CLASS[_b] = 1
    elif 33 <= _b <= 126:
        _CLASS[_b] = 2
_CLASS[0] = 2  # NUL: the boundary token between texts, never in a hidden item
BOUNDARY = b" \x00 "

_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)
_BASE_INV = np.uint64(pow(int(_BASE), -1, 2**64))
_pow = np.ones(1, np.uint64)
_inv = np.ones(1, np.uint64)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and BASE**-i (mod 2**64) for i < n, grown on demand and kept."""
    global _pow, _inv
    if len(_pow) < n:
        size = max(n, 2 * len(_pow))
        with np.errstate(over="ignore"):
            _pow = np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, _BASE))))
            _inv = np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, _BASE_INV))))
    return _pow[:n], _inv[:n]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads a polynomial hash's bits."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _shifted_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """sum(values[j] * BASE**(j - start)) over [start, end) for each pair (`values` is
    overwritten: it is a scratch array)."""
    pw, inv = _powers(len(values) + 1)
    prefix = np.empty(len(values) + 1, np.uint64)
    prefix[0] = 0
    with np.errstate(over="ignore"):
        np.multiply(values, pw[:len(values)], out=values)
        np.cumsum(values, out=prefix[1:])
        return (prefix[ends] - prefix[starts]) * inv[starts]


def tokens(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of `data`'s tokens and each token's start offset."""
    if not data:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    raw = np.frombuffer(data, np.uint8)
    cls = _CLASS[raw]
    word = cls == 1
    edge = np.empty(len(raw) + 1, bool)  # a word byte whose neighbour is not one
    edge[0] = edge[-1] = True
    np.not_equal(word[1:], word[:-1], out=edge[1:-1])
    punct = cls == 2
    starts = np.flatnonzero(punct | (word & edge[:-1]))
    ends = np.flatnonzero(punct | (word & edge[1:])) + 1
    values = np.frombuffer(data.lower(), np.uint8).astype(np.uint64)
    values += np.uint64(1)
    return _shifted_sums(values, starts, ends), starts


def grams(token_hashes: np.ndarray, n: int) -> np.ndarray:
    """The hash of every run of `n` consecutive tokens (tagged with `n`: runs of different
    lengths never share a hash)."""
    m = len(token_hashes) - n + 1
    if m <= 0:
        return np.zeros(0, np.uint64)
    tag = np.uint64(n * 0x5851F42D)
    if n == 1:
        return _mix(token_hashes ^ tag)
    starts = np.arange(m)
    return _mix(_shifted_sums(token_hashes.copy(), starts, starts + n) ^ tag)


def text_grams(text: str, n: int) -> tuple[list[int], int]:
    """A text's distinct n-gram hashes and the gram length used: a text shorter than `n`
    tokens has one gram, itself whole, of its own length (0: no token)."""
    th, _ = tokens(text.encode())
    if len(th) < n:
        return (grams(th, len(th)).tolist(), len(th)) if len(th) else ([], 0)
    return list(dict.fromkeys(grams(th, n).tolist())), n


class Matcher:
    """Finds which of a fixed set of gram hashes occur in a stream of texts, and where.

    `feed(label, data)` appends a text (call it repeatedly with one label to stream a large
    one); texts are joined with a boundary token no hidden item holds, so no gram spans two.
    Work happens per chunk of `chunk` bytes, cut at whitespace, with the last tokens carried
    into the next chunk so that no gram is lost at a cut. `found[label]` is the set of hashes
    matched in that text."""

    def __init__(self, wanted: Iterable[int], lengths: Iterable[int],
                 chunk: int = 4 << 20) -> None:
        self.wanted = np.unique(np.fromiter(wanted, np.uint64))
        self.lengths = sorted(set(lengths))
        self.chunk = chunk
        self.carry = max(self.lengths, default=1) * 64  # bytes kept across a cut
        self.buf = bytearray()
        self.marks: list[tuple[int, str]] = []  # (offset in buf, label) where a text starts
        self.found: dict[str, set[int]] = {}
        self.bytes_read = 0

    def feed(self, label: str, data: bytes, *, new_text: bool = True) -> None:
        if new_text:
            self.buf += BOUNDARY
            self.marks.append((len(self.buf), label))
        self.buf += data
        self.bytes_read += len(data)
        if len(self.buf) >= self.chunk:
            self._flush(final=False)

    def close(self) -> dict[str, set[int]]:
        self._flush(final=True)
        return self.found

    def _flush(self, final: bool) -> None:
        if not self.buf or not len(self.wanted):
            self.buf.clear()  # nothing to look for: the bytes are only counted
            self.marks = []
            return
        cut = len(self.buf)
        if not final:  # cut at the last whitespace, so no token is split
            cut = max(self.buf.rfind(b" "), self.buf.rfind(b"\n"), self.buf.rfind(b"\t"))
            if cut <= self.carry:
                cut = len(self.buf)
        th, offsets = tokens(bytes(self.buf[:cut]))
        mark_at = np.array([m[0] for m in self.marks], np.int64)
        for n in self.lengths:
            g = grams(th, n)
            if not len(g):
                continue
            pos = np.searchsorted(self.wanted, g)
            pos[pos >= len(self.wanted)] = 0
            hit = np.flatnonzero(self.wanted[pos] == g)
            if not len(hit):
                continue
            owners = np.maximum(np.searchsorted(mark_at, offsets[hit], side="right") - 1, 0)
            matched = g[hit]
            # owners ascend (offsets do): one distinct set per text, not one Python step per hit
            cuts = np.flatnonzero(np.diff(owners)) + 1
            for seg_owner, seg in zip(owners[np.r_[0, cuts]].tolist(),
                                      np.split(matched, cuts), strict=True):
                self.found.setdefault(self.marks[seg_owner][1], set()).update(
                    np.unique(seg).tolist())
        if final:
            self.buf.clear()
            self.marks = []
            return
        keep = max(0, cut - self.carry)
        keep = max(self.buf.rfind(b" ", 0, keep + 1), 0) if keep else 0
        current = [m for m in self.marks if m[0] <= keep][-1:] or self.marks[:1]
        later = [(o - keep, lbl) for o, lbl in self.marks if o > keep]
        del self.buf[:keep]
        self.marks = [(0, current[0][1])] + later if current else later
