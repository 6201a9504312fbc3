"""The original WebShop's search, as its Lucene index scores it: Anserini's default English
analyzer and Lucene's BM25 (the `paper` profile's search engine).

The original searches with Pyserini's `LuceneSearcher` over an index its
`search_engine/run_indexing.sh` builds (Anserini's `DefaultEnglishAnalyzer`, BM25 with k1=0.9,
b=0.4). This file re-does both in plain Python, for what `sim.WebShopEnv` needs:

- the analyzer: Lucene's StandardTokenizer (Unicode word boundaries: letters and digits, a
  word kept whole across `.`, `'` or `:` between letters and `.`, `,`, `;` or `'` between
  digits), the English possessive `'s` dropped, lower case, Lucene's 33 English stop words,
  then Lucene's `PorterStemmer` (a port of Martin Porter's reference implementation: words
  of three letters or more);
- BM25 as Lucene 8 scores it: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), each document's
  length stored in Lucene's one-byte norm (exact up to 23 words, then 4 significant bits),
  a query word repeated n times weighed n times (Anserini's bag-of-words query); the best
  `k` documents with a score, ties by asin (Anserini's sort: score, then the document id).
  Arithmetic is in double precision where Lucene's is in single: two scores that differ in
  the 7th digit may rank the other way (Anserini itself reports scores to 4 decimals).

tests/test_webshop_original.py checks both against the original's own index on the fixture
(its analyzer on 1,711 words, every document's indexed terms, Lucene's stored length of 503
lengths, the hits and scores of 32 queries). Standard library only, no package-relative
imports: the workspace gets this file as `env/webshop_lucene.py`, beside the site.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

BM25_K1, BM25_B = 0.9, 0.4  # Anserini's defaults, with which the original searches
#: Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (Anserini's default English stop words).
STOPWORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
    "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there",
    "these", "they", "this", "to", "was", "will", "with"])
_LETTER = r"[^\W\d_]"
#: A word: word characters, joined across one mid-letter mark between letters or one
#: mid-number mark between digits (UAX #29 rules WB6/7 and WB11/12).
_TOKEN = re.compile(
    rf"\w+(?:(?:(?<={_LETTER})[.:'\u2019\u00b7](?={_LETTER})|(?<=\d)[.,;'\u2019](?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['\u2019\uff07][sS]$")  # EnglishPossessiveFilter


def analyze(text: str) -> list[str]:
    """The terms Anserini's default English analyzer gives `text`, in order."""
    out = []
    for token in _TOKEN.findall(text):
        term = _POSSESSIVE.sub("", token).lower()
        if term and term not in STOPWORDS:
            out.append(stem(term))
    return out


