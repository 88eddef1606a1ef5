"""DriverLedger: a tree's share on a shard, kept with the driver that counts the whole tree.

The driver counts a tree's running children and its turns over every shard: a child about
to start here takes its place there first (given back if it never starts), each ending is
reported, and under a turn limit each model call is granted there before it is made, so
children on several shards never overshoot the tree's limits between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from attrs import define

from subsessions._core.state import SessionState
from subsessions.errors import BudgetExhausted
from subsessions.models.base import ModelRequest
from subsessions.ray.channel import Channel
from subsessions.ray.wire import Call, Room


@define(eq=False)
class DriverLedger:
    channel: Channel
    root_id: str
    turn_limit: int | None = None  # the tree's max_turns

    async def reserve(self) -> None:
        asked = asyncio.ensure_future(self.channel.ask(self.root_id, "room", ""))
        try:
            await asyncio.shield(asked)
        except asyncio.CancelledError:  # the driver may count it: not once it has answered
            asked.add_done_callback(self._unasked)
            raise

    def _unasked(self, asked: asyncio.Future[Any]) -> None:
        if not asked.cancelled() and asked.exception() is None:
            self.give_back()

    def reserve_now(self) -> None:
        """A follow-up (send_message), checked against this shard's count only."""
        self.channel.send(Room(self.root_id, 1))

    def give_back(self) -> None:
        self.channel.send(Room(self.root_id, -1))

    def ended(self) -> None:
        self.channel.send(Room(self.root_id, -1))

    def respond(self, host: Any, client: Any, request: Any) -> Awaitable[Any]:
        return self._respond(host, client, request)

    async def _respond(self, host: SessionState, client: Any, request: ModelRequest) -> Any:
        """The driver hears of each model call as it begins (the child's live usage). With
        a turn limit the tree's turn is granted there first; none left: the tree is spent,
        this session stops here."""
        top = host
        while top.parent is not None and top.parent.parent is not None:
            top = top.parent
        limit = self.turn_limit
        if limit is None:
            self.channel.send(Call(self.root_id, top.session_id, host.session_id, host.turns,
                                   host.tool_calls))
            return await client.respond(request)
        granted = await self.channel.ask(self.root_id, "turn", "", host.session_id,
                                         host.turns, host.tool_calls,
                                         child_id=top.session_id)
        if granted is None:
            error = BudgetExhausted("turns", limit)
            host.claim_budget_stop(error)
            raise error
        response = await client.respond(request)
        # its charge (next, with nothing awaited between) makes the tree's count `granted`:
        # the tree's last turn, wanting more, stops the tree as in process
        host.meter.root.turns = granted - 1
        return response
