"""Session events: Copilot-style envelopes, delivered to listeners and forwarded upwards.

An event a child emits reaches its own hub's listeners, then its parent hub's and every
ancestor's, carrying `parent_tool_call_id` (the call that spawned the emitter) so a
UI can nest it. Hubs are chained to their parent hub, so this module knows nothing of
sessions. Nothing is built when nobody listens: fan-out stays cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import Any

from attrs import define, field, frozen

from subsessions._util.clock import clock

log = logging.getLogger("subsessions")

EventHandler = Callable[["SessionEvent"], Any]
_ids = itertools.count(1)


@frozen
class SessionEvent:
    """One event of a session's stream, in the Copilot SDKs' envelope.

    `type` is e.g. `session.idle`, `assistant.message`, `tool.execution_start`,
    `subagent.started`; a child's events reach its ancestors with `parent_tool_call_id` in
    `data`.
    """

    id: str
    timestamp: str
    parent_id: str | None  # the previous event of the same session
    type: str
    data: dict[str, Any]
    session_id: str  # the session it happened in (a child's own id when forwarded)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "timestamp": self.timestamp, "parent_id": self.parent_id,
                "type": self.type, "data": self.data, "session_id": self.session_id}


class _Subscriber:
    """What the hub holds of a stream: never the stream itself, so a dropped one is freed."""

    __slots__ = ("queue", "reading")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[SessionEvent | None] = asyncio.Queue()
        self.reading = False  # iterated at least once: someone is there to answer


class EventStream:
    """One subscriber's events, from the moment it was taken until the session closes.

    It answers for the session (deferred tools wait for it) only once iterated: a stream
    nobody reads can answer nothing. It leaves the hub when it ends, on `aclose()`, or as
    soon as it is dropped (no event loop pass needed), so a forgotten one costs nothing.
    """

    __slots__ = ("__weakref__", "_leave", "_subscriber")

    def __init__(self, hub: EventHub) -> None:
        self._subscriber = subscriber = _Subscriber()
        hub.subscribe(subscriber)
        self._leave = weakref.finalize(self, hub.unsubscribe, subscriber)
        self._leave.atexit = False  # at exit no loop is left to wake a reader on

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SessionEvent:
        if not self._leave.alive:
            raise StopAsyncIteration
        self._subscriber.reading = True
        event = await self._subscriber.queue.get()
        if event is None:
            self._leave()
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Stop listening; a reader waiting on this stream ends too."""
        self._leave()


@define(eq=False)
class EventHub:
    """One session's listeners (callbacks and async subscribers), chained to its parent's hub."""

    session_id: str = ""
    parent: EventHub | None = None
    call_id: str | None = None  # the call that spawned this hub's session
    # Tuples, replaced on change: listeners come and go seldom, while a hub is made for every
    # child and kept with its record (an empty tuple is no object for the collector to scan).
    _handlers: tuple[EventHandler, ...] = field(default=(), init=False)
    _subscribers: tuple[_Subscriber, ...] = field(default=(), init=False)
    _last_id: str | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    @property
    def listening(self) -> bool:
        """Whether an event would reach anyone (a stream not read yet keeps it for later)."""
        return bool(self._handlers or self._subscribers)

    @property
    def answering(self) -> bool:
        """Whether anyone could answer a request: a callback, or a stream being read."""
        return bool(self._handlers) or any(s.reading for s in self._subscribers)

    def on(self, handler: EventHandler) -> Callable[[], None]:
        """Call `handler` with every event; returns the function that unsubscribes it."""
        self._handlers += (handler,)

        def off() -> None:
            self._handlers = _without(self._handlers, handler)

        return off

    def stream(self) -> EventStream:
        """Every event from this call on, until the session is closed."""
        return EventStream(self)

    def subscribe(self, subscriber: _Subscriber) -> None:
        if self._closed:
            subscriber.queue.put_nowait(None)
        else:
            self._subscribers += (subscriber,)

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        self._subscribers = _without(self._subscribers, subscriber)
        subscriber.queue.put_nowait(None)  # wakes a reader still waiting on it

    def close(self) -> None:
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.queue.put_nowait(None)
        self._subscribers = ()

    def deliver(self, event: SessionEvent) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                log.exception("event handler failed on %s", event.type)
        for subscriber in self._subscribers:
            subscriber.queue.put_nowait(event)

    def next_id(self) -> tuple[str, str | None]:
        """A new event id and the previous one of this hub (the new event's `parent_id`)."""
        previous, self._last_id = self._last_id, f"evt_{next(_ids)}"
        return self._last_id, previous


def _without(items: tuple[Any, ...], item: object) -> tuple[Any, ...]:
    """`items` less the first that equals `item` (as `list.remove`, but nothing if absent)."""
    if item not in items:
        return items
    at = items.index(item)
    return items[:at] + items[at + 1:]


def listening(hub: EventHub) -> bool:
    """Whether anyone would receive an event of `hub` (it or an ancestor listens)."""
    node: EventHub | None = hub
    while node is not None:
        if node.listening:
            return True
        node = node.parent
    return False


def emit(hub: EventHub, kind: str, data: dict[str, Any]) -> None:
    """Deliver an event in `hub`'s session, then forward it to each ancestor hub."""
    if not listening(hub):  # the common case: nothing is built at all
        return
    event_id, previous = hub.next_id()
    event = SessionEvent(
        id=event_id, timestamp=clock.now(), parent_id=previous, type=kind, data=data,
        session_id=hub.session_id,
    )
    hub.deliver(event)
    if hub.parent is None:
        return
    forwarded = SessionEvent(
        id=event.id, timestamp=event.timestamp, parent_id=event.parent_id, type=kind,
        data={**data, "parent_tool_call_id": hub.call_id}, session_id=hub.session_id,
    )
    ancestor: EventHub | None = hub.parent
    while ancestor is not None:
        ancestor.deliver(forwarded)
        ancestor = ancestor.parent
