"""Small helpers shared by test modules (not fixtures)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlmodel import select

from a2rl.store import Store, ToolCall


def calls(store: Store, run_id: str) -> list[ToolCall]:
    with store.session() as s:
        return list(s.exec(select(ToolCall).where(ToolCall.run_id == run_id)
                           .order_by(ToolCall.id)).all())  # type: ignore[arg-type]


def last_call(store: Store, run_id: str) -> ToolCall:
    rows = calls(store, run_id)
    assert rows, "no tool call was recorded"
    return rows[-1]


def text_of(result: Any) -> str:
    return " ".join(getattr(p, "text", "") for p in result.content)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
