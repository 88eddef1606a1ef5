"""Answers to a shard's requests, sent together: one actor call per turn of the event loop.

Under a tree's turn limit each model call on a shard asks the driver for its turn, and each
descendant starting there asks for its place: one actor call per answer cost the driver as
much as the child itself. Answers given in one turn of the loop (the pump hands over many
requests at once) travel in one `answers` call instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from attrs import define, field

from subsessions.errors import error_text

Answer = tuple[int, bool, Any, str]  # (request id, ok, value, what answered: for an error)


@define(eq=False)
class Replies:
    """The answers for one shard not yet sent."""

    actor: Any
    _pending: list[Answer] = field(factory=list)
    _flush: asyncio.Handle | None = None

    def put(self, request_id: int, ok: bool, value: Any, what: str = "the driver") -> None:
        self._pending.append((request_id, ok, value, what))
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_soon(self._send)

    def _send(self) -> None:
        self._flush = None
        answers, self._pending = self._pending, []
        try:
            self.actor.answers.remote([answer[:3] for answer in answers])
        except Exception:  # a value that cannot be sent: each on its own, so only it fails
            for answer in answers:
                self._send_one(*answer)

    def _send_one(self, request_id: int, ok: bool, value: Any, what: str) -> None:
        try:
            self.actor.answer.remote(request_id, ok, value)
        except Exception as exc:
            self.actor.answer.remote(request_id, False, f"{what} answered with a value that "
                                     f"cannot be sent: {error_text(exc)}")
