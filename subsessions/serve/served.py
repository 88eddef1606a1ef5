"""One wire session: an engine session, the events its host sees, the host's handlers.

The engine's events (the session's and, forwarded, its children's) become `session.event`
notifications on the session's own id; a child's carry `agentId` = the child. What only
the wire has is added here: `session.start` at creation, `user.message` with the
`messageId` that `session.send` returned, a turn's start and end, and the
`originatingMessageId` that lets an SDK's `send_and_wait` tell its answer and its idle.

Messages run one at a time in the order sent (`session.send` queues); `session.abort`
cancels the running one (its tree with it: the rollouts end as cancels) and drops the
queued ones. The host's permission handler, hooks and user-input handler are JSON-RPC
calls back to the host, made for this session and every descendant.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from attrs import define, field

from subsessions._core.session import Session
from subsessions._util.clock import clock
from subsessions.config import Hooks
from subsessions.errors import error_text
from subsessions.events import SessionEvent
from subsessions.serve import wire
from subsessions.serve.peer import Peer

NO_APPROVAL = "denied-no-approval-rule-and-could-not-request-from-user"
HOOKS = {"on_pre_tool_use": "preToolUse", "on_post_tool_use": "postToolUse",
         "on_user_prompt_submitted": "userPromptSubmitted", "on_session_start": "sessionStart",
         "on_session_end": "sessionEnd", "on_error_occurred": "errorOccurred",
         "on_subagent_start": "subagentStart", "on_subagent_stop": "subagentStop"}


@define(eq=False)
class Turn:
    """One message from `session.send` to its end."""

    message_id: str
    prompt: str
    turn_id: str = field(factory=lambda: str(uuid.uuid4()))
    last_answer: dict[str, Any] | None = None  # the last root `assistant.message` event
    completion_id: str | None = None  # the `session.idle` / `session.error` that ended it
    error: str | None = None
    aborted: bool = False


@define(eq=False)
class HostBridge:
    """The host's handlers as engine callbacks: each one a request to the host."""

    peer: Peer
    session_id: str
    served: ServedSession | None = None  # set once the session exists

    def hooks(self) -> Hooks:
        return Hooks(**{name: self._hook(kind) for name, kind in HOOKS.items()})

    def _hook(self, kind: str) -> Any:
        async def invoke(data: dict[str, Any]) -> Any:
            if self.served is not None and self.served.closed:
                return None  # detached or deleted: the host no longer knows the session
            shaped = (wire.subagent_hook_input(kind, self.session_id, data)
                      if kind in wire.SUBAGENT_HOOKS else wire.hook_input(data))
            answer = await self.peer.request("hooks.invoke", {
                "sessionId": self.session_id, "hookType": kind, "input": shaped,
            })
            output = answer.get("output") if isinstance(answer, dict) else None
            return wire.subagent_hook_output(output) if kind in wire.SUBAGENT_HOOKS else output

        invoke.__name__ = kind
        return invoke

    async def ask_user(self, request: dict[str, Any]) -> str:
        answer = await self.peer.request("userInput.request", {
            "sessionId": self.session_id, "question": request["question"],
            "choices": request.get("choices") or [], "allowFreeform": True,
        })
        return str(answer.get("answer", "")) if isinstance(answer, dict) else ""

    async def permission(self, request: dict[str, Any]) -> str:
        if self.served is None or request.get("kind") != "custom-tool":
            return NO_APPROVAL  # nothing else asks: served sessions have no built-in tools
        return await self.served.ask_permission(request)


