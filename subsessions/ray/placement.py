"""The shards: started, placed on (least-loaded live shard first), listened to, lost, closed.

Each live shard has one pump in the driver: a long `pull` that brings back the shard's
messages (host requests, events for the `Answerer`; children's endings for its `Launcher`).
A shard whose actor or node dies is marked lost once, with the reason its children fail
with (every child sent there or on its way); new children go to live ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from attrs import define, field

from subsessions._core.runtime import Runtime
from subsessions.errors import WorkerLost
from subsessions.ray.groups import Launcher, import_ray
from subsessions.ray.host import Answerer
from subsessions.ray.replies import Replies
from subsessions.ray.shard import Shard
from subsessions.ray.wire import Ended

log = logging.getLogger("subsessions")
MAX_CONCURRENCY = 100_000  # children and requests in flight on one shard
START_GRACE = 30.0  # seconds the other shards get to start once one has (a loaded machine)


@define(eq=False)
class ShardRef:
    index: int
    actor: Any
    launcher: Launcher  # children on their way there, and running there
    replies: Replies  # answers to its requests not yet sent
    node_id: str = ""
    pid: int = 0
    load: int = 0  # children running there
    ready: bool = False  # its actor has started (a pending one may wait for room)
    lost_reason: str | None = None
    pump: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "live" if self.alive else f"lost ({self.lost_reason})"
        return f"<Shard {self.index} node={self.node_id[:8]} load={self.load} {state}>"

    @property
    def alive(self) -> bool:
        return self.lost_reason is None

    def lost(self, exc: BaseException | None = None) -> str:
        """Mark the shard lost (once); the reason its children fail with."""
        if self.lost_reason is None:
            what = "" if exc is None else f": {_first_line(exc)}"
            self.lost_reason = f"shard {self.index} on node {self.node_id[:12]}{what}"
            log.warning("subsessions: %s", self.lost_reason)
        return self.lost_reason


def _preference(shard: ShardRef) -> tuple[bool, int, int]:
    """A started shard first, then the least loaded, then the oldest."""
    return (not shard.ready, shard.load, shard.index)


def _nodes_that_fit(nodes: list[dict[str, Any]], options: dict[str, Any]) -> list[str]:
    """The live nodes whose resources can hold one shard asked for with `options`."""
    wanted = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus", 0),
              **options.get("resources", {})}
    return [node["NodeID"] for node in nodes if node.get("Alive") and all(
        node.get("Resources", {}).get(name, 0) >= amount
        for name, amount in wanted.items() if amount)]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


@define(eq=False)
class Shards:
    runtime: Runtime
    model_source: tuple[str, Any]
    count: int | None
    per_shard: int
    options: dict[str, Any]
    answerer: Answerer
    shards: list[ShardRef] = field(factory=list)
    _adding: asyncio.Lock = field(factory=asyncio.Lock)
    _pending: set[asyncio.Task[ShardRef]] = field(factory=set)  # shards still starting

    def __repr__(self) -> str:
        return f"<Shards {self.shards}>"

    @property
    def live(self) -> list[ShardRef]:
        return [s for s in self.shards if s.alive]

    async def start(self) -> None:
        """Start the shards (by default one per live node that can hold one) and wait until
        each has started, or failed, or is still waiting `START_GRACE` seconds after the
        first started: a node Ray still lists a while after it died, or a cluster too full
        for every shard, must not hold the engine back for ever. Those join when they start."""
        ray = import_ray()
        count = self.count or max(1, len(_nodes_that_fit(ray.nodes(), self.options)))
        loop = asyncio.get_running_loop()
        self._pending = {loop.create_task(self._add(), name=f"subsessions-ray-shard-{n}")
                         for n in range(count)}
        waiting = set(self._pending)
        while waiting and not any(s.ready for s in self.shards):
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for added in done:
                added.result()  # a shard that could not even be asked for: the start fails
        if waiting:
            await asyncio.wait(waiting, timeout=START_GRACE)

    async def _add(self) -> ShardRef:
        ray = import_ray()
        runtime = self.runtime
        actor_class = ray.remote(Shard)
        options = {"max_concurrency": MAX_CONCURRENCY, "scheduling_strategy": "SPREAD",
                   "max_restarts": 0, **self.options}
        actor: Any = actor_class.options(**options).remote(
            str(runtime.home), runtime.cwd, runtime.model, runtime.model_provider,
            dict(runtime.profiles), self.model_source)
        index = len(self.shards)
        launcher = Launcher(actor, lambda exc: self.lose(shard, exc))
        shard = ShardRef(index, actor, launcher, Replies(actor))
        self.shards.append(shard)
        launcher.start(f"subsessions-ray-groups-{index}")  # children may be placed there now
        try:
            shard.node_id, shard.pid = await actor.ready.remote()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # it could not start (its node died meanwhile)
            self.lose(shard, exc)
            return shard
        shard.ready = True
        shard.pump = asyncio.get_running_loop().create_task(
            self._pump(shard), name=f"subsessions-ray-pump-{shard.index}")
        return shard

    async def place(self, before: int | None = None) -> ShardRef:
        """Shard `before` (where a child ran its last task) while it lives, else the
        least-loaded live shard (a new one when each holds `per_shard` and the number of
        shards was left to us)."""
        if before is not None and self.shards[before].alive:
            return self.shards[before]
        best = min(self.live, key=_preference, default=None)
        if self.count is None and (best is None or best.load >= self.per_shard):
            async with self._adding:
                best = min(self.live, key=_preference, default=None)
                if best is None or best.load >= self.per_shard:
                    best = await self._add()
        if best is None:
            raise WorkerLost("no live shard is left")
        return best

    def lose(self, shard: ShardRef, exc: BaseException) -> str:
        """The shard is gone: marked lost once, each of its children ends as lost."""
        reason = shard.lost(exc)
        shard.launcher.fail_all(reason)
        return reason

    async def _pump(self, shard: ShardRef) -> None:
        """Bring the shard's messages to the answerer until the shard goes."""
        receive, ended = self.answerer.receive, shard.launcher.ended
        try:
            while True:
                for message in await shard.actor.pull.remote():
                    if type(message) is Ended:
                        ended(message)
                    else:
                        receive(shard, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the actor or its node died (or was killed at close)
            self.lose(shard, exc)
        finally:
            self.answerer.forget(shard)

    async def close(self, seconds: float) -> None:
        """Let each live shard write its last lines, then stop the pumps and the actors."""
        ray = import_ray()

        try:
            for adding in self._pending:
                adding.cancel()
            if self._pending:
                await asyncio.wait(self._pending)
            for adding in self._pending:
                if not adding.cancelled():
                    adding.exception()  # retrieved: its shard is in `shards`, killed below
            await self._close_shards(seconds)
        finally:
            pumps = [s.pump for s in self.shards if s.pump is not None]
            for pump in pumps:
                pump.cancel()
            if pumps:
                await asyncio.wait(pumps)
            for shard in self.shards:
                await shard.launcher.aclose()
            await self.answerer.aclose()
            for shard in self.shards:
                with contextlib.suppress(Exception):
                    ray.kill(shard.actor, no_restart=True)

    async def _close_shards(self, seconds: float) -> None:
        closing = [asyncio.ensure_future(s.actor.close.remote()) for s in self.live if s.ready]
        if not closing:
            return
        _, late = await asyncio.wait(closing, timeout=seconds)
        for future in late:
            future.cancel()
        if late:
            await asyncio.wait(late)
        for future in closing:
            if not future.cancelled():
                future.exception()  # retrieved: a shard that died meanwhile is fine

