"""Hashed n-grams of normalized text, vectorized, streamed: the contamination check's engine.

Normalization: ASCII letters lowercased; a token is a run of letters, digits or non-ASCII bytes
(a UTF-8 word stays whole), or one ASCII punctuation mark; whitespace separates and is dropped.
Punctuation is kept as tokens (unlike word-only decontamination) because the hidden items of
arithmetic and code tasks are mostly symbols: `47+85` must not read as `47 85`.

Why hashes and numpy: the audit reads every text an agent produced, a gigabyte of generated
training data included, on every run (issue 25: within 30 s on 2 cores). A token's hash is a
polynomial over its bytes and an n-gram's a polynomial over its tokens' hashes, both computed
from prefix sums (mod 2**64, with the base's inverse powers to shift), so one chunk costs a
dozen array passes and no Python loop. What makes that fast in practice (bench/audit.py):

- every pass writes into scratch arrays kept across chunks (`out=`): a fresh array of a few
  MB costs its page faults, several times the arithmetic itself;
- a gram's published hash is `mix(poly ^ tag(n))`, a bijection of the polynomial, so the
  stream is never mixed: the wanted hashes are unmixed once, per length, and the stream's
  polynomials are compared with those;
- membership is one read of a table addressed by a polynomial's top bits (a few MB) and one
  compare; only the few slots two wanted polynomials share are searched exactly;
- a text's matches are kept as indices into the wanted array (a boolean mask once they are
  many), not as one Python int per hit.

Collisions of 64-bit hashes are negligible against a few hundred thousand hidden n-grams.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

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
_CLASS_TABLE = bytes(_CLASS.tolist())  # for bytes.translate: one C pass, no index array
_LOWER_TABLE = bytes(range(256)).lower()
BOUNDARY = b" \x00 "
#: bytes of a text's tail carried into the next chunk at most: the last n-1 tokens normally
#: (no gram is lost at a cut); a gram spanning more than this at a cut may be missed
MAX_CARRY = 64 << 10

_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)
_BASE_INV = np.uint64(pow(int(_BASE), -1, 2**64))
#: (BASE**i, BASE**-i) for i below their length: one tuple, swapped whole, so that threads
#: matching at once never see one array grown and the other not
_POWERS = (np.ones(1, np.uint64), np.ones(1, np.uint64))
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and BASE**-i (mod 2**64) for i < n, grown on demand and kept."""
    global _POWERS
    pw, inv = _POWERS
    if len(pw) < n:
        size = max(n, 2 * len(pw))
        with np.errstate(over="ignore"):
            pw = np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, _BASE))))
            inv = np.cumprod(np.concatenate(([np.uint64(1)], np.full(size - 1, _BASE_INV))))
        _POWERS = (pw, inv)
    return pw[:n], inv[:n]


def _tag(n: int) -> np.uint64:
    """What a gram of `n` tokens is xored with before mixing: lengths never share a hash."""
    return np.uint64(n * 0x5851F42D)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads a polynomial hash's bits."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(_M1)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(_M2)
        return x ^ (x >> np.uint64(31))


def _unmix(x: np.ndarray) -> np.ndarray:
    """The inverse of `_mix` (each xorshift and odd multiplier undone in reverse order)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(31)) ^ (x >> np.uint64(62))
        x = x * np.uint64(pow(_M2, -1, 2**64))
        x = x ^ (x >> np.uint64(27)) ^ (x >> np.uint64(54))
        x = x * np.uint64(pow(_M1, -1, 2**64))
        return x ^ (x >> np.uint64(30)) ^ (x >> np.uint64(60))


class _Scratch:
    """Arrays reused across chunks, grown on demand (a view of the first `size` items)."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None or len(arr) < size:
            arr = self._arrays[name] = np.empty(max(size, 1 << 16, int(size * 1.25)), dtype)
        return arr[:size]


