"""RayBackend: top-level sessions' children run on shard actors.

The parent keeps an ordinary `Child` as the proxy of each remote child: its life (status),
its rollout's head (written here, so the parent's line naming it never comes first), its
events hub and its usage. Only its task runs elsewhere: `run_task` sends the child to the
least-loaded live shard, in one group with the others placed there meanwhile (`groups.py`),
and waits for its ending; cancelling it sends a stop there. Requests the shard sends back
(the root's handlers, hooks, deferred tools, the model when it cannot travel) run here, in
the driver, by `host.py`. Ray is imported when the backend starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
from collections.abc import Awaitable, Coroutine, Mapping
from functools import partial
from typing import Any

from attrs import define, field

from subsessions._core import turns
from subsessions._core.conversation import Child
from subsessions._core.figures import Figures
from subsessions._core.runtime import Runtime
from subsessions.errors import BudgetExhausted, ConfigError, RemoteError
from subsessions.ray import host
from subsessions.ray.groups import Ending, Launch, Unsent, import_ray
from subsessions.ray.placement import ShardRef, Shards
from subsessions.ray.spec import child_spec
from subsessions.ray.wire import ChildSpec, Outcome
from subsessions.settings import Settings

log = logging.getLogger("subsessions")
INSTALL = "the Ray backend needs Ray: pip install 'subsessions[ray]'"
LOOPBACK = "127.0.0.1"
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray treats this as one machine
CLOSE_SECONDS = 10.0  # how long close waits for a shard to write its last lines


def require_ray(source: str = "RayBackend") -> None:
    """One clear line when the extra is missing; Ray itself is not imported."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(source, "ray", INSTALL)


def _address(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()
                              or "\0" in value):
        raise ConfigError("RayBackend", "address",
                          "must be None (a local Ray), 'auto', 'ray://HOST:PORT' or HOST:PORT")
    return value


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("RayBackend", name, f"must be an integer of at least 1, not "
                          f"{value!r:.40}")
    return value


def _shards(value: Any) -> int | None:
    return None if value is None else _count("shards", value)


def _per_shard(value: Any) -> int:
    return _count("per_shard", value)


