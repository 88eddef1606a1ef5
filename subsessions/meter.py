"""Meter: what one session has spent against its budget, chained to its parent's meter.

Tokens count upwards (a child's tokens are its parent's and its tree's too); turns are
a session's own model calls, except the root's meter, which counts every model call of
its tree (the tree's budget). A meter only works when it or an ancestor has a limit, so a
tree without budgets pays one attribute test per model call.

Reaching a limit is reported, not acted on: the meter names the session whose limit was
reached (the highest, when several are) and its `stop` ends that session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from attrs import define, field

from subsessions.budget import Budget, left
from subsessions.errors import BudgetExhausted

Stop = Callable[[BudgetExhausted], None]


def _never(_: BudgetExhausted) -> None:
    return None


@define(eq=False)
class Meter:
    limits: Budget
    parent: Meter | None = None
    stop: Stop = _never  # ends the session this meter counts for (cascading to its tree)
    active: bool = field(init=False)  # it or an ancestor has a limit
    root: Meter = field(init=False)
    tokens: int = field(default=0, init=False)  # reported tokens, descendants' included
    turns: int = field(default=0, init=False)  # model calls (the root's: its whole tree's)
    started: float = field(init=False)  # time.monotonic()
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        parent = self.parent
        self.root = self if parent is None else parent.root
        self.active = not self.limits.unlimited or (parent is not None and parent.active)
        self.started = time.monotonic()

    def __repr__(self) -> str:
        return f"<Meter {self.limits} tokens={self.tokens} turns={self.turns}>"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> Budget:
        """What is left of this meter's limits (a spent limit is 0)."""
        return left(self.limits, self.turns, self.tokens, self.elapsed())

    def charge(self, tokens: int, wants_more: bool) -> tuple[Meter, BudgetExhausted] | None:
        """Count one model call and its tokens up the chain. The highest meter whose limit
        is now reached, and how: tokens when spent, turns when another call is wanted."""
        if not self.active:
            return None
        self.turns += 1
        root = self.root
        if root is not self:
            root.turns += 1
        reached: tuple[Meter, BudgetExhausted] | None = None
        node: Meter | None = self
        while node is not None:
            node.tokens += tokens
            error = node._reached(wants_more and (node is self or node is root))
            if error is not None:
                reached = (node, error)
            node = node.parent
        return reached

    def spent(self) -> tuple[Meter, BudgetExhausted] | None:
        """Before a task: a limit of this meter or an ancestor that leaves no room for one
        more model call (the highest such meter)."""
        if not self.active:
            return None
        reached: tuple[Meter, BudgetExhausted] | None = None
        node: Meter | None = self
        while node is not None:
            limits = node.limits
            error = node._reached(node is self or node is self.root)
            if error is None and limits.max_seconds is not None and (
                    node.elapsed() >= limits.max_seconds):
                error = BudgetExhausted("seconds", limits.max_seconds)
            if error is not None:
                reached = (node, error)
            node = node.parent
        return reached

    def _reached(self, count_turns: bool) -> BudgetExhausted | None:
        limits = self.limits
        if limits.max_tokens is not None and self.tokens >= limits.max_tokens:
            return BudgetExhausted("tokens", limits.max_tokens)
        if count_turns and limits.max_turns is not None and self.turns >= limits.max_turns:
            return BudgetExhausted("turns", limits.max_turns)
        return None

    # -- the wall-clock limit ------------------------------------------------------------------
    def arm(self) -> None:
        """Start the clock's alarm (while the session or its children run)."""
        seconds = self.limits.max_seconds
        if seconds is None or self._timer is not None:
            return
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, seconds - self.elapsed()), self._ring, seconds)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _ring(self, seconds: float) -> None:
        self._timer = None
        self.stop(BudgetExhausted("seconds", seconds))