def _tokens(data: bytes, sc: _Scratch) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of `data`'s tokens (a scratch view) and each token's start offset."""
    size = len(data)
    cls = np.frombuffer(data.translate(_CLASS_TABLE), np.uint8)
    word = np.equal(cls, 1, out=sc.get("word", size, np.bool_))
    punct = np.equal(cls, 2, out=sc.get("punct", size, np.bool_))
    edge = sc.get("edge", size + 1, np.bool_)  # a word byte whose neighbour is not one
    edge[0] = edge[-1] = True
    np.not_equal(word[1:], word[:-1], out=edge[1:-1])
    mark = sc.get("mark", size, np.bool_)
    starts = np.flatnonzero(np.bitwise_or(punct, np.bitwise_and(word, edge[:-1], out=mark),
                                          out=mark))
    ends = np.flatnonzero(np.bitwise_or(punct, np.bitwise_and(word, edge[1:], out=mark),
                                        out=mark))
    ends += 1
    values = sc.get("bytes", size, np.uint64)
    np.copyto(values, np.frombuffer(data.translate(_LOWER_TABLE), np.uint8), casting="unsafe")
    values += np.uint64(1)
    pw, inv = _powers(size + 1)
    prefix = sc.get("byte_prefix", size + 1, np.uint64)
    prefix[0] = 0
    n = len(starts)
    th = sc.get("tokens", n, np.uint64)
    tmp = sc.get("tokens_tmp", n, np.uint64)
    with np.errstate(over="ignore"):
        np.multiply(values, pw[:size], out=values)
        np.cumsum(values, out=prefix[1:])
        np.take(prefix, ends, out=th)
        np.subtract(th, np.take(prefix, starts, out=tmp), out=th)
        np.multiply(th, np.take(inv, starts, out=tmp), out=th)
    return th, starts


def _gram_prefix(th: np.ndarray, sc: _Scratch) -> tuple[np.ndarray, np.ndarray]:
    """The prefix sums of th[j] * BASE**j, from which any run's polynomial is two passes,
    and the inverse powers that shift it to its start."""
    pw, inv = _powers(len(th) + 1)
    prefix = sc.get("gram_prefix", len(th) + 1, np.uint64)
    prefix[0] = 0
    with np.errstate(over="ignore"):
        np.multiply(th, pw[:len(th)], out=prefix[1:])
        np.cumsum(prefix[1:], out=prefix[1:])
    return prefix, inv


def _polys(prefix: np.ndarray, inv: np.ndarray, n: int, m: int, out: np.ndarray) -> np.ndarray:
    """The unmixed, untagged polynomial of the `m` runs of `n` tokens starting at 0..m-1."""
    with np.errstate(over="ignore"):
        np.subtract(prefix[n:n + m], prefix[:m], out=out)
        return np.multiply(out, inv[:m], out=out)


def tokens(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of `data`'s tokens and each token's start offset."""
    if not data:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    th, starts = _tokens(data, _Scratch())
    return th.copy(), starts


def grams(token_hashes: np.ndarray, n: int) -> np.ndarray:
    """The hash of every run of `n` consecutive tokens (tagged with `n`: runs of different
    lengths never share a hash)."""
    m = len(token_hashes) - n + 1
    if m <= 0 or n <= 0:
        return np.zeros(0, np.uint64)
    sc = _Scratch()
    prefix, inv = _gram_prefix(token_hashes, sc)
    return _mix(_polys(prefix, inv, n, m, np.empty(m, np.uint64)) ^ _tag(n))


def texts_grams(texts: Sequence[str], n: int) -> list[tuple[list[int], int]]:
    """`text_grams` of many texts in one vectorized pass (the audit hashes every hidden and
    train item: thousands of small texts, one numpy pass instead of a dozen per text). The
    texts are joined with a space, which no token spans, and split again by token offsets."""
    if not texts:
        return []
    encoded = [t.encode() for t in texts]
    sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
    begins = np.zeros(len(encoded), np.int64)
    np.cumsum(sizes[:-1] + 1, out=begins[1:])
    sc = _Scratch()
    th, offsets = _tokens(b" ".join(encoded), sc)
    first = np.searchsorted(offsets, begins)
    count = np.searchsorted(offsets, begins + sizes) - first
    prefix, inv = _gram_prefix(th, sc)
    m = max(len(th) - n + 1, 0)
    full = _mix(_polys(prefix, inv, n, m, np.empty(m, np.uint64)) ^ _tag(n)).tolist()
    with np.errstate(over="ignore"):  # each short text whole: one gram of its own length
        whole = (prefix[first + count] - prefix[first]) * inv[first]
        whole = _mix(whole ^ (count.astype(np.uint64) * _tag(1))).tolist()
    out: list[tuple[list[int], int]] = []
    for f, c, w in zip(first.tolist(), count.tolist(), whole, strict=True):
        if c == 0:
            out.append(([], 0))
        elif c < n:
            out.append(([w], c))
        else:
            out.append((list(dict.fromkeys(full[f:f + c - n + 1])), n))
    return out


