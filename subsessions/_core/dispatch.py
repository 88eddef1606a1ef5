"""Host-side dispatch: children's requests reach the top-level session's handlers.

Children are not in the engine's registry. The maps below, kept from the
`subagent.*` lifecycle, let one `resolve_session` answer for all four request kinds
(tool calls, permissions, hooks, user input). The lock guards the maps only; it is
never held while a handler runs, since a handler may create or delete sessions.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import orjson
from attrs import frozen

from subsessions.config import ASK_USER, SUBMIT_RESULT, Invocation, SessionConfig, Tool
from subsessions.errors import PermissionDenied, ToolNotSupported, UnknownSession
from subsessions.events import EventHub, emit, listening
from subsessions.profiles import Profile
from subsessions.tools.context import NO_APPROVAL, permission_kind

log = logging.getLogger("subsessions")


class Caller(Protocol):
    """What dispatch needs of a session making a request (or answering for one)."""

    @property
    def session_id(self) -> str: ...
    @property
    def cwd(self) -> str: ...
    @property
    def agent_name(self) -> str | None: ...
    @property
    def config(self) -> SessionConfig: ...  # a root's: its handlers and hooks
    @property
    def events(self) -> EventHub: ...
    @property
    def profile(self) -> Profile | None: ...
    @property
    def call_id(self) -> str | None: ...  # the call that spawned it (children)
    @property
    def started_at(self) -> float: ...


H = TypeVar("H", bound=Caller)
# Requests the allowlist never gates (3.6): user input goes to the root's handler whatever
# tools an agent may use.
# Never gated by a child's allowlist: the root's question, and a typed child's answer (which
# only a typed child is offered; a profile with `tools = []` must still deliver it).
UNGATED = frozenset({ASK_USER, SUBMIT_RESULT})


@frozen
class SubagentInstance:
    agent_name: str
    tool_call_id: str
    child_id: str
    started_at: float


async def call_maybe_async(function: Any, *args: Any) -> Any:
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


class Dispatcher(Generic[H]):
    """The engine's child maps and request routing, over sessions of type `H`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registered: dict[str, H] = {}
        self.child_to_parent: dict[str, str] = {}
        self.child_to_agent: dict[str, Profile] = {}
        # each running child by its parent and call: a plain tuple (agent, child, started)
        # until asked for, which the cyclic collector does not track
        self._instances: dict[str, dict[str, tuple[str, str, float]]] = {}
        self._pending: dict[str, tuple[Caller, asyncio.Future[str]]] = {}
        self._request_ids = itertools.count(1)

    # -- registry and maps ------------------------------------------------------------------
    @property
    def subagent_instances(self) -> dict[str, dict[str, SubagentInstance]]:
        """Each running child by its parent's id and the call that spawned it (a copy)."""
        with self._lock:
            return {parent: {call: SubagentInstance(name, call, child, started)
                             for call, (name, child, started) in calls.items()}
                    for parent, calls in self._instances.items()}

    def register(self, session: H) -> None:
        with self._lock:
            self._registered[session.session_id] = session

    def unregister(self, session_id: str) -> None:
        """Forget a top-level session and every map entry of its descendants."""
        with self._lock:
            self._registered.pop(session_id, None)
            gone = {session_id}
            changed = True
            while changed:  # descendants at any depth
                changed = False
                for child, parent in list(self.child_to_parent.items()):
                    if parent in gone and child not in gone:
                        gone.add(child)
                        changed = True
            for child in gone - {session_id}:
                self.child_to_parent.pop(child, None)
                self.child_to_agent.pop(child, None)
            for parent in gone:
                self._instances.pop(parent, None)

    def clear(self) -> None:
        with self._lock:
            self._registered.clear()
            self.child_to_parent.clear()
            self.child_to_agent.clear()
            self._instances.clear()

    def child_started(self, parent: Caller, child: Caller, call_id: str) -> None:
        agent = child.profile or Profile(name="custom")
        with self._lock:
            self.child_to_parent[child.session_id] = parent.session_id
            self.child_to_agent[child.session_id] = agent
            self._instances.setdefault(parent.session_id, {})[call_id] = (
                agent.name, child.session_id, child.started_at
            )
        if listening(parent.events):
            emit(parent.events, "subagent.started", {
                "tool_call_id": call_id, "agent_name": agent.name,
                "agent_display_name": agent.description or agent.name,
                "remote_session_id": child.session_id,
            })

    def forget_child(self, child_id: str) -> None:
        """An ended child its parent forgot (a batch's): no request of it can come any more."""
        with self._lock:
            self.child_to_parent.pop(child_id, None)
            self.child_to_agent.pop(child_id, None)

    def child_ended(
        self, parent: Caller, child: Caller, data: Callable[[], dict[str, Any]]
    ) -> None:
        """Only the instance record goes: late requests from the child still resolve."""
        with self._lock:
            instances = self._instances.get(parent.session_id)
            if instances is not None:
                instances.pop(child.call_id or "", None)
        if listening(parent.events):
            payload = data()
            emit(parent.events, "subagent.failed" if "error" in payload else "subagent.completed",
                 payload)

    def resolve_session(self, session_id: str) -> tuple[H, bool]:
        """The top-level session that answers for `session_id`, and whether it is a child."""
        with self._lock:
            found = self._registered.get(session_id)
            if found is not None:
                return found, False
            parent = self.child_to_parent.get(session_id)
            if parent is None:
                raise UnknownSession(session_id)
            while parent not in self._registered:
                above = self.child_to_parent.get(parent)
                if above is None:
                    raise UnknownSession(
                        session_id, f"parent session {parent} for child {session_id} not found"
                    )
                parent = above
            return self._registered[parent], True

    def agent_allows(self, session_id: str, tool_name: str) -> bool:
        with self._lock:
            agent = self.child_to_agent.get(session_id)
        return agent is None or agent.allows(tool_name)

    # -- requests ---------------------------------------------------------------------------
    async def call_tool(
        self, caller: Caller, tool: Tool | None, name: str, arguments: dict[str, Any],
        call_id: str, builtin: Callable[[dict[str, Any]], Awaitable[str]] | None = None,
    ) -> str:
        """A tool call from any session, under its agent's allowlist, hooks and permissions.

        `builtin` runs the engine's own tools (sub-session tools, ask_user) in place of a
        `Tool` handler, so hooks see every tool call alike.
        """
        root, is_child = self.resolve_session(caller.session_id)
        known = tool is not None or builtin is not None
        gated = is_child and name not in UNGATED
        if not known or (gated and not self.agent_allows(caller.session_id, name)):
            raise ToolNotSupported(name)
        hooks = root.config.hooks
        base: dict[str, Any] = {}
        if hooks is not None:
            base = {"session_id": caller.session_id, "timestamp": time.time(), "cwd": caller.cwd,
                    "tool_name": name}
        if hooks is not None and hooks.on_pre_tool_use is not None:
            decision = await self.run_hook(hooks.on_pre_tool_use, {**base, "tool_args": arguments})
            if isinstance(decision, dict):
                if decision.get("permissionDecision") == "deny":
                    reason = decision.get("permissionDecisionReason") or "denied by a hook"
                    raise PermissionDenied(name, str(reason))
                if isinstance(decision.get("modifiedArgs"), dict):
                    arguments = decision["modifiedArgs"]
        if tool is not None and tool.requires_permission:
            kind = await self.request_permission(caller, {
                "kind": "custom-tool", "tool_name": name, "arguments": arguments,
                "tool_call_id": call_id,
            })
            if kind != "approved":
                raise PermissionDenied(name, kind)
        if builtin is not None:
            output = await builtin(arguments)
        elif tool is None or tool.handler is None:
            output = await self.deferred(root, caller.session_id, name, arguments, call_id)
        else:
            invocation = Invocation(caller.session_id, call_id, name, caller.agent_name)
            output = _as_text(name, await call_maybe_async(tool.handler, arguments, invocation))
        if hooks is not None and hooks.on_post_tool_use is not None:
            changed = await self.run_hook(hooks.on_post_tool_use, {
                **base, "tool_args": arguments, "tool_result": output,
            })
            if isinstance(changed, dict) and "modifiedResult" in changed:
                output = _as_text(name, changed["modifiedResult"])
        return output

    async def request_permission(self, caller: Caller, request: dict[str, Any]) -> str:
        """The root's permission handler decides; none, or one that fails, denies."""
        root, _ = self.resolve_session(caller.session_id)
        request = {**request, "session_id": caller.session_id}
        emit(root.events, "permission.requested", request)
        handler = root.config.permission_handler
        if handler is None:
            return NO_APPROVAL
        try:
            answer = await call_maybe_async(handler, request)
        except Exception:
            log.exception("permission handler failed")
            return NO_APPROVAL
        return permission_kind(answer)

    async def invoke_hook(self, caller: Caller, hook: str, data: dict[str, Any]) -> Any:
        """Run one of the root's hooks for an event in `caller` (child or not)."""
        root, _ = self.resolve_session(caller.session_id)
        function = getattr(root.config.hooks, hook, None) if root.config.hooks else None
        if function is None:
            return None
        return await self.run_hook(function, {"session_id": caller.session_id,
                                              "timestamp": time.time(), **data})

    async def run_hook(self, function: Any, data: dict[str, Any]) -> Any:
        try:
            return await call_maybe_async(function, data)
        except Exception:
            log.exception("hook %s failed; ignored", getattr(function, "__name__", function))
            return None

    async def ask_user(self, caller: Caller, question: str, choices: list[str] | None) -> str:
        root, _ = self.resolve_session(caller.session_id)
        handler = root.config.user_input_handler
        if handler is None:
            raise ToolNotSupported("ask_user")
        request = {"question": question, "choices": choices, "session_id": caller.session_id}
        answer = await call_maybe_async(handler, request)
        if isinstance(answer, dict):
            answer = answer.get("answer", "")
        return str(answer)

    # -- deferred tools ---------------------------------------------------------------------
    async def deferred(
        self, root: Caller, session_id: str, name: str, arguments: dict[str, Any], call_id: str
    ) -> str:
        """A deferred tool's call, answered by `root`'s host (`answer`); `session_id` is the
        caller's, which may run on another machine."""
        if not root.events.answering:
            raise ToolNotSupported(name)  # nobody could ever answer: do not wait forever
        request_id = f"req_{next(self._request_ids)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._pending[request_id] = (root, future)
        try:
            emit(root.events, "external_tool.requested", {
                "request_id": request_id, "session_id": session_id,
                "tool_call_id": call_id, "tool_name": name, "arguments": arguments,
            })
            return await future
        finally:
            with self._lock:
                self._pending.pop(request_id, None)

    def answer(self, root: Caller, request_id: str, result: Any, error: str | None) -> bool:
        """Resolve a deferred call; False if there is no such pending request for `root`."""
        with self._lock:
            entry = self._pending.get(request_id)
        if entry is None or entry[0] is not root or entry[1].done():
            return False
        text = None if error is not None else _as_text("deferred tool", result)
        future = entry[1]
        # The host may answer from another thread: settle on the future's own loop.
        future.get_loop().call_soon_threadsafe(_settle, future, text, error)
        return True


def _settle(future: asyncio.Future[str], text: str | None, error: str | None) -> None:
    if future.done():
        return
    if text is None:
        future.set_exception(RuntimeError(error or "the host reported an error"))
    else:
        future.set_result(text)


def _as_text(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:  # a handler that returns nothing gives the model nothing
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:
        raise TypeError(f"tool {name} returned a value that is not JSON: {exc}") from None

