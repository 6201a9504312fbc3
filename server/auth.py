"""Per-run bearer tokens for the HTTP transport: the token selects the run.

A token is shown once when the run is made; only its sha256 is stored.
"""

from __future__ import annotations

import hashlib
import secrets

import anyio
from mcp.server.auth.provider import AccessToken
from sqlmodel import select

from a2rl.store import Run, Store


def new_token() -> tuple[str, str]:
    token = "a2rl_" + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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
        with self.store.session() as s:
            return s.exec(select(Run.id).where(Run.token_hash == hash_token(token))).first()
