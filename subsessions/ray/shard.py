"""A shard: one Ray async actor hosting many children with the in-process engine unchanged.

Each child runs as an ordinary `Child` (`ShardChild`) under a stand-in for its top-level
session (same id, limits and agents; handlers and hooks replaced by proxies that ask the
driver), so the loop, the allowlists, the hooks' order and the one ending are the in-process
code's. Its own children stay here, in process. This module never imports Ray: the backend
makes it an actor.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from attrs import define

from subsessions._core import turns
from subsessions._core.dispatch import Dispatcher
from subsessions._core.runtime import Runtime
from subsessions._core.session import Session
from subsessions.budget import Budget
from subsessions.children import Cancelled, Done, Failed, ending_of
from subsessions.config import Hooks, Invocation, SessionConfig, Tool
from subsessions.errors import BudgetExhausted, RolloutError, error_text
from subsessions.events import SessionEvent
from subsessions.models.base import ModelRequest, ModelResponse
from subsessions.models.factory import build_model_client
from subsessions.otel import shard_trace
from subsessions.profiles import LoadedProfile
from subsessions.ray.channel import Channel, Message
from subsessions.ray.ledger import DriverLedger
from subsessions.ray.shard_child import ShardChild
from subsessions.ray.wire import ChildSpec, Ended, Event, Outcome, RootSpec, Spent, ToolSpec
from subsessions.settings import Settings
from subsessions.tools import builtin_tools

LIFECYCLE = ("subagent.started", "subagent.completed", "subagent.failed")  # the driver's own
STATE_WORDS = {Done: "done", Failed: "failed", Cancelled: "cancelled"}  # Outcome.state
METERED = ("subagent.usage", "assistant.message")  # always sent: the driver's listing, budget


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
    """The actor's body: built in the worker from plain values, children started in groups
    by `run_children`."""

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
                                dispatcher=Dispatcher(), backend=turns.IN_PROCESS)
        self._roots: dict[str, tuple[Session, int]] = {}  # stand-ins, with their children
        self._running: dict[str, ShardChild] = {}  # children sent here, by id
        self._groups = self._received = 0  # calls of `run_children`, and children in them

    async def ready(self) -> tuple[str, int]:
        """Where this shard runs: (node id, pid)."""
        import ray  # in the worker, where Ray is installed by definition

        return ray.get_runtime_context().get_node_id(), os.getpid()

    async def pull(self) -> list[Message]:
        """The next messages for the driver: waits for one, returns all that are queued."""
        outbox = self._channel.outbox
        batch = [await outbox.get()]
        while not outbox.empty():
            batch.append(outbox.get_nowait())
        return batch

    async def answer(self, request_id: int, ok: bool, value: Any) -> None:
        self._channel.answer(request_id, ok, value)

    async def answers(self, answers: list[tuple[int, bool, Any]]) -> None:
        """The driver's answers given in one turn of its loop."""
        for request_id, ok, value in answers:
            self._channel.answer(request_id, ok, value)

    async def children(self) -> int:
        return self._runtime.task_count

    async def groups(self) -> tuple[int, int]:
        """(groups, children) received so far: a burst of spawns arrives in few calls."""
        return self._groups, self._received

    async def run_children(self, specs: list[ChildSpec]) -> None:
        """Start each child of a group; it returns once every one is known here (a `stop`
        or `send` the driver sends after it finds them). Each ending, once in its rollout,
        goes back over the channel as `Ended`, after all the child sent before it."""
        self._groups += 1
        self._received += len(specs)
        self._runtime.start_flusher()
        for spec in specs:
            try:
                self._start(spec)
            except Exception as exc:  # it could not start here: the driver says why
                self._channel.send(Ended(spec.session_id, None, error_text(exc)))

    def _start(self, spec: ChildSpec) -> None:
        runtime = self._runtime
        stand_in = self._stand_in(spec.root, spec.relay_events, spec.tree_budget)
        try:
            child = self._child(spec, stand_in)
            if spec.cancel_first:
                child.request_stop()
            elif spec.budget_first is not None:
                child.request_stop(BudgetExhausted(*spec.budget_first))
            with shard_trace(runtime, self._channel.send, spec.trace):  # its task copies it
                task = runtime.spawn_task(child.run_task(spec.prompt),
                                          f"subsession-{spec.session_id}")
        except BaseException:
            self._release(spec.root.session_id)
            raise
        self._running[spec.session_id] = child
        runtime.dispatcher.child_started(stand_in, child, spec.call_id)  # for the allowlist
        runtime.spawn_task(self._report(spec, child, task), f"subsession-ended-{spec.session_id}")

    async def _report(self, spec: ChildSpec, child: ShardChild,
                      task: asyncio.Task[str | None]) -> None:
        """Wait for the child's task and send its ending (a cancel of this, at close, is
        the child's cancel: its own children first, as in process)."""
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            child.request_stop()
            await asyncio.wait((task,))  # the task's own `finally` writes its ending
            await self._finish(spec, child, task)
            raise
        finally:
            self._running.pop(spec.session_id, None)
        await self._finish(spec, child, task)

    async def stop(self, session_id: str, budget: tuple[str, float] | None) -> None:
        """Cancel a running child (with `budget`: a budget stop); nothing if it has ended."""
        child = self._running.get(session_id)
        if child is not None:
            child.request_stop(None if budget is None else BudgetExhausted(*budget))

    async def send(self, session_id: str, message: str) -> bool:
        """A message for a running child; False when it is ending (or gone)."""
        child = self._running.get(session_id)
        return child is not None and child.take(message)

    async def _finish(self, spec: ChildSpec, child: ShardChild,
                      task: asyncio.Task[str | None]) -> None:
        try:
            outcome = await self._outcome(spec, child, task)
        except Exception as exc:  # never leave the driver waiting for it
            self._channel.send(Ended(spec.session_id, None, error_text(exc)))
            return
        self._channel.send(Ended(spec.session_id, outcome))

    async def _outcome(self, spec: ChildSpec, child: ShardChild,
                       task: asyncio.Task[str | None]) -> Outcome:
        unwritten: RolloutError | None = None
        try:
            await child.recorder.flush_durable()
        except RolloutError as exc:
            unwritten = exc
        ending = ending_of(task, unwritten)
        raised = None if task.cancelled() else task.exception()
        stop = (raised.kind, raised.limit) if isinstance(raised, BudgetExhausted) else None
        child.close_events()
        self._release(spec.root.session_id)
        usage = child.usage()
        return Outcome(STATE_WORDS[type(ending)], ending.result if isinstance(ending, Done)
                       else None, ending.error if isinstance(ending, Failed) else None,
                       child.token_usage, usage.turns, usage.tool_calls,
                       child.answered_by, stop, (child.meter.turns, child.meter.tokens))

    async def close(self) -> None:
        """Drain what children left (their end hooks), write every line, stop the writer."""
        runtime = self._runtime
        runtime.start_closing()
        await runtime.drain()
        await runtime.stop_flusher()
        await runtime.aclose()

    # -- the stand-in for a top-level session, and its children ----------------------------
    def _stand_in(self, root: RootSpec, relay: bool, budget: Budget | None) -> Session:
        known = self._roots.get(root.session_id)
        if known is not None:
            self._roots[root.session_id] = (known[0], known[1] + 1)
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
        stand_in = Session.stand_in(self._runtime, config, root.session_id, DriverLedger(
            self._channel, root.session_id, None if budget is None else budget.max_turns))
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
        stand_in.close_events()

    def _child(self, spec: ChildSpec, stand_in: Session) -> ShardChild:
        tools = tuple(self._tool(spec, t) for t in spec.tools)
        child = ShardChild.remote(
            spec, stand_in, tools, partial(self._spent, spec.root.session_id),
            partial(self._channel.ask, spec.root.session_id, "parent", "",
                    child_id=spec.session_id))
        # Usage always goes to the driver (its listing, its tree's budget); the rest only
        # when someone listens there.
        relay = partial(self._relay, spec.root.session_id, spec.session_id)
        child.on(relay if spec.relay_events else partial(self._metered, relay))
        return child

    def _spent(self, root_id: str, error: BudgetExhausted) -> None:
        self._channel.send(Spent(root_id, error.kind, error.limit))

    @staticmethod
    def _metered(relay: Any, event: SessionEvent) -> None:
        if event.type in METERED:
            relay(event)

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
