"""A shard: one Ray async actor hosting many children with the in-process engine unchanged.

Each child runs as an ordinary `Session` under a stand-in for its top-level session (same
id, limits and agents; handlers and hooks replaced by proxies that ask the driver), so the
loop, the allowlists, the hooks' order and the one ending are the in-process code's. Its own
children stay here, in process. This module never imports Ray: the backend makes it an actor.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from attrs import define, evolve, field

from subsessions.config import Hooks, Invocation, SessionConfig, Tool
from subsessions.dispatch import Dispatcher
from subsessions.errors import (
    ChildLimitReached,
    DepthLimitReached,
    RemoteError,
    RolloutError,
    error_text,
)
from subsessions.events import SessionEvent
from subsessions.models.base import ModelRequest, ModelResponse
from subsessions.models.factory import build_model_client
from subsessions.profiles import LoadedProfile
from subsessions.ray.wire import (
    Cancel,
    ChildSpec,
    Event,
    Outcome,
    Request,
    Room,
    RootSpec,
    ToolSpec,
)
from subsessions.runtime import Runtime
from subsessions.session import Session
from subsessions.settings import Settings
from subsessions.tools import builtin_tools
from subsessions.tree import SessionTree

Message = Request | Event | Cancel | Room
LIFECYCLE = ("subagent.started", "subagent.completed", "subagent.failed")  # the driver's own


@define(eq=False)
class Channel:
    """Requests to the driver and their answers; the driver pulls the outbox."""

    outbox: asyncio.Queue[Message] = field(factory=asyncio.Queue)
    _waiting: dict[int, asyncio.Future[tuple[bool, Any]]] = field(factory=dict)
    _ids: itertools.count[int] = field(factory=lambda: itertools.count(1))
    sent: int = 0  # messages put in the outbox
    _handled: int = 0  # of them, how many the driver has handled (it says so when it pulls)
    _caught_up: asyncio.Event = field(factory=asyncio.Event)

    def send(self, message: Message) -> None:
        self.sent += 1
        self.outbox.put_nowait(message)

    def handled(self, count: int) -> None:
        self._handled = max(self._handled, count)
        self._caught_up.set()

    async def delivered(self, count: int) -> None:
        """Until the driver has handled the first `count` messages: what a child sent
        before its ending (a cancel of a handler, an event) is seen before the ending."""
        while self._handled < count:
            self._caught_up.clear()
            await self._caught_up.wait()

    async def ask(self, root_id: str, kind: str, name: str, *args: Any,
                  child_id: str = "") -> Any:
        """Run a handler in the driver; its failure is raised here with the same text, and
        a cancelled caller cancels the handler there too."""
        request_id = next(self._ids)
        future = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        self.send(Request(request_id, root_id, child_id, kind, name, args))
        try:
            ok, value = await future
        except asyncio.CancelledError:
            self.send(Cancel(request_id))
            raise
        finally:
            self._waiting.pop(request_id, None)
        if not ok:
            raise RemoteError(str(value))
        return value

    def answer(self, request_id: int, ok: bool, value: Any) -> None:
        future = self._waiting.get(request_id)
        if future is not None and not future.done():
            future.set_result((ok, value))


@define(eq=False)
class ShardTree(SessionTree):
    """A tree's share on this shard: its limits count the children running elsewhere (as of
    the last spawn from the driver) and report the ones started here to the driver."""

    channel: Channel = field(kw_only=True)
    root_id: str = field(kw_only=True)
    elsewhere: int = field(default=0, kw_only=True)

    def check_room(self, parent_depth: int) -> None:
        if parent_depth >= self.max_depth:
            raise DepthLimitReached(self.max_depth)
        if self.elsewhere + self.running >= self.max_children:
            raise ChildLimitReached(self.max_children)

    def child_started(self) -> None:
        super().child_started()
        self.channel.send(Room(self.root_id, 1))

    def child_ended(self) -> None:
        super().child_ended()
        self.channel.send(Room(self.root_id, -1))


@define(eq=False)
class DriverModel:
    """The driver's model client, asked over the channel (a model that cannot travel)."""

    channel: Channel
    provider: str

    async def respond(self, request: ModelRequest) -> ModelResponse:
        response: ModelResponse = await self.channel.ask("", "model", "", request)
        return response


@define(eq=False)
class RemoteTool:
    """A host tool's handler: the driver runs the real one (or its host answers it)."""

    channel: Channel
    root_id: str
    child_id: str
    kind: str

    async def __call__(self, arguments: dict[str, Any], invocation: Invocation) -> Any:
        if self.kind == "deferred":
            return await self.channel.ask(self.root_id, "deferred", invocation.tool_name,
                                          arguments, invocation.session_id,
                                          invocation.tool_call_id, child_id=self.child_id)
        return await self.channel.ask(self.root_id, "tool", invocation.tool_name, arguments,
                                      (invocation.session_id, invocation.tool_call_id,
                                       invocation.tool_name, invocation.agent_name),
                                      child_id=self.child_id)


