"""The driver's side of host dispatch across the cluster.

A remote child's calls of host tools, deferred tools, permission requests, hooks, user input
(and model calls, when the model stays in the driver) arrive as requests from its shard and
run the top-level session's own handlers here; the answer goes back. The rest of the
dispatch (allowlists, hook order, texts) already ran on the shard with the in-process code.
Events of remote children are forwarded to the parent's stream as in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from attrs import define, evolve, field, fields

from subsessions import otel
from subsessions._core.conversation import Child, Conversation
from subsessions._core.dispatch import call_maybe_async
from subsessions._core.figures import Figures
from subsessions._core.runtime import Runtime
from subsessions._util.clock import clock
from subsessions.config import Hooks, Invocation
from subsessions.errors import (
    BudgetExhausted,
    SubsessionError,
    ToolNotSupported,
    UnknownSession,
    error_text,
)
from subsessions.events import EventHub, SessionEvent, emit
from subsessions.models.base import TokenUsage
from subsessions.otel.wire import SpanBatch
from subsessions.ray.channel import Message
from subsessions.ray.replies import Replies
from subsessions.ray.wire import Call, Cancel, Event, Request, Room, Spent
from subsessions.usage import Usage

log = logging.getLogger("subsessions")
HOOK_NAMES = tuple(f.name for f in fields(Hooks))


class Replier(Protocol):
    """What the answerer needs of a shard: where its answers go, and an index."""

    index: int
    replies: Replies


@define(eq=False)
class Answerer:
    runtime: Runtime
    hosts: dict[str, Child]  # the remote children running, by id (the backend's)
    _calls: dict[tuple[int, int], asyncio.Task[None]] = field(factory=dict)
    # descendants running on a shard, by (shard, root): counted in the root's tree
    _rooms: dict[tuple[int, str], int] = field(factory=dict)

    def receive(self, shard: Replier, message: Message) -> None:
        if isinstance(message, Event):
            self._forward(message)
        elif isinstance(message, Call):
            self._call_begins(message.child_id, message.session_id, message.turns,
                              message.tool_calls)
        elif isinstance(message, Room):
            self._room(shard.index, message.root_id, message.delta)
        elif isinstance(message, Spent):
            self._end_tree(message.root_id, BudgetExhausted(message.kind, message.limit))
        elif isinstance(message, SpanBatch):  # spans a shard finished: to our provider
            otel.replay(self.runtime.tracer, message)
        elif isinstance(message, Request) and message.kind == "room":
            self._admit(shard, message)
        elif isinstance(message, Request) and message.kind == "turn":
            self._grant(shard, message)
        elif isinstance(message, Request):
            key = (shard.index, message.request_id)
            call = asyncio.get_running_loop().create_task(
                self._answer(shard, message), name=f"subsessions-ray-{message.kind}")
            self._calls[key] = call
            call.add_done_callback(lambda _: self._calls.pop(key, None))
        elif isinstance(message, Cancel):
            pending = self._calls.get((shard.index, message.request_id))
            if pending is not None:
                pending.cancel()

    def forget(self, shard: Replier) -> None:
        """A lost shard's requests (nobody is left to take their answers) and its
        descendants' places in their trees."""
        for (index, _), call in list(self._calls.items()):
            if index == shard.index:
                call.cancel()
        for (index, root_id), count in list(self._rooms.items()):
            if index == shard.index:
                self._room(index, root_id, -count)

    def _admit(self, shard: Replier, request: Request) -> None:
        """A descendant is about to start on a shard: the tree's limit is checked and it is
        counted here, at once, so children starting on two shards never overshoot it."""
        try:
            root, _ = self.runtime.dispatcher.resolve_session(request.root_id)
            root.tree.check_running()
        except SubsessionError as exc:
            shard.replies.put(request.request_id, False, error_text(exc))
            return
        self._room(shard.index, request.root_id, 1)
        shard.replies.put(request.request_id, True, None)

    def _grant(self, shard: Replier, request: Request) -> None:
        """A model call begins on a shard in a tree with a turn limit: the turn is counted
        here at once (the call's tokens when it is answered), or refused when none is left,
        and then the whole tree ends, as in process once its budget is spent."""
        self._call_begins(request.child_id, *request.args)
        try:
            root, _ = self.runtime.dispatcher.resolve_session(request.root_id)
        except UnknownSession as exc:
            shard.replies.put(request.request_id, False, error_text(exc))
            return
        meter = root.meter
        granted = meter.grant()
        shard.replies.put(request.request_id, True, granted)
        limit = meter.limits.max_turns
        if granted is None and limit is not None:
            meter.stop(BudgetExhausted("turns", limit))

    def _end_tree(self, root_id: str, error: BudgetExhausted) -> None:
        with contextlib.suppress(UnknownSession):
            root, _ = self.runtime.dispatcher.resolve_session(root_id)
            root.meter.stop(error)

    def _call_begins(self, child_id: str, session_id: str, turns: int, calls: int) -> None:
        """A model call in a remote child's subtree begins: its live usage counts the turn
        (its tokens come when it is answered), as in process, and the tools it called."""
        child = self.hosts.get(child_id)
        if child is None:
            return
        if session_id == child_id:
            child.apply(Figures(child.token_usage, max(child.turns, turns),
                                max(child.tool_calls, calls), child.answered_by))
        else:
            known = child.remote_usage(session_id)
            child.count_remote(session_id, evolve(known, turns=max(known.turns, turns),
                                                  tool_calls=max(known.tool_calls, calls)))

    def _room(self, index: int, root_id: str, delta: int) -> None:
        key = (index, root_id)
        self._rooms[key] = self._rooms.get(key, 0) + delta
        if not self._rooms[key]:
            del self._rooms[key]
        try:
            root, _ = self.runtime.dispatcher.resolve_session(root_id)
        except UnknownSession:
            return  # destroyed or closed: its tree is gone
        for _ in range(abs(delta)):
            if delta > 0:
                root.tree.child_started()
            else:
                root.tree.child_ended()

    async def aclose(self) -> None:
        calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls)

    async def _answer(self, shard: Replier, request: Request) -> None:
        try:
            value, ok = await self._serve(request), True
        except asyncio.CancelledError:
            raise  # the shard gave up on it (its child was cancelled), or we are closing
        except Exception as exc:
            value, ok = error_text(exc), False
        shard.replies.put(request.request_id, ok, value, f"{request.kind} {request.name}")

    async def _serve(self, request: Request) -> Any:
        kind, args = request.kind, request.args
        if kind == "model":
            return await self.runtime.model_client.respond(args[0])
        if kind == "parent":  # send_parent_message from a remote child
            child = self.hosts.get(request.child_id)
            parent = None if child is None else child.parent
            if not isinstance(parent, Conversation):
                raise UnknownSession(request.child_id)
            return parent.hear(args[0])
        dispatcher = self.runtime.dispatcher
        root, _ = dispatcher.resolve_session(request.root_id)
        config = root.config
        if kind == "tool":
            child = self.hosts.get(request.child_id)
            tools = child.tools() if child is not None else config.tools
            tool = next((t for t in tools if t.name == request.name), None)
            if tool is None or tool.handler is None:
                raise ToolNotSupported(request.name)
            return await call_maybe_async(tool.handler, args[0], Invocation(*args[1]))
        if kind == "deferred":
            arguments, session_id, call_id = args
            return await dispatcher.deferred(root, session_id, request.name, arguments, call_id)
        if kind == "hook":
            return await call_maybe_async(getattr(config.hooks, request.name), args[0])
        handler = (config.permission_handler if kind == "permission"
                   else config.user_input_handler)
        return await call_maybe_async(handler, args[0])

    def _forward(self, event: Event) -> None:
        """As in process: the child's own events through its hub (so they reach the parent
        with `parent_tool_call_id`), its descendants' already forwarded, the root's own."""
        child = self.hosts.get(event.child_id)
        if event.child_id == "":
            with contextlib.suppress(UnknownSession):
                root, _ = self.runtime.dispatcher.resolve_session(event.root_id)
                emit(root.events, event.type, event.data)
            return
        if child is None:
            return  # it has ended meanwhile: its stream is closed
        if event.type == "subagent.usage":
            _spent(child, event)
        elif event.type == "assistant.message" and event.session_id == event.child_id:
            child.last_message = event.data.get("content")
        if event.session_id == event.child_id:
            data = {k: v for k, v in event.data.items() if k != "parent_tool_call_id"}
            emit(child.events, event.type, data)
        else:
            _deliver_up(child.events, event)