def text_grams(text: str, n: int) -> tuple[list[int], int]:
    """A text's distinct n-gram hashes and the gram length used: a text shorter than `n`
    tokens has one gram, itself whole, of its own length (0: no token)."""
    return texts_grams([text], n)[0]


class Matcher:
    """Finds which of a fixed set of gram hashes occur in a stream of texts, and where.

    `feed(label, data)` appends a text (call it repeatedly with one label to stream a large
    one); texts are joined with a boundary token no hidden item holds, so no gram spans two.
    Work happens per chunk of about `chunk` bytes; the last n-1 whole tokens (and a token
    still being fed) are carried into the next chunk, so that no gram is lost at a cut.
    `found[label]` is the set of hashes matched in that text."""

    def __init__(self, wanted: Iterable[int], lengths: Iterable[int],
                 chunk: int = 1 << 20) -> None:
        self.wanted = np.unique(np.fromiter(wanted, np.uint64))
        self.lengths = sorted({n for n in lengths if n > 0})
        self.chunk = max(chunk, 1)
        self.buf = bytearray()
        self.marks: list[tuple[int, str]] = []  # (offset in buf, label) where a text starts
        self.found: dict[str, set[int]] = {}
        self.bytes_read = 0
        self._carried = 0  # bytes of buf already scanned once (the carry)
        self._sc = _Scratch()
        self._hits: dict[str, set[int] | np.ndarray] = {}  # label -> indices into wanted
        self._mask_at = max(64, len(self.wanted) // 16)  # a set this big becomes a mask
        base = _unmix(self.wanted)
        # One table over every length's polynomials, addressed by a polynomial's top bits: a
        # slot holds 1 + the key's index in `_keys` (key i*W + j is wanted[j]'s polynomial at
        # the i-th length), 0 when empty, -1 when two keys share it; the keys of shared slots
        # are searched exactly in `_spill`. A gram costs one read of the table and one compare
        # (a binary search per gram took several times as long: bench/audit.py).
        w = len(self.wanted)
        self._keys = np.concatenate([base ^ _tag(n) for n in self.lengths] or
                                    [np.zeros(0, np.uint64)])
        bits = min(max(int(max(len(self._keys), 1) * 8).bit_length(), 12), 24)
        self._shift = np.uint64(64 - bits)
        slots = (self._keys >> self._shift).astype(np.intp)
        self._table = np.zeros(1 << bits, np.int32)
        self._table[slots] = np.arange(1, len(self._keys) + 1, dtype=np.int32)
        used, count = np.unique(slots, return_counts=True)
        self._table[used[count > 1]] = -1
        spilled = np.flatnonzero(self._table[slots] < 0)
        spill_keys = self._keys[spilled]
        order = np.argsort(spill_keys)
        self._spill_keys, self._spill_index = spill_keys[order], spilled[order]
        self._w = w

    def fork(self) -> Matcher:
        """A matcher for the same wanted grams, sharing this one's tables (they are only read)
        with its own buffer, scratch arrays and results: one per thread that matches."""
        other = copy.copy(self)
        other.buf, other.marks, other.found, other.bytes_read = bytearray(), [], {}, 0
        other._carried, other._sc, other._hits = 0, _Scratch(), {}
        return other

    def feed(self, label: str, data: bytes, *, new_text: bool = True) -> None:
        if new_text:
            self.buf += BOUNDARY
            self.marks.append((len(self.buf), label))
        self.bytes_read += len(data)
        view = memoryview(data)
        for at in range(0, len(data), self.chunk):  # a huge blob is scanned in chunks too
            self.buf += view[at:at + self.chunk]
            if len(self.buf) >= self._carried + self.chunk:
                self._flush(final=False)

    def close(self) -> dict[str, set[int]]:
        self._flush(final=True)
        for label, idx in self._hits.items():
            if isinstance(idx, np.ndarray):
                idx = np.flatnonzero(idx)
            else:
                idx = np.fromiter(idx, np.intp, len(idx))
            self.found.setdefault(label, set()).update(self.wanted[idx].tolist())
        self._hits = {}
        return self.found

    def _add(self, label: str, idx: np.ndarray) -> None:
        """Record indices (into `wanted`, repeats allowed) matched in `label`'s text."""
        have = self._hits.get(label)
        if isinstance(have, np.ndarray):
            have[idx] = True
            return
        have = have if have is not None else set()
        if len(have) + len(idx) > self._mask_at:
            mask = np.zeros(len(self.wanted), np.bool_)
            mask[idx] = True
            mask[np.fromiter(have, np.intp, len(have))] = True
            self._hits[label] = mask
            return
        have.update(idx.tolist())
        self._hits[label] = have

    def _flush(self, final: bool) -> None:
        if not self.buf or not len(self.wanted) or not self.lengths:
            self.buf.clear()  # nothing to look for: the bytes are only counted
            self.marks = []
            self._carried = 0
            return
        data = bytes(self.buf)
        th, offsets = _tokens(data, self._sc)
        total = len(th)
        # the last token may go on in the next feed: scanned then, with the n-1 before it
        complete = total if final else max(total - 1, 0)
        keep_from = max(complete - (self.lengths[-1] - 1), 0)
        keep = int(offsets[keep_from]) if keep_from < total else len(data)
        if not final and len(data) - keep > MAX_CARRY:  # huge tokens: carry a bounded tail
            keep_from = int(np.searchsorted(offsets, len(data) - MAX_CARRY))
            if keep_from >= total:  # one token longer than MAX_CARRY: cut through it
                complete, keep = total, len(data)
            else:
                keep = int(offsets[keep_from])
        self._scan(th[:complete], offsets)
        if final:
            self.buf.clear()
            self.marks = []
            self._carried = 0
            return
        current = [m for m in self.marks if m[0] <= keep][-1:] or self.marks[:1]
        later = [(o - keep, lbl) for o, lbl in self.marks if o > keep]
        del self.buf[:keep]
        self.marks = [(0, current[0][1])] + later if current else later
        self._carried = len(self.buf)

    def _exact(self, g: np.ndarray, slot: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The grams of `g` (polynomials at the i-th length) that are wanted: their positions
        and their indices into `wanted`, in position order."""
        lo, hi = i * self._w, (i + 1) * self._w
        cand = np.flatnonzero(slot > 0)
        key = slot[cand] - 1
        ok = self._keys[key] == g[cand]
        ok &= (key >= lo) & (key < hi)  # a key of another length is no match
        hit, idx = cand[ok], key[ok] - lo
        shared = np.flatnonzero(slot < 0)
        if len(shared) and len(self._spill_keys):
            values = g[shared]
            pos = np.minimum(np.searchsorted(self._spill_keys, values), len(self._spill_keys) - 1)
            key = self._spill_index[pos]
            ok = (self._spill_keys[pos] == values) & (key >= lo) & (key < hi)
            if ok.any():
                hit = np.concatenate([hit, shared[ok]])
                idx = np.concatenate([idx, key[ok] - lo])
                order = np.argsort(hit, kind="stable")
                hit, idx = hit[order], idx[order]
        return hit, idx

    def _scan(self, th: np.ndarray, offsets: np.ndarray) -> None:
        """Match every gram of the chunk's whole tokens `th` against the wanted ones."""
        if not len(th):
            return
        sc = self._sc
        prefix, inv = _gram_prefix(th, sc)
        mark_at = np.fromiter((m[0] for m in self.marks), np.int64, len(self.marks))
        for i, n in enumerate(self.lengths):
            m = len(th) - n + 1
            if m <= 0:
                continue
            g = th if n == 1 else _polys(prefix, inv, n, m, sc.get("polys", m, np.uint64))
            top = np.right_shift(g, self._shift, out=sc.get("top", m, np.uint64))
            slot = np.take(self._table, top.view(np.int64), out=sc.get("slot", m, np.int32))
            hit, idx = self._exact(g, slot, i)
            if not len(hit):
                continue
            owners = np.maximum(np.searchsorted(mark_at, offsets[hit], side="right") - 1, 0)
            # owners ascend (offsets do): one record per text, not one Python step per hit
            cuts = np.flatnonzero(np.diff(owners)) + 1
            for seg_owner, seg in zip(owners[np.r_[0, cuts]].tolist(), np.split(idx, cuts),
                                      strict=True):
                self._add(self.marks[seg_owner][1], seg)