@define(eq=False)
class RayBackend:
    """`Engine(..., backend=RayBackend(address=None | "auto" | "ray://...", shards=None,
    per_shard=1000))`. `address=None` starts a local Ray on loopback; `shards=None` starts
    one shard per node and another whenever every shard holds `per_shard` children.

    The model reaches shards as configuration: `model_settings` (a provider from
    config.toml: each shard builds its own client, the key read from its own environment),
    else the engine's client itself when it pickles (`ScriptedModel` with a picklable
    script), or with `model_on_driver=True` every model call is made by the driver's client.
    """

    address: str | None = field(default=None, converter=_address)
    shards: int | None = field(default=None, converter=_shards)
    per_shard: int = field(default=1000, converter=_per_shard)
    model_settings: Settings | None = None
    model_on_driver: bool = False
    actor_options: Mapping[str, Any] = field(factory=lambda: {"num_cpus": 1})
    _pool: Shards | None = field(default=None, init=False)
    _starting: asyncio.Task[Shards] | None = field(default=None, init=False)
    _owns_ray: bool = field(default=False, init=False)
    _hosts: dict[str, Child] = field(factory=dict, init=False)  # remote children by id
    _shard_of: dict[str, int] = field(factory=dict, init=False)  # their last shard, by id

    def __attrs_post_init__(self) -> None:
        require_ray()

    def __repr__(self) -> str:
        pool = self._pool
        shards = "not started" if pool is None else repr(pool)
        return f"<RayBackend address={self.address!r} {shards}>"

    @property
    def pool(self) -> Shards | None:
        """The shards, once started (tests and benchmarks look at placement)."""
        return self._pool

    # -- the seam: where a task runs --------------------------------------------------------
    def run_task(self, host_session: Any, prompt: str, first: bool) -> Awaitable[str | None]:
        """Children of top-level sessions run on a shard, their follow-ups too (on the same
        shard while it lives); every other task runs here."""
        if not isinstance(host_session, Child) or host_session.depth != 1:
            return turns.run(host_session, prompt, first)
        return self._run_remote(host_session, prompt, first)

    def run_child(self, child: Child, prompt: str) -> Coroutine[Any, Any, str | None]:
        """A top-level session's child: its remote task (which `Child.child_task` claims),
        settled as `turns.run` settles one run here; a deeper one's task loop runs here."""
        if child.depth != 1:
            return turns.run(child, prompt, None, child)
        return turns.settled(child, child.child_task(prompt))

    async def _run_remote(self, child: Child, prompt: str, first: bool) -> Any:
        if child.stop is not None:  # stopped before it began
            return await turns.run(child, prompt, first)  # it ends here, as in process
        child.task_begins()  # from here a cancel reaches this task, and through it the shard
        child.meter.disarm()  # its clock rings on the shard, which counts what it spends
        try:
            try:
                pool = await self._started(child.runtime)
                # Its session_meta (written here) is in the file before the shard appends.
                await child.recorder.flush_durable()
                shard = await pool.place(self._shard_of.get(child.session_id))
            except asyncio.CancelledError:  # no shard has it yet: it ends here, as in process
                child.request_stop(deliver=False)
                await turns.run(child, prompt, first)
                raise
            assert child.parent is not None
            spec = child_spec(child, prompt, first)
            child.inbox.clear()  # they travel in the spec
            child.history = []  # a follow-up's shard reads it from the rollout
            outcome = await self._sent(pool, shard, spec, child, prompt, first)
        finally:
            child.mailbox = None
            child.taking_messages = False
            # children spawned here under it (the API) end with its task, as in process
            family = child.spawned
            if family is not None and family.has_children:
                await family.abort_all_children(child.budget_stop)
            child.task_ended()
        child.apply(Figures(outcome.token_usage, outcome.turns, outcome.tool_calls,
                           outcome.answered_by, outcome.spent))
        if outcome.budget_stop is not None:
            stop = BudgetExhausted(*outcome.budget_stop)
            child.claim_budget_stop(stop)
            raise stop
        if outcome.state == "failed":
            raise RemoteError(outcome.error or "failed")
        if outcome.state == "cancelled":
            raise asyncio.CancelledError
        return outcome.result

    async def _sent(self, pool: Shards, shard: ShardRef, spec: ChildSpec, child: Child,
                    prompt: str, first: bool) -> Outcome:
        """Its outcome on `shard`, or on another live one when `shard` is lost before the
        child was sent there (it never ran: nothing of it is lost)."""
        while True:
            try:
                return await self._run_on(shard, spec, child)
            except Unsent:
                current = asyncio.current_task()
                if child.stop is not None or (current is not None and current.cancelling()):
                    child.request_stop(deliver=False)  # stopped on its way: it ends here,
                    await turns.run(child, prompt, first)  # as in process (this raises)
                    raise
                shard = await pool.place()

    async def _run_on(self, shard: ShardRef, spec: ChildSpec, child: Child) -> Outcome:
        """Send the child with the shard's next group and wait for its outcome. A cancel of
        this task (or a budget stop) is sent to the shard once the child is there; the first
        stop wins there, and the outcome says how the child ended: one that ended by itself
        first keeps that ending; a second cancel (close) stops waiting."""
        session_id = spec.session_id
        self._hosts[session_id] = child
        self._shard_of[session_id] = shard.index  # where a follow-up goes
        shard.load += 1
        launch = Launch.of(spec)
        try:
            shard.launcher.add(launch)
            child.mailbox = partial(_send, shard, launch)
            try:
                ending = await asyncio.shield(launch.ending)
            except asyncio.CancelledError:
                ending = await self._stopped(shard, launch, child)
        finally:
            shard.load -= 1
            self._hosts.pop(session_id, None)
        if isinstance(ending, Exception):
            raise ending
        return ending

    @staticmethod
    async def _stopped(shard: ShardRef, launch: Launch, child: Child) -> Ending:
        """The child's task was cancelled here: the stop follows it to its shard (never
        before it), and its ending says whether the cancel won."""
        budget = child.budget_stop
        stop = partial(shard.actor.stop.remote, launch.spec.session_id,
                       None if budget is None else (budget.kind, budget.limit))
        launch.reached.add_done_callback(lambda reached: reached.result() and stop())
        ending = await asyncio.shield(launch.ending)  # a second cancel (close) stops here
        if isinstance(ending, Outcome) and ending.state == "cancelled":
            raise asyncio.CancelledError
        if isinstance(ending, Outcome):
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # it ended (or the budget ended it) before the cancel
        return ending

    # -- starting and closing ---------------------------------------------------------------
    async def _started(self, runtime: Runtime) -> Shards:
        if self._starting is not None and self._starting.done():
            return self._starting.result()
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(
                self._start(runtime), name="subsessions-ray-start")
        return await asyncio.shield(self._starting)

    async def _start(self, runtime: Runtime) -> Shards:
        if self.address is None:  # a local Ray: never resolve 127.0.0.1 to this machine's
            os.environ.setdefault(LOOPBACK_SWITCH, "0")  # address (read when Ray is imported)
        ray = import_ray()
        if not ray.is_initialized():
            self._owns_ray = True
            await asyncio.to_thread(self._init, ray)
        source = self._model_source(runtime)
        pool = self._pool = Shards(runtime, source, self.shards, self.per_shard,
                                   dict(self.actor_options), host.Answerer(runtime, self._hosts))
        await pool.start()
        return pool

    def _init(self, ray: Any) -> None:
        if self.address is None:  # a local Ray: every process on loopback, no dashboard
            ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        _cluster_errors_to_log(True)

    def _model_source(self, runtime: Runtime) -> tuple[str, Any]:
        if self.model_settings is not None:
            return ("settings", self.model_settings)
        if self.model_on_driver:
            return ("driver", None)
        try:
            import_ray().cloudpickle.dumps(runtime.model_client)
        except Exception as exc:
            raise ConfigError("RayBackend", "model", f"the model client cannot be sent to "
                              f"shards ({type(exc).__name__}); pass model_settings= or "
                              "model_on_driver=True") from None
        return ("client", runtime.model_client)

    async def aclose(self) -> None:
        """After every child has ended: shards write their last lines and go."""
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await self._starting
        pool = self._pool
        if pool is not None:
            await pool.close(CLOSE_SECONDS)
        if self._owns_ray:
            await asyncio.to_thread(import_ray().shutdown)
            _cluster_errors_to_log(False)


