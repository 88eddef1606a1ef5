"""Session events: Copilot-style envelopes, delivered to listeners and forwarded upwards.

An event a child emits reaches its own listeners, then its parent's and every
ancestor's, carrying `parent_tool_call_id` (the call that spawned the emitter) so a
UI can nest it. Nothing is built when nobody listens: fan-out stays cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from subsessions.clock import clock

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


class EventHub:
    """One session's listeners: callbacks and async subscribers."""

    __slots__ = ("_closed", "_handlers", "_last_id", "_queues")

    def __init__(self) -> None:
        self._handlers: list[EventHandler] = []
        self._queues: list[asyncio.Queue[SessionEvent | None]] = []
        self._last_id: str | None = None
        self._closed = False

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
