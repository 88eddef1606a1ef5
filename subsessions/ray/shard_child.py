"""ShardChild: a top-level session's child as a shard runs it (an ordinary `Child` under the
shard's stand-in for its top-level session; `shard.py` starts it and reports its ending)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from attrs import evolve

from subsessions._core import turns
from subsessions._core.conversation import Child
from subsessions._core.kit import Kit
from subsessions._core.meter import Meter, Stop
from subsessions._core.origin import Origin
from subsessions._core.session import Session
from subsessions._core.specs import heard
from subsessions.config import SessionConfig, Tool
from subsessions.ray.wire import ChildSpec
from subsessions.rollouts.reader import read_rollout


class ShardChild(Child):
    """A top-level session's child as a shard runs it. Its stand-in parent keeps no record of
    it (it never settles here: the driver's child does); its own `stop` keeps the first stop
    (a cancel, a budget's from the driver, its own budget's), as in process."""

    __slots__ = ("follow_up", "to_parent")

    def __init__(self, config: SessionConfig, *, parent: Session, spec: ChildSpec,
                 share: Meter | None, to_parent: Callable[[str], Awaitable[str]]) -> None:
        kit = Kit.of(config, spec.profile, spec.tool_context, parent.tree, parent.depth + 1)
        super().__init__(
            parent, kit, spec.session_id, spec.call_id, spec.budget, source=spec.source,
            origin=Origin(spec.session_id, spec.rollout_path, started_at=spec.started_at,
                          token_usage=spec.token_usage, counts=spec.counts,
                          history=tuple(read_rollout(spec.rollout_path).response_items()
                                        if spec.follow_up else spec.history),
                          inbox=tuple(spec.inbox), output_schema=spec.output_schema))
        self.follow_up = spec.follow_up  # a later task: no session start, as in process
        self.to_parent = to_parent  # its parent is the driver's session: messages go there
        if share is not None:  # counted against its tree's limits too (`remote`)
            self.meter = Meter(self.meter.limits, share, self.stop_for_budget, self.tree.alarms)
        self.meter.started -= spec.elapsed  # its clock counts from its spawn in the driver
        self.count_spent(spec.spent)  # what its earlier tasks' meter counted

    @classmethod
    def remote(cls, spec: ChildSpec, parent: Session, tools: tuple[Tool, ...],
               spent: Stop, to_parent: Callable[[str], Awaitable[str]]) -> ShardChild:
        """The child a driver sent (`spec`), with what its earlier tasks ran up. Under a tree
        budget it counts what it spends against the tree's limits too, from what the tree had
        spent at its spawn: a limit reached is named as in process (the highest) and `spent`
        tells the driver, which ends the whole tree."""
        share = None
        if spec.tree_budget is not None:
            share = Meter(spec.tree_budget, None, spent, alarms=parent.tree.alarms)
            share.turns, share.tokens = spec.tree_spent
        return cls(evolve(spec.config, tools=tools), parent=parent, spec=spec, share=share,
                   to_parent=to_parent)

    def claim(self) -> bool:
        return super().claim() and not self.follow_up

    def run_task(self, prompt: str) -> Coroutine[Any, Any, str | None]:
        """Its task, claimed at its first line (it never settles here: `Shard._report`)."""
        return turns.run(self, prompt, None)

    async def tell_parent(self, message: str) -> str:
        return await self.to_parent(heard(self.session_id, message))

    def take(self, message: str) -> bool:
        """A message from the driver (send_message): read before its next model call."""
        if self.stop is not None or not self.taking_messages or self.ended:
            return False
        self.inbox.append(message)
        return True
