"""Per-run bearer tokens for the HTTP transport: the token selects the run.

A token is shown once when the run is made; only its sha256 is stored. The token of a run
that has ended still names it (so that its agent is told why), but its requests are refused
before they reach a tool: a closed record gets no more calls (transports.py).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import NamedTuple

import anyio
from mcp.server.auth.provider import AccessToken
from sqlmodel import select

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


class RunTokenVerifier:
    """Maps a bearer token to its run; the run id becomes the token's client id."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        # In a worker thread: every HTTP request asks, and a slow store must not hold the loop.
        run_id = await anyio.to_thread.run_sync(self.run_of, token)
        if run_id is None:
            return None
        return AccessToken(token=token, client_id=run_id, scopes=["run"])

    def run_of(self, token: str) -> str | None:
        """The id of the run this token opens, or None."""
        found = self.lookup(token)
        return found.run_id if found is not None else None

    def lookup(self, token: str) -> TokenRun | None:
        """The run this token opens and whether it has ended, or None."""
        with self.store.session() as s:
            row = s.exec(select(Run.id, Run.ended_at, Run.end_reason, Run.status).where(
                Run.token_hash == hash_token(token))).first()
        if row is None:
            return None
        run_id, ended_at, reason, status = row
        return TokenRun(run_id, None if ended_at is None else reason or status)
