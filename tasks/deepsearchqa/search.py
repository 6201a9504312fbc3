"""DeepSearchQA's search backends, host side: an offline BM25 index or a web search endpoint.

Which one (`make_search`): when `deepsearchqa_search_url` is set and the variable named by
`deepsearchqa_search_key_env` holds a key, the web endpoint; else the offline corpus
(`deepsearchqa_corpus`: a jsonl file, or a folder of them, of `{"id", "title", "text"}`).
Neither configured is a one-line error.

The web protocol is deliberately small so any provider can sit behind a thin adapter:
`POST <url>` with JSON `{"query": str, "k": int}` and `Authorization: Bearer <key>`, answered
by `{"results": [{"title", "url", "snippet"}]}`. The sandbox never calls either: it reaches
search only through the run's service socket (`task.search_service`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import BaseModel

from a2rl.settings import Settings

from ..base import ServiceAnswer
from .options import DeepSearchQAOptions

DEFAULT_K = 5
MAX_K = 20
STOPWORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "in", "is", "it", "of", "on", "or",
    "the", "to", "was", "were", "what", "which", "who", "with",
])


class SearchResult(BaseModel):
    id: str = ""
    title: str = ""
    url: str = ""
    snippet: str = ""


class SearchBackend(Protocol):
    name: str

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]: ...


def _tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOPWORDS]


class CorpusSearch:
    """BM25 (`bm25s`) over a local corpus of `{"id", "title", "text"}` rows."""

    name = "bm25"

    def __init__(self, path: Path) -> None:
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise FileNotFoundError(f"deepsearchqa_corpus={path}: no jsonl file")
        self.docs: list[dict[str, Any]] = []
        for f in files:
            with f.open() as fh:
                self.docs += [json.loads(line) for line in fh if line.strip()]
        import bm25s

        self._bm25 = bm25s.BM25()
        self._bm25.index([_tokens(f"{d.get('title', '')} {d.get('text', '')}")
                          for d in self.docs], show_progress=False)
        self._vocab = set(self._bm25.vocab_dict)

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]:
        tokens = [t for t in _tokens(query) if t in self._vocab]
        if not tokens or not self.docs:
            return []
        scores = list(self._bm25.get_scores(tokens))
        order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        return [SearchResult(id=str(self.docs[i].get("id", i)),
                             title=str(self.docs[i].get("title", "")),
                             url=str(self.docs[i].get("url", "")),
                             snippet=str(self.docs[i].get("text", ""))[:1000])
                for i in order[:k]]


class WebSearch:
    """A JSON web search endpoint (see the module docstring for the protocol)."""

    name = "web"

    def __init__(self, url: str, api_key: str, timeout_s: float = 30.0) -> None:
        self.url, self.timeout_s = url, timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"}

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]:
        resp = httpx.post(self.url, json={"query": query, "k": k}, headers=self._headers,
                          timeout=self.timeout_s)
        if resp.status_code != 200:
            raise RuntimeError(f"search endpoint answered http {resp.status_code}: "
                               f"{resp.text[:200]}")
        try:
            rows = resp.json()["results"]
            return [SearchResult(**{f: str(r.get(f, "")) for f in ("id", "title", "url",
                                                                    "snippet")})
                    for r in rows][:k]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"search endpoint sent a malformed body: {resp.text[:200]}") \
                from exc


_CORPORA: dict[str, CorpusSearch] = {}


def make_search(settings: Settings, environ: Mapping[str, str] | None = None,
                options: DeepSearchQAOptions | None = None) -> SearchBackend:
    """The web endpoint when it and its key are set, else the offline corpus (the task's
    options `search_url`, `search_key_env`, `corpus`)."""
    opts = options or DeepSearchQAOptions.resolve("deepsearchqa", settings)
    env = os.environ if environ is None else environ
    key = env.get(opts.search_key_env, "")
    if opts.search_url and key:
        return WebSearch(opts.search_url, key)
    if opts.corpus:
        path = str(Path(opts.corpus).expanduser().resolve())
        if path not in _CORPORA:
            _CORPORA[path] = CorpusSearch(Path(path))
        return _CORPORA[path]
    raise RuntimeError(
        "DeepSearchQA has no search backend: set -T corpus= (deprecated: deepsearchqa_corpus) "
        "to a jsonl corpus, or -T search_url= (deprecated: deepsearchqa_search_url) with a "
        f"key in ${opts.search_key_env}")


def search_request(backend: SearchBackend, request: dict[str, Any]) -> ServiceAnswer:
    """The service's handler body: validate `{"query", "k"}`, search, answer plain JSON. How
    many results a filter withheld goes to the record only, never to the sandbox (a count
    per query is an oracle: a dictionary sweep found the hidden answers by it)."""
    query = request.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("a search request needs a non-empty 'query' string")
    k = request.get("k", DEFAULT_K)
    if not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"'k' must be an integer from 1 to {MAX_K}")
    if isinstance(backend, HiddenAnswerFilter):
        results, withheld = backend.filtered(query.strip()[:500], k)
    else:
        results, withheld = backend.search(query.strip()[:500], k), 0
    return ServiceAnswer(result={"backend": backend.name,
                                 "results": [r.model_dump() for r in results]},
                         record={"withheld": withheld})


def normalized(text: str) -> str:
    """Lower-cased words separated by single spaces, padded: `" herman melville "`, so that a
    phrase matches whole words only."""
    return f" {' '.join(re.findall(r'[a-z0-9]+', text.lower()))} "


#: Shortest answer (normalized, in characters) a result is withheld for: shorter ones ("no",
#: "3") occur in nearly any page, and withholding every such page would end search itself.
MIN_ANSWER_CHARS = 4


def answer_keys(answer: str, answer_type: str = "") -> list[tuple[str, ...]]:
    """The phrases a result must all carry to give `answer` away: the whole answer, and for a
    set answer its elements together."""
    keys: list[tuple[str, ...]] = []
    whole = normalized(answer)
    if len(whole.strip()) >= MIN_ANSWER_CHARS:
        keys.append((whole,))
    if "set" in answer_type.lower() or "," in answer:
        parts = tuple(normalized(p) for p in re.split(r",|\band\b", answer) if p.strip())
        if len(parts) > 1 and all(p.strip() for p in parts):
            keys.append(parts)
    return keys


#: How many results a filtered search asks its backend for, per result it returns: the ones
#: withheld are replaced by the next ones, so that a short answer does not say that something
#: was withheld (within this depth)
REFILL = 3


class HiddenAnswerFilter:
    """A search backend that withholds every result carrying a hidden item's answer or coming
    from the dataset's own pages (its hub id, its name in a URL or a title), so that the
    sandbox's search cannot hand back dev or test answers. Withheld results are replaced by
    the next ones of the ranking (`REFILL`), and the count withheld is kept for the recorded
    `service.search` call only: told to the sandbox, it marked every hidden answer of a
    dictionary sweep. Stateless, so that concurrent searches cannot see each other's."""

    def __init__(self, backend: SearchBackend, answers: list[tuple[str, str]],
                 sources: list[str]) -> None:
        self.backend, self.name = backend, backend.name
        self.keys = [k for answer, kind in answers for k in answer_keys(answer, kind)]
        self.sources = [normalized(s).replace(" ", "") for s in sources]

    def carries_hidden(self, result: SearchResult) -> bool:
        text = normalized(f"{result.title} {result.snippet} {result.url}")
        if any(all(p in text for p in key) for key in self.keys):
            return True
        place = normalized(f"{result.url} {result.title}").replace(" ", "")
        return any(s in place for s in self.sources)

    def filtered(self, query: str, k: int = DEFAULT_K) -> tuple[list[SearchResult], int]:
        """The first `k` results that carry nothing hidden, from the backend's first
        `REFILL * k`; and how many of those were withheld (for the record)."""
        results = self.backend.search(query, min(REFILL * k, REFILL * MAX_K))
        kept = [r for r in results if not self.carries_hidden(r)]
        return kept[:k], len(results) - len(kept)

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]:
        return self.filtered(query, k)[0]