# --- Lucene's PorterStemmer (org.apache.lucene.analysis.en.PorterStemmer) ---------------------
class _Porter:
    """One word's stemming state: the buffer `b`, its end `k` and the suffix start `j`, as in
    the reference implementation (the step numbers are Lucene's)."""

    def __init__(self, word: str) -> None:
        self.b = list(word)
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in "aeiou":
            return False
        if ch == "y":
            return True if i == 0 else not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The number of consonant-vowel sequences in b[0..j]."""
        n, i = 0, 0
        while True:
            if i > self.j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > self.j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > self.j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def doublec(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, s: str) -> bool:
        o = self.k - len(s) + 1
        if o < 0 or "".join(self.b[o:self.k + 1]) != s:
            return False
        self.j = self.k - len(s)
        return True

    def setto(self, s: str) -> None:
        self.b[self.j + 1:] = list(s)
        self.k = self.j + len(s)

    def r(self, s: str) -> None:
        if self.m() > 0:
            self.setto(s)

    def step1(self) -> None:
        b = self.b
        if b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.setto("i")
            elif b[self.k - 1] != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            if self.ends("at"):
                self.setto("ate")
            elif self.ends("bl"):
                self.setto("ble")
            elif self.ends("iz"):
                self.setto("ize")
            elif self.doublec(self.k):
                if b[self.k] not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.setto("e")

    def step2(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b[self.k] = "i"

    _STEP3 = {"a": (("ational", "ate"), ("tional", "tion")),
              "c": (("enci", "ence"), ("anci", "ance")),
              "e": (("izer", "ize"),),
              "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
                    ("ousli", "ous")),
              "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
              "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
              "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
              "g": (("logi", "log"),)}
    _STEP4 = {"e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
              "i": (("iciti", "ic"),),
              "l": (("ical", "ic"), ("ful", "")),
              "s": (("ness", ""),)}
    _STEP5 = {"a": ("al",), "c": ("ance", "ence"), "e": ("er",), "i": ("ic",),
              "l": ("able", "ible"), "n": ("ant", "ement", "ment", "ent"), "o": ("ion", "ou"),
              "s": ("ism",), "t": ("ate", "iti"), "u": ("ous",), "v": ("ive",), "z": ("ize",)}

    def _replace(self, table: dict[str, tuple[tuple[str, str], ...]], at: int) -> None:
        for suffix, repl in table.get(self.b[at], ()):
            if self.ends(suffix):
                self.r(repl)
                return

    def step3(self) -> None:
        if self.k != 0:
            self._replace(self._STEP3, self.k - 1)

    def step4(self) -> None:
        self._replace(self._STEP4, self.k)

    def step5(self) -> None:
        if self.k == 0:
            return
        for suffix in self._STEP5.get(self.b[self.k - 1], ()):
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in "st"):
                    continue
                if self.m() > 1:
                    self.k = self.j
                return

    def step6(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.doublec(self.k) and self.m() > 1:
            self.k -= 1

    def stem(self) -> str:
        if self.k > 1:
            for step in (self.step1, self.step2, self.step3, self.step4, self.step5,
                         self.step6):
                step()
        return "".join(self.b[:self.k + 1])


def stem(word: str) -> str:
    """Lucene's Porter stem of a lower-case word."""
    return _Porter(word).stem()


# --- Lucene 8's BM25 ---------------------------------------------------------------------------
def _int4(i: int) -> int:
    """SmallFloat.longToInt4: 4 significant bits and a shift."""
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _from_int4(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _int4(2**31 - 1)  # 24: lengths below this are stored exactly


def stored_length(n: int) -> int:
    """A field length as Lucene's norm keeps it (SmallFloat.intToByte4 then byte4ToInt)."""
    return n if n < _FREE else _FREE + _from_int4(_int4(n - _FREE))


class LuceneSearch:
    """The original's search: its analyzer, its BM25, over its documents."""

    backend = "lucene"

    def __init__(self, asins: Sequence[str], documents: Sequence[str]) -> None:
        self.asins = list(asins)
        terms = [Counter(analyze(d)) for d in documents]
        lengths = [sum(t.values()) for t in terms]
        n = len(terms)
        avgdl = sum(lengths) / n if n else 1.0
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, doc in enumerate(terms):
            for term, tf in doc.items():
                self._postings.setdefault(term, []).append((i, tf))
        self._idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5))
                     for t, p in self._postings.items()}
        self._norm = [BM25_K1 * (1 - BM25_B + BM25_B * stored_length(d) / avgdl)
                      for d in lengths]

    def scores(self, query: str) -> dict[int, float]:
        """Each matching document's score (by its index)."""
        out: dict[int, float] = {}
        for term, count in Counter(analyze(query)).items():
            weight = count * self._idf.get(term, 0.0)
            for i, tf in self._postings.get(term, ()):
                out[i] = out.get(i, 0.0) + weight * tf / (tf + self._norm[i])
        return out

    def search(self, query: str, k: int) -> list[str]:
        """The asins of the best `k` documents, best first, ties by asin (Anserini sorts by
        score, then by the document's id)."""
        scores = self.scores(query)
        order = sorted(scores, key=lambda i: (-scores[i], self.asins[i]))
        return [self.asins[i] for i in order[:k]]
