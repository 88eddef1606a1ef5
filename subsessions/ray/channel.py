"""A shard's channel to the driver: requests it answers, events and counts it is told.

The driver pulls the outbox (one long call per shard) and handles its messages in order, so
a child's ending (`Ended`) is seen after everything the child sent before it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from attrs import define, field

from subsessions.errors import RemoteError
from subsessions.otel.wire import SpanBatch
from subsessions.ray.wire import Call, Cancel, Ended, Event, Request, Room, Spent

Message = Request | Event | Cancel | Room | Call | Spent | Ended | SpanBatch


@define(eq=False)
class Channel:
    """Requests to the driver and their answers; the driver pulls the outbox."""

    outbox: asyncio.Queue[Message] = field(factory=asyncio.Queue)
    _waiting: dict[int, asyncio.Future[tuple[bool, Any]]] = field(factory=dict)
    _ids: itertools.count[int] = field(factory=lambda: itertools.count(1))

    def send(self, message: Message) -> None:
        self.outbox.put_nowait(message)

    async def ask(self, root_id: str, kind: str, name: str, *args: Any,
                  child_id: str = "") -> Any:
        """Run a handler in the driver; its failure is raised here with the same text, and
        a cancelled caller cancels the handler there too."""
        request_id = next(self._ids)
        future = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        self.send(Request(request_id, root_id, child_id, kind, name, args))
        try:
            ok, value = await future
        except asyncio.CancelledError:
            self.send(Cancel(request_id))
            raise
        finally:
            self._waiting.pop(request_id, None)
        if not ok:
            raise RemoteError(str(value))
        return value

    def answer(self, request_id: int, ok: bool, value: Any) -> None:
        future = self._waiting.get(request_id)
        if future is not None and not future.done():
            future.set_result((ok, value))