class Shard:
    """The actor's body: built in the worker from plain values, children run by `run_child`."""

    def __init__(self, home: str, cwd: str, model: str, model_provider: str,
                 profiles: Mapping[str, LoadedProfile], model_source: tuple[str, Any]) -> None:
        self._channel = Channel()
        kind, value = model_source
        if kind == "settings":
            assert isinstance(value, Settings)
            client: Any = build_model_client(value)
        elif kind == "client":
            client = value
        else:
            client = DriverModel(self._channel, model_provider)
        self._runtime = Runtime(home=Path(home), cwd=cwd, model_client=client, model=model,
                                model_provider=model_provider, profiles=profiles,
                                dispatcher=Dispatcher())
        self._roots: dict[str, tuple[Session, int]] = {}  # stand-ins, with their children

    async def ready(self) -> tuple[str, int]:
        """Where this shard runs: (node id, pid)."""
        import ray  # in the worker, where Ray is installed by definition

        return ray.get_runtime_context().get_node_id(), os.getpid()

    async def pull(self, handled: int) -> list[Message]:
        """The next messages for the driver (which has handled `handled` of them so far):
        waits for one, returns all that are queued."""
        self._channel.handled(handled)
        outbox = self._channel.outbox
        batch = [await outbox.get()]
        while not outbox.empty():
            batch.append(outbox.get_nowait())
        return batch

    async def answer(self, request_id: int, ok: bool, value: Any) -> None:
        self._channel.answer(request_id, ok, value)

    async def children(self) -> int:
        return self._runtime.task_count

    async def run_child(self, spec: ChildSpec) -> Outcome:
        """Run one child's task to its ending, written to its rollout; a `ray.cancel` of
        this call is the child's cancel (its own children first, as in process)."""
        runtime = self._runtime
        runtime.start_flusher()
        stand_in = self._stand_in(spec.root, spec.relay_events)
        child = self._child(spec, stand_in)
        if spec.cancel_first:
            child.cancel_at_first_step()
        task = runtime.spawn_task(child.run_task(spec.prompt), f"subsession-{spec.session_id}")
        runtime.dispatcher.child_started(stand_in, child, spec.call_id)  # for the allowlist
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait((task,))  # the task's own `finally` writes its ending
            await self._finish(spec, child)
            raise
        return await self._finish(spec, child, task)

    async def _finish(self, spec: ChildSpec, child: Session,
                      task: asyncio.Task[str | None] | None = None) -> Outcome:
        state, result, error = "cancelled", None, None
        if task is not None and not task.cancelled():
            exc = task.exception()
            state, result, error = ("done", task.result(), None) if exc is None else (
                "failed", None, error_text(exc))
        try:
            await child.recorder.flush_durable()
        except RolloutError as exc:
            if state == "done":  # the result never reached the disk
                state, result, error = "failed", None, str(exc)
        await self._channel.delivered(self._channel.sent)
        child.events.close()
        self._release(spec.root.session_id)
        usage = child.usage()
        return Outcome(state, result, error, usage.input_tokens, usage.output_tokens,
                       usage.turns, usage.tool_calls, child.answered_by)

    async def close(self) -> None:
        """Drain what children left (their end hooks), write every line, stop the writer."""
        runtime = self._runtime
        runtime.start_closing()
        await runtime.drain()
        await runtime.stop_flusher()
        await runtime.aclose()

    # -- the stand-in for a top-level session, and its children ----------------------------
    def _stand_in(self, root: RootSpec, relay: bool) -> Session:
        known = self._roots.get(root.session_id)
        if known is not None:
            self._roots[root.session_id] = (known[0], known[1] + 1)
            assert isinstance(known[0].tree, ShardTree)
            known[0].tree.elsewhere = root.running
            return known[0]
        ask = self._channel.ask
        hooks = Hooks(**{name: partial(ask, root.session_id, "hook", name)
                         for name in root.hooks}) if root.hooks else None
        config = SessionConfig(
            custom_agents=root.custom_agents, hooks=hooks,
            permission_handler=(partial(ask, root.session_id, "permission", "")
                                if root.permission_handler else None),
            user_input_handler=(partial(ask, root.session_id, "user_input", "")
                                if root.user_input_handler else None),
            max_depth=root.max_depth, max_children=root.max_children,
            notify_on_child_end=root.notify_on_child_end,
        )
        # It writes nothing (the driver's session has the rollout): it never runs a task.
        stand_in = Session(self._runtime, config, resumed=(root.session_id, os.devnull))
        stand_in.tree = ShardTree(config, self._runtime.profiles, channel=self._channel,
                                  root_id=root.session_id, elsewhere=root.running)
        if relay:
            stand_in.on(partial(self._relay_own, root.session_id))
        self._runtime.dispatcher.register(stand_in)
        self._roots[root.session_id] = (stand_in, 1)
        return stand_in

    def _release(self, root_id: str) -> None:
        stand_in, count = self._roots[root_id]
        if count > 1:
            self._roots[root_id] = (stand_in, count - 1)
            return
        del self._roots[root_id]
        self._runtime.dispatcher.unregister(root_id)
        stand_in.events.close()

    def _child(self, spec: ChildSpec, stand_in: Session) -> Session:
        tools = tuple(self._tool(spec, t) for t in spec.tools)
        child = Session(self._runtime, evolve(spec.config, tools=tools), parent=stand_in,
                        profile=spec.profile, call_id=spec.call_id, source=spec.source,
                        resumed=(spec.session_id, spec.rollout_path),
                        tool_context=spec.tool_context)
        child.started_at = spec.started_at
        if spec.relay_events:
            child.on(partial(self._relay, spec.root.session_id, spec.session_id))
        return child

    def _tool(self, spec: ChildSpec, tool: ToolSpec) -> Tool:
        if tool.kind == "builtin" and spec.tool_context is not None:
            return builtin_tools(spec.tool_context, [tool.name])[0]
        return Tool(tool.name, tool.description, tool.parameters,
                    RemoteTool(self._channel, spec.root.session_id, spec.session_id, tool.kind),
                    tool.requires_permission)

    def _relay(self, root_id: str, child_id: str, event: SessionEvent) -> None:
        self._channel.send(Event(root_id, child_id, event.session_id, event.type, event.data))

    def _relay_own(self, root_id: str, event: SessionEvent) -> None:
        """The stand-in's own events (permission requests): the others come from children."""
        if event.session_id == root_id and event.type not in LIFECYCLE:
            self._relay(root_id, "", event)
