"""SessionTree: what a whole tree of sessions shares, owned in one place (one per root).

Limits are counted over the tree, so the running count lives here rather than in any
one manager; the profile namespace and the tool definitions built from it are the same
for every session of the tree, so they are built once. The tree's budget is the root's
meter; a child's budget is clamped here to what its parent and the tree have left.

TreeLedger: who else counts a tree's running children and its model turns. A tree run in
one process counts them itself (`LOCAL`); one whose children also run in other processes
(Ray shards) keeps a ledger in the driver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from attrs import define, field

from subsessions._core.meter import Alarms, Meter, Stop
from subsessions._core.specs import tool_specs
from subsessions.budget import Budget
from subsessions.config import SessionConfig
from subsessions.errors import ChildLimitReached, DepthLimitReached, QueueFull
from subsessions.profiles import LoadedProfile, Profile, profile_namespace


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


Specs = tuple[dict[str, Any], ...]
NO_BUDGET = Budget()


@define(eq=False, repr=False)
class Reservation:
    """A new child's place in its tree, held from before the child is built until it
    starts (`commit`); on every other path leaving the `with` gives it back."""

    _tree: SessionTree
    _open: bool = True

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self._open = False
            self._tree.ledger.give_back()

    def commit(self) -> None:
        """Its child started: it counts as running until it ends."""
        if not self._open:
            raise RuntimeError("a reservation is committed or given back once")
        self._open = False
        self._tree.child_started()


@define(eq=False)
class SessionTree:
    config: SessionConfig  # the root's: limits, custom agents, the host's handlers and hooks
    _loaded: Mapping[str, LoadedProfile]
    ledger: TreeLedger = field(default=LOCAL, kw_only=True)  # who else counts this tree
    _running: int = field(default=0, init=False)
    meter: Meter | None = field(default=None, init=False)  # the root's: the tree's budget
    alarms: Alarms = field(factory=Alarms, init=False)  # the tree's limits on seconds
    _root_busy: bool = field(default=False, init=False)  # the root runs a task
    # spawns waiting for a place (FIFO, by child id): each starts its child when called
    _queue: dict[str, Callable[[Reservation], None]] = field(factory=dict, init=False)
    _profiles: dict[str, Profile] | None = field(default=None, init=False)
    _subsession_specs: Specs | None = field(default=None, init=False)

    def __repr__(self) -> str:
        return (f"<SessionTree running={self._running}/{self.max_children} "
                f"max_depth={self.max_depth}>")

    @property
    def max_depth(self) -> int:
        return self.config.max_depth

    @property
    def max_children(self) -> int:
        return self.config.max_children

    @property
    def running(self) -> int:
        """Children running anywhere in the tree."""
        return self._running

    @property
    def queued(self) -> int:
        """Spawns of the tree waiting for a place."""
        return len(self._queue)

    def must_queue(self, parent_depth: int) -> bool:
        """A spawn now waits in the queue (no place is free, or others wait first); raises
        when it may neither start nor wait. Only a tree counted here alone queues: one
        that a driver counts too (a Ray shard's) refuses as before."""
        if parent_depth >= self.max_depth:
            raise DepthLimitReached(self.max_depth)
        if self._running < self.max_children and not self._queue:
            return False
        limit = self.config.max_queued
        if limit == 0 or self.ledger is not LOCAL:
            raise ChildLimitReached(self.max_children)
        if len(self._queue) >= limit:
            raise QueueFull(self.max_children, limit)
        return True

    def enqueue(self, child_id: str, start: Callable[[Reservation], None]) -> None:
        self._queue[child_id] = start

    def withdraw(self, child_id: str) -> bool:
        """A queued spawn cancelled before its turn."""
        return self._queue.pop(child_id, None) is not None

    def start_queued(self) -> None:
        """Places freed: the oldest queued spawns start, each with a place of its own."""
        while self._queue and self._running < self.max_children:
            child_id = next(iter(self._queue))
            self._queue.pop(child_id)(Reservation(self))

    def check_room(self, parent_depth: int) -> None:
        """Refuse a child below the depth limit or beyond the tree's running limit."""
        if parent_depth >= self.max_depth:
            raise DepthLimitReached(self.max_depth)
        if self._running >= self.max_children:
            raise ChildLimitReached(self.max_children)

    async def reserve(self, parent_depth: int) -> Reservation:
        """A place for a new child below `parent_depth`, taken before the child is built
        (and from the ledger's process, when another one counts the tree too)."""
        self.check_room(parent_depth)
        await self.ledger.reserve()
        return Reservation(self)

    def reserve_follow_up(self) -> Reservation:
        """A place for an ended child's next task (send_message): no depth to check."""
        self.check_running()
        self.ledger.reserve_now()
        return Reservation(self)

    def check_running(self) -> None:
        """Refuse one more running child beyond the tree's running limit."""
        if self._running >= self.max_children:
            raise ChildLimitReached(self.max_children)

    def child_started(self) -> None:
        """A reserved child started (`Reservation.commit`)."""
        self._running += 1
        if self.meter is not None and self.meter.active:
            self.meter.arm()

    def child_ended(self) -> None:
        self._running -= 1
        self.ledger.ended()
        if self._queue:
            self.start_queued()
        if self.meter is not None and self.meter.active:
            self._quiet()

    def respond(self, host: Any, client: Any, request: Any) -> Awaitable[Any]:
        """One model call of a session of this tree (through its ledger: a tree counted in
        another process too grants each call there first)."""
        return self.ledger.respond(host, client, request)

    def root_busy(self, busy: bool) -> None:
        """The root's task started or ended: the tree's clock rings only while work runs."""
        self._root_busy = busy
        if busy and self.meter is not None:
            self.meter.arm()
        self._quiet()

    def _quiet(self) -> None:
        if self.meter is not None and not self._running and not self._root_busy:
            self.meter.disarm()

    # -- budgets ------------------------------------------------------------------------------
    def root_meter(self, stop: Stop) -> Meter:
        """The root's meter, counting the whole tree against the root's budget."""
        self.meter = Meter(self.config.budget or NO_BUDGET, None, stop, self.alarms)
        return self.meter

    def child_meter(self, parent: Meter, budget: Budget | None, stop: Stop) -> Meter:
        """A child's meter: its budget clamped to what its parent and the tree have left."""
        limits = budget or NO_BUDGET
        if parent.active:
            limits = limits.clamp(parent.left()).clamp(parent.root.left())
        return Meter(limits, parent, stop, self.alarms)

    def profiles(self) -> dict[str, Profile]:
        """The profiles children of this tree can be spawned from, by name (built once)."""
        if self._profiles is None:
            self._profiles = profile_namespace(self._loaded, self.config.custom_agents)
        return self._profiles

    def subsession_specs(self) -> Specs:
        """The sub-session tools' definitions, listing this tree's profiles."""
        if self._subsession_specs is None:
            self._subsession_specs = tool_specs(self.profiles())
        return self._subsession_specs