def _spent(child: Child, event: Event) -> None:
    """A model call in a remote child's subtree: the child's live usage (what its parent's
    `list_sessions` shows) and its tree's budget, which the driver's root meter counts."""
    data = event.data
    if event.session_id == event.child_id:
        child.apply(Figures(TokenUsage(data["input_tokens"], data["output_tokens"],
                                       estimated=data.get("estimated", False)),
                            data["turns"], data["tool_calls"], child.answered_by))
    else:  # one of its own children (or theirs): its parent's roll-up counts it
        child.count_remote(event.session_id, Usage(data["input_tokens"], data["output_tokens"],
                                                   data["tool_calls"], data["turns"],
                                                   data.get("estimated", False)))
    meter = child.root.meter
    # Whether it wanted more is the shard's to judge: its share of the tree stops the tree.
    # With a turn limit, the turn was counted when the shard was granted it.
    reached = meter.charge(data["last"]["total_tokens"], False,
                           granted=meter.limits.max_turns is not None)
    if reached is not None:
        reached[0].stop(reached[1])


def _deliver_up(hub: EventHub, event: Event) -> None:
    event_id, previous = hub.next_id()
    forwarded = SessionEvent(id=event_id, timestamp=clock.now(), parent_id=previous,
                             type=event.type, data=event.data, session_id=event.session_id)
    node: EventHub | None = hub
    while node is not None:
        node.deliver(forwarded)
        node = node.parent