def _cluster_errors_to_log(on: bool) -> None:
    """Ray's driver prints the cluster's errors (a worker or node that died) to stdout from
    a thread of its own, whatever `ray.init` is told (`listen_error_messages` calls the
    module's `print_to_stdstream`, Ray 2.60). Stdout is our output: while we own the
    connection they go to our logger instead (a warning: stderr unless logging says else)."""
    from ray._private import worker

    original = getattr(worker, "print_to_stdstream", None)
    if original is None:  # another Ray: nothing to reroute
        return
    if on and not isinstance(original, _ToLog):
        worker.print_to_stdstream = _ToLog(original)
    elif not on and isinstance(original, _ToLog):
        worker.print_to_stdstream = original.original


@define
class _ToLog:
    """Stands in for Ray's `print_to_stdstream` in its error thread: each line is logged."""

    original: Any

    def __call__(self, data: Mapping[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", ()):
            log.warning("ray (%s): %s", data.get("pid", "cluster"), str(line).rstrip())


async def _send(shard: ShardRef, launch: Launch, message: str) -> bool:
    """send_message to a remote child's running task (once its shard has it); False when
    it will not read it."""
    try:
        if not await asyncio.shield(launch.reached):
            return False
        accepted: bool = await shard.actor.send.remote(launch.spec.session_id, message)
    except asyncio.CancelledError:
        raise
    except Exception:  # the shard is gone: the child ends as lost, a follow-up runs here
        return False
    return accepted


def backend_from(settings: Settings) -> RayBackend | None:
    """The backend `[ray]` / `--ray` ask for (None: in process); shards build the model
    client from the same provider settings, reading the key from their own environment."""
    if settings.ray is None:
        return None
    require_ray(settings.source if settings.source != "defaults" else "--ray")
    return RayBackend(address=settings.ray.address, shards=settings.ray.shards,
                      per_shard=settings.ray.per_shard, model_settings=settings)
