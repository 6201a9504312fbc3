"""`[prices."MODEL"]`: what a driver model costs (the cost ledger, `store/ledger.py`)."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class ModelPrice(Section):
    """What a driver model costs, in USD per million tokens: the input tokens not read from
    the provider's cache, the output tokens, and the cached input tokens (default: the input
    price)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
