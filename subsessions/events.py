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
from collections.abc import AsyncIterator, Callable
from typing import Any

from attrs import define, field, frozen

from subsessions.clock import clock

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


@define(eq=False)
class EventHub:
    """One session's listeners (callbacks and async subscribers), chained to its parent's hub."""

    session_id: str = ""
    parent: EventHub | None = None
    call_id: str | None = None  # the call that spawned this hub's session
    _handlers: list[EventHandler] = field(factory=list, init=False)
    _queues: list[asyncio.Queue[SessionEvent | None]] = field(factory=list, init=False)
    _last_id: str | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    @property
    def listening(self) -> bool:
        return bool(self._handlers or self._queues)

    def on(self, handler: EventHandler) -> Callable[[], None]:
        """Call `handler` with every event; returns the function that unsubscribes it."""
        self._handlers.append(handler)

        def off() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return off

    def stream(self) -> AsyncIterator[SessionEvent]:
        """Every event from this call on, until the session is closed."""
        queue: asyncio.Queue[SessionEvent | None] = asyncio.Queue()
        if self._closed:
            queue.put_nowait(None)
        else:
            self._queues.append(queue)
        return self._drain(queue)

    async def _drain(
        self, queue: asyncio.Queue[SessionEvent | None]
    ) -> AsyncIterator[SessionEvent]:
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            if queue in self._queues:
                self._queues.remove(queue)

    def close(self) -> None:
        self._closed = True
        for queue in self._queues:
            queue.put_nowait(None)
        self._queues.clear()

    def deliver(self, event: SessionEvent) -> None:
        for handler in list(self._handlers):
            try:
                handler(event)
            except Exception:
                log.exception("event handler failed on %s", event.type)
        for queue in self._queues:
            queue.put_nowait(event)

    def next_id(self) -> tuple[str, str | None]:
        """A new event id and the previous one of this hub (the new event's `parent_id`)."""
        previous, self._last_id = self._last_id, f"evt_{next(_ids)}"
        return self._last_id, previous


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
