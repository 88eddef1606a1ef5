"""Runtime: what every session of an engine needs, and the ownership of their tasks.

Sessions receive the runtime, never the engine: the model client and its names, the
profiles, the rollout writer with the periodic flusher, the dispatcher, and the tasks
(spawned here, drained at close). The engine owns one runtime plus its registry.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import define, field

from subsessions._core.dispatch import Dispatcher
from subsessions._util import collector
from subsessions.errors import EngineClosed, StillRunning
from subsessions.models.base import ModelClient
from subsessions.profiles import LoadedProfile
from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter

if TYPE_CHECKING:  # the [otel] extra: imported only when an engine traces
    from subsessions.otel.tracing import Tracer

T = TypeVar("T")
_pace_tokens = itertools.count()
# the context its tasks' done callback runs in, shared (asyncio copies the caller's for each
# callback given none: one more object for every task); the callback reads no context var
_BARE = contextvars.Context()
FLUSH_SECONDS = 0.1
DRAIN_SECONDS = 10.0  # how long close waits for tasks before cancelling what is left


class Backend(Protocol):
    """Where a session's task runs. In process (`task.IN_PROCESS`) it runs
    here; the Ray backend runs top-level sessions' children on shard actors."""

    def run_task(self, host: Any, prompt: str, first: bool) -> Awaitable[str | None]: ...

    # a child's task as its asyncio task's one coroutine, settling in its parent at its end
    def run_child(self, child: Any, prompt: str) -> Coroutine[Any, Any, str | None]: ...

    async def aclose(self) -> None: ...  # after every task has ended: its workers go


class Phase(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # new work is refused; the clean-up of endings may still start
    CLOSED = "closed"


@define(eq=False)
class Runtime:
    home: Path
    cwd: str
    model_client: ModelClient
    model: str
    model_provider: str
    profiles: Mapping[str, LoadedProfile]
    dispatcher: Dispatcher[Any]
    backend: Backend  # where tasks run: `task.IN_PROCESS`, or another process (Ray)
    # whether a top-level session id is still registered (the engine's registry answers)
    registered: Callable[[str], bool] = lambda _: True
    pace_collector: bool = True  # see collector.py
    tracer: Tracer | None = None  # OpenTelemetry spans (subsessions/otel); None: none made
    writer: RolloutWriter = field(factory=RolloutWriter)
    # Recorders with lines not yet handed to the writer; flushed every FLUSH_SECONDS, so
    # a running session's transcript trails it by at most that (`rollouts tail`).
    unwritten: set[RolloutRecorder] = field(factory=set)
    _flusher: asyncio.Task[None] | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[Any]] = field(factory=set, init=False)
    # its tasks' done callback: one bound method for all (not one made for every task)
    _on_end: Callable[[asyncio.Task[Any]], None] = field(init=False)
    _top_tasks: dict[asyncio.Task[Any], str] = field(factory=dict, init=False)
    _phase: Phase = field(default=Phase.OPEN, init=False)
    # its name in the collector's ledger (not id(): an engine dropped unclosed may share one)
    _pace_token: int = field(factory=lambda: next(_pace_tokens), init=False)

    def __attrs_post_init__(self) -> None:
        self._on_end = self._ended

    @property
    def closed(self) -> bool:
        """Closing has started (or finished): no new work is accepted."""
        return self._phase is not Phase.OPEN

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    def check_open(self) -> None:
        if self.closed:
            raise EngineClosed()

    def start_closing(self) -> None:
        if self._phase is Phase.OPEN:
            self._phase = Phase.CLOSING

    def owns(self, task: asyncio.Task[Any] | None) -> bool:
        return task in self._tasks

    # -- tasks ------------------------------------------------------------------------------
    def provider_of(self, model: str) -> str:
        """The provider a session on `model` talks to: the engine's, or the one a
        `PROVIDER:MODEL` id names when the client routes by it (`models.routes`)."""
        routes = getattr(self.model_client, "provider_of", None)
        return str(routes(model)) if callable(routes) else self.model_provider

    def spawn_task(
        self, coro: Coroutine[Any, Any, T], name: str, *, while_closing: bool = False
    ) -> asyncio.Task[T]:
        """Start a task the runtime owns; refused once closing started, except for the
        clean-up work of endings (hooks), which close then drains like every task."""
        if self._phase is not Phase.OPEN and not (
            while_closing and self._phase is Phase.CLOSING
        ):
            coro.close()
            raise EngineClosed()
        task = asyncio.get_running_loop().create_task(coro, name=name)
        tasks = self._tasks
        tasks.add(task)
        task.add_done_callback(self._on_end, context=_BARE)
        if not len(tasks) % collector.STEP:  # fewer tasks are seen by the flusher
            collector.pacer.follow(self._pace_token, len(tasks))
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """Its tasks' done callback: forgotten, and its outcome retrieved (a task's failure is
        in its rollout and with whoever awaits it: asyncio must not call it unretrieved)."""
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    async def run_owned(self, coro: Coroutine[Any, Any, T], session_id: str = "",
                        timeout: float | None = None) -> T:
        """Run `coro` in an owned task; cancelling the caller cancels it, and closing the
        engine (or destroying the session) raises `EngineClosed` in the caller. After
        `timeout` seconds the caller stops waiting (`StillRunning`); the task goes on."""
        task = self.spawn_task(coro, "subsessions-task")
        self._top_tasks[task] = session_id
        task.add_done_callback(self._forget_top_task)
        try:
            await asyncio.wait((task,), timeout=timeout)
        except asyncio.CancelledError:  # the caller's own cancellation: the task's too
            task.cancel()
            await asyncio.wait((task,))
            raise
        if not task.done():
            raise StillRunning(session_id, timeout or 0.0)
        if task.cancelled() and (self.closed or not self.registered(session_id)):
            raise EngineClosed()
        return task.result()  # CancelledError when the task was aborted

    def _forget_top_task(self, task: asyncio.Task[Any]) -> None:
        self._top_tasks.pop(task, None)

    def cancel_top_tasks(self, session_id: str | None = None) -> list[asyncio.Task[Any]]:
        """Cancel the running `send_and_wait` tasks (of one session, or all); each aborts
        its own children first."""
        running = [t for t, owner in self._top_tasks.items()
                   if session_id is None or owner == session_id]
        for task in running:
            task.cancel()
        return running

    async def drain(self) -> None:
        """Wait for every owned task; what has not ended after a grace period is cancelled."""
        grace = True
        while self._tasks:
            _, pending = await asyncio.wait(
                list(self._tasks), timeout=DRAIN_SECONDS if grace else None
            )
            if pending and grace:
                for task in pending:
                    task.cancel()
                grace = False

    # -- rollout flushing -------------------------------------------------------------------
    def start_flusher(self) -> None:
        if self._flusher is None:
            if self.pace_collector:
                collector.pacer.hold(self._pace_token)
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_periodically(), name="subsessions-rollout-flusher"
            )

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            self.flush_unwritten()
            collector.pacer.follow(self._pace_token, len(self._tasks))

    def flush_unwritten(self) -> None:
        dirty = list(self.unwritten)
        self.unwritten.clear()
        for recorder in dirty:
            recorder.flush()

    async def stop_flusher(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.wait((self._flusher,))
        self.flush_unwritten()

    async def aclose(self) -> None:
        """The last step of closing: the writer thread ends once everything is written."""
        self._phase = Phase.CLOSED
        collector.pacer.release(self._pace_token)
        await self.writer.aclose()
