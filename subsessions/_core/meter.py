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
import heapq
import itertools
from collections.abc import Callable

from attrs import define, field

from subsessions._util.clock import clock
from subsessions.budget import Budget, left
from subsessions.errors import BudgetExhausted

Stop = Callable[[BudgetExhausted], None]


def _never(_: BudgetExhausted) -> None:
    return None


@define(eq=False)
class Alarms:
    """The wall-clock limits of a tree on one asyncio timer: a heap of deadlines (tuples, so
    ordered in C) instead of a timer per child. A disarmed meter's entry is skipped when it
    comes up, and the heap is rebuilt once most of it is such entries."""

    _heap: list[tuple[float, int]] = field(factory=list)  # (deadline, key)
    _armed: dict[int, Meter] = field(factory=dict)  # by key: the meters still armed
    _keys: itertools.count[int] = field(factory=itertools.count)
    _timer: asyncio.TimerHandle | None = None
    _next: float | None = None  # when the timer rings

    def __len__(self) -> int:
        return len(self._armed)

    def add(self, meter: Meter, deadline: float) -> int:
        """Set an alarm; its key, to remove it with."""
        key = next(self._keys)
        self._armed[key] = meter
        heapq.heappush(self._heap, (deadline, key))
        if self._next is None or deadline < self._next:
            self._schedule(deadline)
        return key

    def remove(self, key: int) -> None:
        del self._armed[key]
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._armed):
            self._heap = [e for e in self._heap if e[1] in self._armed]
            heapq.heapify(self._heap)

    def _schedule(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._next = deadline
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, deadline - clock.monotonic()), self._ring)

    def _ring(self) -> None:
        self._timer = self._next = None
        now = clock.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            meter = self._armed.pop(heapq.heappop(heap)[1], None)
            if meter is not None:
                meter.ring()
        while heap and heap[0][1] not in self._armed:  # removed ones on top
            heapq.heappop(heap)
        if heap:
            self._schedule(heap[0][0])
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = self._next = None


@define(eq=False)
class Meter:
    limits: Budget
    parent: Meter | None = None
    stop: Stop = _never  # ends the session this meter counts for (cascading to its tree)
    alarms: Alarms | None = None  # the tree's clock (a limit on seconds needs it)
    active: bool = field(init=False)  # it or an ancestor has a limit
    root: Meter = field(init=False)
    tokens: int = field(default=0, init=False)  # reported tokens, descendants' included
    turns: int = field(default=0, init=False)  # model calls (the root's: its whole tree's)
    started: float = field(init=False)  # clock.monotonic()
    _alarm: int | None = field(default=None, init=False)  # its alarm's key, while set

    def __attrs_post_init__(self) -> None:
        parent = self.parent
        self.root = self if parent is None else parent.root
        self.active = not self.limits.unlimited or (parent is not None and parent.active)
        self.started = clock.monotonic()

    def __repr__(self) -> str:
        return f"<Meter {self.limits} tokens={self.tokens} turns={self.turns}>"

    def elapsed(self) -> float:
        return clock.monotonic() - self.started

    def left(self) -> Budget:
        """What is left of this meter's limits (a spent limit is 0)."""
        return left(self.limits, self.turns, self.tokens, self.elapsed())

    def grant(self) -> int | None:
        """A turn counted ahead of its call, which another process makes (a shard): its
        number in this meter's count, or None when the limit leaves none."""
        limit = self.limits.max_turns
        if limit is not None and self.turns >= limit:
            return None
        self.turns += 1
        return self.turns

    def charge(self, tokens: int, wants_more: bool,
               granted: bool = False) -> tuple[Meter, BudgetExhausted] | None:
        """Count one model call (unless `granted`: counted at its grant) and its tokens up
        the chain. The highest meter whose limit is now reached, and how: tokens when
        spent, turns when another call is wanted."""
        if not self.active:
            return None
        if not granted:
            self.turns += 1
            root = self.root
            if root is not self:
                root.turns += 1
        return self._highest(tokens, wants_more, False)

    def spent(self) -> tuple[Meter, BudgetExhausted] | None:
        """Before a task: a limit of this meter or an ancestor that leaves no room for one
        more model call (the highest such meter)."""
        if not self.active:
            return None
        return self._highest(0, True, True)

    def _highest(
        self, tokens: int, wants_more: bool, timed: bool
    ) -> tuple[Meter, BudgetExhausted] | None:
        """Add `tokens` up the chain; the highest meter whose limit is reached (turns count
        for this meter and the root's only, seconds only when `timed`)."""
        reached: tuple[Meter, BudgetExhausted] | None = None
        root = self.root
        node: Meter | None = self
        while node is not None:
            node.tokens += tokens
            limits = node.limits
            if limits.max_tokens is not None and node.tokens >= limits.max_tokens:
                reached = (node, BudgetExhausted("tokens", limits.max_tokens))
            elif (wants_more and limits.max_turns is not None and node.turns >= limits.max_turns
                  and (node is self or node is root)):
                reached = (node, BudgetExhausted("turns", limits.max_turns))
            elif timed and limits.max_seconds is not None and (
                    clock.monotonic() - node.started >= limits.max_seconds):
                reached = (node, BudgetExhausted("seconds", limits.max_seconds))
            node = node.parent
        return reached

    # -- the wall-clock limit ------------------------------------------------------------------
    def arm(self) -> None:
        """Set the alarm of its limit on seconds (while the session or its children run)."""
        seconds = self.limits.max_seconds
        if seconds is None or self._alarm is not None or self.alarms is None:
            return
        self._alarm = self.alarms.add(self, self.started + seconds)

    def disarm(self) -> None:
        if self._alarm is not None and self.alarms is not None:
            self.alarms.remove(self._alarm)
            self._alarm = None

    def ring(self) -> None:
        """Its deadline passed (called by the alarms)."""
        self._alarm = None
        seconds = self.limits.max_seconds
        assert seconds is not None
        self.stop(BudgetExhausted("seconds", seconds))
