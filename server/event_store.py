"""Resumable HTTP streams: what the server sent on each session's SSE streams, kept a while.

A client whose stream drops during a long call (a `get_score` waiting for grading, a network
blip) reconnects with `GET` and the last event id it saw (`Last-Event-ID`, SEP-1699); the SDK
asks the session's `EventStore` to replay what followed on that stream, then goes on with the
live stream. Each SSE event carries an id and the first one of each stream a `retry`, so a
client knows where it was and how long to wait (`server.sse_retry_ms`).

Each session has its own `SessionEvents` (the SDK's streams are named by request id, which two
sessions share: one store for all would replay one session's answers into another). What is
kept is bounded: at most `server.resume_bytes_per_session` per session and `server.resume_bytes`
for every session together (`EventBudget`), the oldest events going first; a session's events
go when it ends. An event id that is no longer kept is answered 404 by the transport
(`knows`), so a client gives up with an error instead of resuming an empty stream for ever.

The store is also where a request's answer is first seen: `pending` holds the ids of this
session's requests not yet answered, so that a second request with the id of one in flight is
refused with an error (the SDK would route one answer to both and leave one waiting for ever).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import NamedTuple

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse, jsonrpc_message_adapter

_OVERHEAD = 200  # what an event costs besides its JSON (its id, the stream's name, the record)


class _Event(NamedTuple):
    stream_id: StreamId
    data: bytes | None  # the message as JSON; None: a stream's priming event
    size: int


class EventBudget:
    """The bytes every session's events may take together; the oldest go first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.live = 0  # events kept, every session together
        self._order: deque[tuple[SessionEvents, int]] = deque()  # may name dropped ones

    def added(self, session: SessionEvents, number: int, size: int) -> None:
        self.bytes += size
        self.live += 1
        self._order.append((session, number))
        while self.bytes > self.max_bytes and self._order:
            owner, oldest = self._order.popleft()
            owner.drop(oldest)  # a no-op when its session dropped it already
        if len(self._order) > 2 * self.live + 1024:  # forget the ones sessions dropped
            self._order = deque(e for e in self._order if e[1] in e[0].events)

    def released(self, size: int) -> None:
        self.bytes -= size
        self.live -= 1


class SessionEvents(EventStore):
    """One session's events, in order; replayed after an id on the stream of that id."""

    def __init__(self, session_id: str, max_bytes: int, budget: EventBudget) -> None:
        self.session_id, self.max_bytes, self.budget = session_id, max_bytes, budget
        self.events: OrderedDict[int, _Event] = OrderedDict()
        self.bytes = 0
        self.pending: set[str] = set()
        self._numbers = itertools.count(1)
        self.closed = False

    def __bool__(self) -> bool:  # the SDK tests `if self._event_store`: never falsy
        return True

    # -- the SDK's interface ----------------------------------------------------------------
    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        number = next(self._numbers)
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self.pending.discard(str(message.id))
        if self.closed:
            return _event_id(number)
        data = None if message is None else message.model_dump_json(
            by_alias=True, exclude_unset=True).encode()
        size = _OVERHEAD + len(stream_id) + (len(data) if data is not None else 0)
        if size > self.max_bytes or size > self.budget.max_bytes:
            return _event_id(number)  # kept nowhere: a client that loses it cannot resume
        self.events[number] = _Event(stream_id, data, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self.drop(next(iter(self.events)))
        self.budget.added(self, number, size)
        return _event_id(number)

    async def replay_events_after(self, last_event_id: EventId,
                                  send_callback: EventCallback) -> StreamId | None:
        """Send what followed `last_event_id` on its stream; its stream's name, or None when
        the id is not kept or the stream's answer was among what was sent (nothing more will
        come on it: the SDK then ends the resumed stream instead of waiting on it)."""
        after = _number(last_event_id)
        if after is None or after not in self.events:
            return None
        stream_id = self.events[after].stream_id
        sent = after
        while True:  # events stored while an earlier one was being sent are sent too
            later = [n for n in self.events if n > sent and self.events[n].stream_id == stream_id]
            if not later:
                return stream_id
            for number in later:
                event = self.events.get(number)
                sent = number
                if event is None or event.data is None:
                    continue
                message = jsonrpc_message_adapter.validate_json(event.data, by_name=False)
                await send_callback(EventMessage(message, _event_id(number)))
                if isinstance(message, JSONRPCResponse | JSONRPCError):
                    return None

    # -- ours ---------------------------------------------------------------------------
    def knows(self, event_id: str) -> bool:
        """Whether a stream can be resumed after `event_id` (it is still kept)."""
        number = _number(event_id)
        return number is not None and number in self.events

    def begin(self, request_id: str) -> bool:
        """Note a request as in flight; False when one with this id already is."""
        if request_id in self.pending:
            return False
        self.pending.add(request_id)
        return True

    def drop(self, number: int) -> None:
        event = self.events.pop(number, None)
        if event is not None:
            self.bytes -= event.size
            self.budget.released(event.size)

    def close(self) -> None:
        """The session ended: its events go, and none are kept from now on."""
        self.closed = True
        self.pending.clear()
        for number in list(self.events):
            self.drop(number)


def _event_id(number: int) -> EventId:
    return str(number)


def _number(event_id: str) -> int | None:
    return int(event_id) if event_id.isdigit() and len(event_id) < 19 else None
