"""Grouped dispatch: children on their way to one shard travel together.

One actor call per child cost the driver most of its time per remote child. Each shard has
one `Launcher` instead: children placed there join its queue, and while one group is on its
way the next one gathers, so a burst of spawns (a batch's items, a fan-out in one turn)
reaches the shard in a few calls of many `ChildSpec`s. The shard starts each child and
reports each ending over its channel (`Ended`), in order after what the child sent before.
A stop or a message for a child waits until its group has reached the shard, so it never
overtakes the child there. A shard lost while children wait to be sent there ends those with
`Unsent` (they can go to another shard); only children sent there end as lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from attrs import define, field

from subsessions.errors import RemoteError, WorkerLost
from subsessions.ray.wire import ChildSpec, Ended, Outcome

GROUP = 256  # children in one actor call at most (the call's size stays modest)
Ending = Outcome | Exception  # what a child's task ends with: its outcome, or why it has none


class Unsent(Exception):
    """The shard was lost before the child was sent there: it never ran, and may go to
    another shard."""


@define(eq=False)
class Launch:
    """One child's task sent to a shard: whether it reached it, and then how it ended."""

    spec: ChildSpec
    reached: asyncio.Future[bool]  # True once the shard has it; False if it never will
    ending: asyncio.Future[Ending]

    @classmethod
    def of(cls, spec: ChildSpec) -> Launch:
        loop = asyncio.get_running_loop()
        return cls(spec, loop.create_future(), loop.create_future())

    def end(self, ending: Ending) -> None:
        if not self.reached.done():
            self.reached.set_result(not isinstance(ending, Exception))
        if not self.ending.done():
            self.ending.set_result(ending)


@define(eq=False)
class Launcher:
    """The children on their way to one shard, and those running there, by id."""

    actor: Any
    lose: Callable[[BaseException], str]  # marks the shard lost; the reason its children get
    calls: int = 0  # groups sent (tests and benchmarks look)
    lost_reason: str | None = None
    _queue: list[Launch] = field(factory=list)
    _running: dict[str, Launch] = field(factory=dict)  # sent, their endings not yet back
    _wake: asyncio.Event = field(factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self, name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(self._send_groups(), name=name)

    def add(self, launch: Launch) -> None:
        if self.lost_reason is not None:  # placed there just before it was lost
            launch.end(Unsent(self.lost_reason))
            return
        self._queue.append(launch)
        self._wake.set()

    def ended(self, message: Ended) -> None:
        """A child's ending came over the channel (everything it sent before is seen)."""
        launch = self._running.pop(message.session_id, None)
        if launch is not None:
            outcome = message.outcome
            launch.end(outcome if outcome is not None
                       else RemoteError(message.error or "it could not start on its shard"))

    def fail_all(self, reason: str) -> None:
        """The shard is lost: each child sent there ends as lost, once; each still waiting to
        be sent ends `Unsent` (it never ran there)."""
        if self.lost_reason is None:
            self.lost_reason = reason
        reason = self.lost_reason
        queued, sent = list(self._queue), list(self._running.values())
        self._queue.clear()
        self._running.clear()
        for launch in sent:
            launch.end(WorkerLost(reason))
        for launch in queued:
            launch.end(Unsent(reason))

    async def aclose(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.wait((task,))

    async def _send_groups(self) -> None:
        """One group in flight at a time: the next gathers while it travels."""
        queue = self._queue
        while True:
            await self._wake.wait()
            group = queue[:GROUP]
            del queue[:GROUP]
            if not queue:
                self._wake.clear()
            if group:
                await self._send(group)

    async def _send(self, group: list[Launch]) -> None:
        ray = import_ray()
        try:
            ref = self.actor.run_children.remote([launch.spec for launch in group])
        except Exception as exc:  # what cannot be sent: each on its own, so only it fails
            if len(group) == 1:
                group[0].end(exc)
                return
            for launch in group:
                await self._send([launch])
            return
        self.calls += 1
        running = self._running
        for launch in group:
            running[launch.spec.session_id] = launch
        try:
            await ref
        except lost_errors(ray) as exc:
            self.fail_all(self.lose(exc))
            return
        except Exception as exc:  # the call failed (not a loss): its children end so, never hang
            error = (RemoteError(str(exc.cause or exc))
                     if isinstance(exc, ray.exceptions.RayTaskError) else exc)
            for launch in group:
                running.pop(launch.spec.session_id, None)
                launch.end(error)
            return
        for launch in group:
            if not launch.reached.done():
                launch.reached.set_result(True)


def import_ray() -> Any:
    import ray

    return ray


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """What a call to an actor raises when the actor or its node is gone."""
    exceptions = ray.exceptions
    return (exceptions.RayActorError, exceptions.WorkerCrashedError,
            exceptions.NodeDiedError, exceptions.ObjectLostError)
