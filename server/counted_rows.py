"""A counted record: one `ToolCall` row per run, tool and process that holds counts.

Why: what a flood does must stay in the record (the store keeps the record of every failed
call), but a store write per refused message would make the flood cost the store, and the
worker threads every run's calls share, as much as served calls. So a refusal, or any event
that only needs counting (an HTTP session opened), adds to counters in memory, and the row
that holds them is written in a thread of its own within `every_s`, at most once per
`every_s` however many events come (one write for a burst). `flush` writes now (the host is
stopping, or the first event of a run must be in the store before it is answered).

The row is made on the first write and rewritten in place after that, so that it keeps its
place among the run's calls, and the report and `a2rl show` list it with them. With
`open_only` nothing is written once the run has ended: its record is closed (what was counted
in its last second, not yet written, is not kept).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from a2rl.store import Store
from a2rl.store.records import toolcalls

FLUSH_EVERY_S = 1.0


class CountedRow:
    """Counters kept in one row of the run's calls; thread-safe."""

    def __init__(self, store: Store | None, run_id: str, tool: str, transport: str,
                 describe: Callable[[Mapping[str, int]], str], kinds: tuple[str, ...] = (),
                 is_error: bool = True, every_s: float = FLUSH_EVERY_S,
                 open_only: bool = False) -> None:
        """`describe(counts)` is the row's summary (and its error, when `is_error`); `kinds`
        are keys always written (0 when never counted), so readers see every bound."""
        self.store, self.run_id, self.tool, self.transport = store, run_id, tool, transport
        self.describe, self.kinds, self.is_error, self.every_s = describe, kinds, is_error, every_s
        self.open_only = open_only
        self.counts: Counter[str] = Counter()
        self.extra: dict[str, Any] = {}  # more arguments, set by the owner under `lock`
        self.lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one writer of the row at a time: made once
        self._row_id: int | None = None
        self._flushed_at = float("-inf")
        self._timer: threading.Timer | None = None
        self._dirty = False

    @property
    def written(self) -> bool:
        """Whether the row exists in the store."""
        return self._row_id is not None

    def add(self, kind: str, n: int = 1) -> None:
        """Count `n` of `kind`; the row is written within `every_s`, never by this thread."""
        with self.lock:
            self.counts[kind] += n
            self._dirty = True
            if self._timer is None and self.store is not None:
                delay = max(0.0, self._flushed_at + self.every_s - time.monotonic())
                self._timer = threading.Timer(delay, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the counts to the row (made on first use); nothing when nothing changed."""
        with self._flush_lock:
            with self.lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                if not self._dirty or self.store is None:
                    return
                counts = {kind: self.counts[kind] for kind in self.kinds}
                counts.update(self.counts)
                arguments = {**counts, **self.extra}
                self._dirty, self._flushed_at = False, time.monotonic()
                row_id = self._row_id
            text = self.describe(counts)
            row_id = toolcalls.write_counted(
                self.store, row_id, self.run_id, self.tool, self.transport,
                arguments=arguments, summary=text, is_error=self.is_error,
                open_only=self.open_only)
            if row_id is not None:
                with self.lock:
                    self._row_id = row_id

    def close(self) -> None:
        """Write what is still unwritten (the host is stopping)."""
        self.flush()
