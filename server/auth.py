"""Per-run bearer tokens for the HTTP transport: the token selects the run.

A token is shown once when the run is made; only its sha256 is stored. The token of a run
that has ended still names it (so that its agent is told why), but its requests are refused
before they reach a tool: a closed record gets no more calls (http_transport.py).

Lookups are cached (`RunTokenVerifier`): every HTTP request asks twice (the gate, then the
SDK's auth), and a store read each in the worker threads every run shares made a flood of
refused requests slow every other run. A live run's entry is trusted for `LIVE_TTL_S` (the HTTP
server also asks the store every few seconds which of its runs have ended, `ended_among`, and
marks them at once), an unknown token's for `UNKNOWN_TTL_S`, an ended run's for good; at most
`MAX_CACHED` entries, the least recently used going first. Misses read the store in at most
`MISS_THREADS` threads at once, so a flood of made-up tokens queues behind itself.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from typing import NamedTuple

import anyio
from mcp.server.auth.provider import AccessToken
from sqlmodel import col, select

from a2rl.store import Run, Store


def new_token() -> tuple[str, str]:
    token = "a2rl_" + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def ended_message(run_id: str, reason: str) -> str:
    """Why an ended run is not served (`a2rl serve --run`, and HTTP requests with its token)."""
    return (f"run {run_id} has ended ({reason}); its record is closed: make a new run "
            "(a2rl create)")


class TokenRun(NamedTuple):
    run_id: str
    ended: str | None  # why the run ended (its end reason, else its status); None: live


LIVE_TTL_S = 30.0
UNKNOWN_TTL_S = 5.0
MAX_CACHED = 4096
MISS_THREADS = 4


class RunTokenVerifier:
    """Maps a bearer token to its run; the run id becomes the token's client id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: OrderedDict[str, tuple[TokenRun | None, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._misses: anyio.CapacityLimiter | None = None

    async def verify_token(self, token: str) -> AccessToken | None:
        found = await self.alookup(token)
        if found is None:
            return None
        return AccessToken(token=token, client_id=found.run_id, scopes=["run"])

    async def alookup(self, token: str) -> TokenRun | None:
        """`lookup`, from the cache when it can (no thread), else in a worker thread: a slow
        store must not hold the event loop."""
        hit, found = self.cached(hash_token(token))
        if hit:
            return found
        if self._misses is None:
            self._misses = anyio.CapacityLimiter(MISS_THREADS)
        return await anyio.to_thread.run_sync(self.lookup, token, limiter=self._misses)

    def cached(self, digest: str) -> tuple[bool, TokenRun | None]:
        """(whether the cache answers, its answer)."""
        with self._lock:
            entry = self._cache.get(digest)
            if entry is None:
                return False, None
            found, until = entry
            if until < time.monotonic():
                del self._cache[digest]
                return False, None
            self._cache.move_to_end(digest)
            return True, found

    def run_of(self, token: str) -> str | None:
        """The id of the run this token opens, or None."""
        found = self.lookup(token)
        return found.run_id if found is not None else None

    def lookup(self, token: str) -> TokenRun | None:
        """The run this token opens and whether it has ended, or None."""
        digest = hash_token(token)
        hit, found = self.cached(digest)  # another thread may have read it meanwhile
        if hit:
            return found
        with self.store.session() as s:
            row = s.exec(select(Run.id, Run.ended_at, Run.end_reason, Run.status).where(
                Run.token_hash == digest)).first()
        if row is None:
            self._keep(digest, None, UNKNOWN_TTL_S)
            return None
        run_id, ended_at, reason, status = row
        found = TokenRun(run_id, None if ended_at is None else reason or status)
        self._keep(digest, found, LIVE_TTL_S if found.ended is None else float("inf"))
        return found

    def _keep(self, digest: str, found: TokenRun | None, ttl_s: float) -> None:
        with self._lock:
            self._cache[digest] = (found, time.monotonic() + ttl_s)
            self._cache.move_to_end(digest)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)

    def ended_among(self, run_ids: list[str]) -> dict[str, str]:
        """Which of these runs have ended, and why (one query); their cached tokens are
        marked ended at once."""
        ended: dict[str, str] = {}
        with self.store.session() as s:
            for start in range(0, len(run_ids), 500):
                rows = s.exec(select(Run.id, Run.end_reason, Run.status).where(
                    col(Run.id).in_(run_ids[start:start + 500]),
                    col(Run.ended_at).is_not(None))).all()
                ended.update((run_id, reason or status) for run_id, reason, status in rows)
        if ended:
            with self._lock:
                for digest, (found, _until) in list(self._cache.items()):
                    if found is not None and found.ended is None and found.run_id in ended:
                        self._cache[digest] = (found._replace(ended=ended[found.run_id]),
                                               float("inf"))
        return ended
