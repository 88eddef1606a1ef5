"""Session events: Copilot-style envelopes, delivered to listeners and forwarded upwards.

An event a child emits reaches its own listeners, then its parent's and every
ancestor's, carrying `parent_tool_call_id` (the call that spawned the emitter) so a
UI can nest it. Nothing is built when nobody listens: fan-out stays cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from subsessions.rollouts.recorder import clock

if TYPE_CHECKING:
    from subsessions.session import Session

log = logging.getLogger("subsessions")

EventHandler = Callable[["SessionEvent"], Any]
_ids = itertools.count(1)


@frozen
class SessionEvent:
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


class EventHub:
    """One session's listeners: callbacks and async subscribers."""

    __slots__ = ("_closed", "_handlers", "_last_id", "_subscribers")

    def __init__(self) -> None:
        self._handlers: list[EventHandler] = []
        self._subscribers: list[_Subscriber] = []
        self._last_id: str | None = None
        self._closed = False

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
        self._handlers.append(handler)

        def off() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return off

    def stream(self) -> EventStream:
        """Every event from this call on, until the session is closed."""
        return EventStream(self)

    def subscribe(self, subscriber: _Subscriber) -> None:
        if self._closed:
            subscriber.queue.put_nowait(None)
        else:
            self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)
        subscriber.queue.put_nowait(None)  # wakes a reader still waiting on it

    def close(self) -> None:
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.queue.put_nowait(None)
        self._subscribers.clear()

    def deliver(self, event: SessionEvent) -> None:
        for handler in list(self._handlers):
            try:
                handler(event)
            except Exception:
                log.exception("event handler failed on %s", event.type)
        for subscriber in self._subscribers:
            subscriber.queue.put_nowait(event)


def listening(session: Session) -> bool:
    """Whether anyone would receive an event of `session` (it or an ancestor listens)."""
    node: Session | None = session
    while node is not None:
        if node.events.listening:
            return True
        node = node.parent
    return False


def emit(session: Session, kind: str, data: dict[str, Any]) -> None:
    """Deliver an event in `session`, then forward it to each ancestor."""
    if not listening(session):  # the common case: nothing is built at all
        return
    chain: list[Session] = []
    node: Session | None = session
    while node is not None:
        chain.append(node)
        node = node.parent
    hub = session.events
    event = SessionEvent(
        id=f"evt_{next(_ids)}", timestamp=clock.now(), parent_id=hub._last_id, type=kind,
        data=data, session_id=session.session_id,
    )
    hub._last_id = event.id
    hub.deliver(event)
    if session.parent is None:
        return
    forwarded = SessionEvent(
        id=event.id, timestamp=event.timestamp, parent_id=event.parent_id, type=kind,
        data={**data, "parent_tool_call_id": session.call_id}, session_id=session.session_id,
    )
    for ancestor in chain[1:]:
        ancestor.events.deliver(forwarded)
