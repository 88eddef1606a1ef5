"""TreeLedger: who else counts a tree's running children, and its model turns.

A tree run in one process counts its children itself (`SessionTree`) and needs no one
else: `LOCAL`. A tree whose children also run in other processes (Ray shards) keeps a
ledger with the process that counts the whole tree, so several never overshoot its limits
between them: a place is taken there before a child is built and given back if the child
never starts (the tree's `Reservation`), each ending is reported, each model call granted.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol


class TreeLedger(Protocol):
    """What a tree tells (or asks) the process that counts it as a whole."""

    async def reserve(self) -> None: ...  # a place for a new child there (raises: none)
    def reserve_now(self) -> None: ...  # a place for a follow-up, counted without asking
    def give_back(self) -> None: ...  # a reserved place whose child never started
    def ended(self) -> None: ...  # a child that started has ended

    def respond(self, host: Any, client: Any, request: Any) -> Awaitable[Any]:
        """One model call of a session of the tree (the ledger may grant it first)."""
        ...


class LocalLedger:
    """A tree counted only here: nothing to ask, nothing to tell."""

    __slots__ = ()

    async def reserve(self) -> None:
        return None

    def reserve_now(self) -> None:
        return None

    def give_back(self) -> None:
        return None

    def ended(self) -> None:
        return None

    def respond(self, host: Any, client: Any, request: Any) -> Awaitable[Any]:
        call: Awaitable[Any] = client.respond(request)
        return call


LOCAL = LocalLedger()