@define(eq=False)
class ServedSession:
    session: Session
    peer: Peer
    agents: dict[str, tuple[str, str]]  # custom agent name -> (display name, description)
    descriptions: dict[str, str]  # host tool name -> description
    _last_event: str | None = field(default=None, init=False)
    _turn: Turn | None = field(default=None, init=False)
    _queued: list[Turn] = field(factory=list, init=False)
    _lock: asyncio.Lock = field(factory=asyncio.Lock, init=False)
    _tasks: set[asyncio.Task[Turn]] = field(factory=set, init=False)
    _permissions: dict[str, asyncio.Future[Any]] = field(factory=dict, init=False)
    _off: Any = field(default=None, init=False)
    closed: bool = field(default=False, init=False)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def start(self, resumed: bool) -> None:
        self._off = self.session.on(self._on_engine_event)
        s = self.session
        if resumed:
            self.emit("session.resume", {"eventCount": 0, "resumeTime": clock.now(),
                                         "selectedModel": s.model, "context": {"cwd": s.cwd}})
        else:
            self.emit("session.start", wire.session_start(self.session_id, s.model, s.cwd))

    def emit(
        self, kind: str, data: dict[str, Any], agent_id: str | None = None
    ) -> dict[str, Any]:
        event = wire.envelope(kind, data, self._last_event, agent_id)
        self._last_event = event["id"]
        self.peer.notify("session.event", {"sessionId": self.session_id, "event": event})
        return event

    # -- messages ---------------------------------------------------------------------------
    def send(self, prompt: str) -> tuple[Turn, asyncio.Task[Turn]]:
        """Queue a message; the task ends with its turn (never raises for the turn's fate)."""
        turn = Turn(message_id=str(uuid.uuid4()), prompt=prompt)
        self._queued.append(turn)
        task = asyncio.get_running_loop().create_task(self._run(turn),
                                                      name=f"serve-turn-{self.session_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn, task

    async def _run(self, turn: Turn) -> Turn:
        async with self._lock:
            self._queued.remove(turn)
            if turn.aborted:  # dropped by an abort while it waited
                return turn
            self._turn = turn
            self.emit("user.message", {"content": turn.prompt, "messageId": turn.message_id})
            self.emit("assistant.turn_start", {"turnId": turn.turn_id,
                                               "model": self.session.model})
            try:
                await self.session.send_and_wait(turn.prompt)
            except asyncio.CancelledError:
                if _cancelling():
                    raise  # this session is closing: nobody waits for the turn
                turn.aborted = True  # the engine's task was aborted (session.abort)
            except Exception as exc:
                turn.error = error_text(exc)
            finally:
                self._turn = None
            if turn.completion_id is None:  # it failed before the engine began the task
                self._end_turn(turn, "session.error", {"message": turn.error or "aborted"})
            return turn

    def abort(self) -> bool:
        """Cancel the running message (and its tree) and drop the queued ones."""
        for turn in self._queued:
            turn.aborted = True
        return self.session.abort() or bool(self._queued)

    def _on_engine_event(self, event: SessionEvent) -> None:
        kind = event.type
        # A deferred tool's request is emitted on the root: the caller is in its data.
        caller = event.data.get("session_id") if kind == "external_tool.requested" else None
        source = caller if isinstance(caller, str) else event.session_id
        agent = source if source != self.session_id else None
        if kind in ("session.idle", "session.error"):
            if agent is None and self._turn is not None:
                self._end_turn(self._turn, kind, event.data)
            return  # a child's end is its subagent.completed / failed
        data = wire.translate(kind, event.data, self._describe)
        if data is None:
            return
        if caller is not None:
            data["sessionId"] = self.session_id  # the host knows the tree by its root
        turn = self._turn
        if kind == "assistant.message" and agent is None and turn is not None:
            data["originatingMessageId"] = turn.message_id
            data["turnId"] = turn.turn_id
            turn.last_answer = self.emit(kind, data)
            return
        self.emit(kind, data, agent)

    def _end_turn(self, turn: Turn, kind: str, data: dict[str, Any]) -> None:
        self.emit("assistant.turn_end", {"turnId": turn.turn_id})
        if kind == "session.idle":
            turn.aborted = turn.aborted or bool(data.get("aborted"))
            turn.completion_id = self.emit(kind, {"aborted": turn.aborted})["id"]
        else:
            turn.error = str(data.get("message", ""))
            turn.completion_id = self.emit(kind, {
                "errorType": "error", "message": turn.error,
                "originatingMessageId": turn.message_id,
            })["id"]

    def _describe(self, name: str) -> tuple[str, str]:
        if name in self.agents:
            return self.agents[name]
        loaded = self.session.runtime.profiles.get(name)
        return name, loaded.profile.description if loaded is not None else ""

    # -- permissions (protocol v3: a broadcast event, answered by a request) ---------------
    async def ask_permission(self, request: dict[str, Any]) -> str:
        request_id = str(uuid.uuid4())
        caller = request.get("session_id")
        agent = caller if caller != self.session_id else None
        name = str(request.get("tool_name", ""))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._permissions[request_id] = future
        try:
            self.emit("permission.requested", {"requestId": request_id, "permissionRequest": {
                "kind": "custom-tool", "toolName": name,
                "toolDescription": self.descriptions.get(name, ""),
                "args": request.get("arguments"), "toolCallId": request.get("tool_call_id"),
            }}, agent)
            kind = wire.decision_kind(await future)
        finally:
            self._permissions.pop(request_id, None)
        self.emit("permission.completed", {"requestId": request_id, "result": {"kind": kind},
                                           "toolCallId": request.get("tool_call_id")}, agent)
        return kind

    def answer_permission(self, request_id: str, decision: Any) -> bool:
        future = self._permissions.get(request_id)
        if future is None or future.done():
            return False
        future.set_result(decision)
        return True

    def answer_tool(self, request_id: str, result: Any, error: Any) -> bool:
        text, failure = wire.tool_answer(result, error)
        answered = self.session.handle_pending_tool_call(request_id, result=text, error=failure)
        if answered:
            self.emit("external_tool.completed", {"requestId": request_id})
        return answered

    async def close(self) -> None:
        """Stop serving: running and queued messages are cancelled, listeners removed."""
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for future in self._permissions.values():
            future.cancel()
        if self._off is not None:
            self._off()


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
