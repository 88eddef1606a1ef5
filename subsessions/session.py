"""A session: instructions, history, tools, a rollout; a task loop to TaskComplete."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from subsessions._version import __version__
from subsessions.config import SessionConfig, Tool, filter_tools
from subsessions.errors import (
    InvalidArguments,
    MaxTurnsExceeded,
    ModelError,
    SessionBusy,
    SubsessionError,
    ToolNotSupported,
    error_text,
)
from subsessions.events import EventHandler, EventHub, EventStream, emit
from subsessions.handlers import ask_user
from subsessions.handlers import subsessions as subsession_tools
from subsessions.handlers.arguments import check_arguments, parse_arguments
from subsessions.ids import new_session_id
from subsessions.items import (
    Item,
    developer_message,
    function_call_output,
    is_assistant_message,
    message_text,
    output_problem,
    user_message,
)
from subsessions.manager import SubsessionManager
from subsessions.models.base import ModelRequest, TokenUsage
from subsessions.profiles import Profile
from subsessions.rollouts.reader import read_rollout
from subsessions.rollouts.recorder import RolloutRecorder, clock, rollout_path
from subsessions.tools import BUILTIN_TOOL_NAMES, ToolContext, builtin_tools
from subsessions.usage import Usage

if TYPE_CHECKING:
    from subsessions.engine import Engine


_PID = os.getpid()
_CANCELLED: dict[str, Any] = {"type": "turn_aborted", "reason": "cancelled"}


class Session:
    """One conversation. Create top-level ones with `Engine.create_session`."""

    def __init__(
        self,
        engine: Engine,
        config: SessionConfig,
        *,
        parent: Session | None = None,
        profile: Profile | None = None,
        call_id: str | None = None,
        source: str | dict[str, Any] = "exec",
        resumed: tuple[str, str] | None = None,  # (id, rollout path) of a session on disk
        tool_context: ToolContext | None = None,  # a child's: its parent's, made for a child
    ) -> None:
        self.session_id = resumed[0] if resumed else new_session_id()
        self.engine = engine
        self.config = config
        self.parent = parent
        self.root: Session = parent.root if parent is not None else self
        self.depth: int = parent.depth + 1 if parent is not None else 0
        self.profile = profile
        self.call_id = call_id
        self.source = source
        self.model = config.model or engine.model
        self.instructions = config.instructions or ""
        self.cwd = config.cwd or engine.cwd
        self.max_turns = profile.max_turns if profile is not None else config.max_turns
        self.history: list[Item] = []
        self.token_usage = TokenUsage()
        self.started_at = time.time()
        self.recorder = RolloutRecorder(
            engine.writer,
            resumed[1] if resumed else rollout_path(engine.home, self.session_id, self.started_at),
            engine.unwritten,
            self.depth,
        )
        self.subsessions = SubsessionManager(self)
        self._child_context: ToolContext | None = None
        self.tool_context = tool_context or self._own_tool_context()
        tools = config.tools
        if self.tool_context is not None and parent is None:
            tools += builtin_tools(self.tool_context, _builtin_names(config))
        self._tools = {t.name: t for t in tools}
        self._busy = False
        self._specs: tuple[dict[str, Any], ...] | None = None
        self._answering_model: str | None = None
        self.wrote_meta = resumed is not None  # a resumed rollout keeps its first session_meta
        self._notes: tuple[dict[str, Any], ...] = ()  # noted before there was a rollout
        self.forked_from: str | None = None
        self.resume_report: str | None = None  # what resuming or forking read and skipped
        self.wrote_task = False
        self.released = False  # ended child: history and tools dropped, its rollout has them
        self.wrote_end = False
        self.started_task = False  # a terminal record is in the buffer or on disk
        self.events = EventHub()
        self.turns = 0
        self.tool_calls = 0

    def __repr__(self) -> str:
        kind = f"child of {self.parent.session_id} depth={self.depth}" if self.parent else "top"
        return f"<Session {self.session_id} {kind} model={self.model!r}>"

    @property
    def agent_name(self) -> str | None:
        """The profile a child runs (None for a top-level session)."""
        return self.profile.name if self.profile is not None and self.parent else None

    def child_tool_context(self) -> ToolContext | None:
        """This session's workspace and policies as its children get them (built once)."""
        if self._child_context is None and self.tool_context is not None:
            self._child_context = self.tool_context.for_child()
        return self._child_context

    def _own_tool_context(self) -> ToolContext | None:
        """A top-level session's workspace and policies, when it asked for built-in tools."""
        config = self.config
        if not config.builtin_tools or self.parent is not None:
            return None
        return ToolContext(
            cwd=self.cwd, sandbox=config.sandbox, network_access=config.network_access,
            approval=config.approval, env_policy=config.env_policy,
            max_processes=config.max_processes,
            ask_permission=partial(self.engine.dispatcher.request_permission, self),
        )

    def on(self, handler: EventHandler) -> Callable[[], None]:
        """Call `handler` with each event of this session and its descendants."""
        return self.events.on(handler)

    def event_stream(self) -> EventStream:
        """This session's events (its descendants' included) from now until it closes.
        Only a stream being read can answer deferred tools; drop it or `aclose()` it to stop."""
        return self.events.stream()

    def handle_pending_tool_call(
        self, request_id: str, result: Any = None, error: str | None = None
    ) -> bool:
        """Answer an `external_tool.requested` event; False if nothing is waiting on it."""
        return self.engine.dispatcher.answer(self, request_id, result, error)

    def tools(self) -> tuple[Tool, ...]:
        """The tools this session's model may call besides the engine's own."""
        return tuple(self._tools.values())

    def usage(self, include_children: bool = False) -> Usage:
        """Tokens, tool calls and model turns of this session (and its whole tree)."""
        own = Usage(
            input_tokens=self.token_usage.input_tokens,
            output_tokens=self.token_usage.output_tokens,
            tool_calls=self.tool_calls,
            turns=self.turns,
        )
        if not include_children:
            return own
        return Usage.total([own, *(s.usage() for s in self.subsessions.tree())])

    @property
    def answering_model(self) -> str:
        """The model that answered last: `model`, or the fallback that stood in for it."""
        return self._answering_model or self.model

    def allows(self, tool_name: str) -> bool:
        """Whether this session's profile allowlist admits a tool (no profile admits all)."""
        return self.profile is None or self.profile.allows(tool_name)

    @property
    def offers_subsession_tools(self) -> bool:
        """Below the depth limit, and only those sub-session tools the allowlist admits."""
        return self.depth < self.root.config.max_depth

    def tool_specs(self) -> tuple[dict[str, Any], ...]:
        """What the model is offered: fixed for the session's life, and the same for siblings
        spawned from one profile, so built once per (config, profile, depth) in a tree."""
        if self._specs is not None:
            return self._specs
        shared = self.root.subsessions.spec_cache
        key = (id(self.config), self.profile, self.depth)
        cached = shared.get(key)
        if cached is not None and cached[0] is self.config:
            self._specs = cached[1]
            return self._specs
        specs = tuple(t.spec() for t in self._tools.values())
        if self.root.config.user_input_handler is not None:  # never gated by the allowlist
            specs += (ask_user.SPEC,)
        if self.offers_subsession_tools:
            specs += tuple(
                s for s in self.root.subsessions.tree_tool_specs() if self.allows(s["name"])
            )
        shared[key] = (self.config, specs)
        self._specs = specs
        return specs

    async def send_and_wait(self, prompt: str) -> str | None:
        """Run one task to TaskComplete and return the last assistant message."""
        return await self.engine.run_owned(self.run_task(prompt), self.session_id)

    async def run_task(self, prompt: str) -> str | None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidArguments("send_and_wait", "prompt must be a non-empty string")
        if self._busy:
            raise SessionBusy(self.session_id)
        self._busy = True
        try:
            if self.released:
                self._reload()
            return await self._run_task(prompt)
        finally:
            self._busy = False
            if self.parent is None:  # a child's flush is awaited by its manager instead
                await self.recorder.flush_durable()

    def release(self) -> None:
        """Drop what only a task needs (history, tools) once a child has ended and its rollout
        is written: a long-lived parent of many children must not hold every transcript."""
        self.history = []
        self._tools = {}
        self._specs = None
        self._child_context = None
        self.released = True

    def _reload(self) -> None:
        """Before a released child runs again: its history from its rollout, its tools from
        its config (a child's tools are all there)."""
        self.history = read_rollout(self.recorder.path).response_items()
        self._tools = {t.name: t for t in self.config.tools}
        self.released = False

    def write_meta(self) -> None:
        if self.wrote_meta:
            return
        self.wrote_meta = True
        payload: dict[str, Any] = {
            "id": self.session_id,
            "timestamp": clock.now(),
            "cwd": self.cwd,
            "originator": "subsessions",
            "cli_version": __version__,
            "source": self.source,
            "model": self.model,
            "model_provider": self.engine.model_provider,
            "instructions": self.instructions,
            "pid": _PID,  # lets a reader tell a running session from an interrupted one
        }
        if self.profile is not None:
            payload["session_type"] = self.profile.name
        if self.forked_from is not None:
            payload["forked_from_id"] = self.forked_from
        self.recorder.record("session_meta", payload)
        for note in self._notes:
            self.recorder.event(note)
        self._notes = ()

    def note(self, message: str) -> None:
        """A background event for the rollout, kept until its session_meta comes first."""
        event = {"type": "background_event", "message": message}
        if self.wrote_meta:
            self.recorder.event(event)
        else:
            self._notes += (event,)

    async def _run_task(self, prompt: str) -> str | None:
        self.write_meta()
        if not self.started_task:  # at its first task, where a listener (or parent) can see it
            self.started_task = True
            emit(self, "session.start", {"session_id": self.session_id, "source": self.source})
        record = self.recorder
        record.record(
            "turn_context",
            {
                "cwd": self.cwd,
                "approval_policy": "never" if self.parent is not None else self.config.approval,
                "model": self.model,
                "pid": _PID,  # the writer of this task (a resumed session's differs from meta's)
            },
        )
        record.event({"type": "task_started"})
        # Exactly one terminal record, on every path: children are ended first (a
        # cancelled task's children, and any child's children, since nobody could
        # wait for them any more), and a cancel landing meanwhile makes it an abort.
        terminal: dict[str, Any] = {"type": "turn_aborted", "reason": "interrupted"}
        answer: str | None = None
        try:
            if self.root.config.hooks is not None:
                prompt = await self._prompt_hooks(prompt)
            message = user_message(prompt)
            self.history.append(message)
            record.record("response_item", message)
            record.event({"type": "user_message", "message": prompt})
            answer = await self._turns()
            terminal = {"type": "task_complete", "last_agent_message": answer}
        except asyncio.CancelledError:
            terminal = _CANCELLED
            raise
        except Exception as exc:
            terminal = {"type": "error", "message": error_text(exc)}
            raise
        finally:
            try:
                if self.subsessions.has_children and (
                    terminal is _CANCELLED or self.parent is not None
                ):
                    await self.subsessions.abort_all_children()
            except asyncio.CancelledError:
                terminal = _CANCELLED
                raise
            finally:
                record.event(terminal)
                self.wrote_end = True
                self._announce_end(terminal)
        return answer

    async def _prompt_hooks(self, prompt: str) -> str:
        dispatcher = self.engine.dispatcher
        if self.parent is not None and not self.wrote_task:
            await dispatcher.invoke_hook(self, "on_session_start", {"source": "subsession"})
        self.wrote_task = True
        changed = await dispatcher.invoke_hook(self, "on_user_prompt_submitted",
                                               {"prompt": prompt})
        if isinstance(changed, dict) and isinstance(changed.get("modifiedPrompt"), str):
            return str(changed["modifiedPrompt"])
        return prompt

    def _announce_end(self, terminal: dict[str, Any]) -> None:
        kind = terminal["type"]
        if kind == "error":
            emit(self, "session.error", {"message": terminal["message"]})
        else:
            emit(self, "session.idle", {"aborted": kind == "turn_aborted"})
        hooks = self.root.config.hooks
        if hooks is None:
            return
        dispatcher = self.engine.dispatcher
        if kind == "error" and hooks.on_error_occurred is not None:
            self._hook_later(dispatcher.invoke_hook(self, "on_error_occurred",
                                                    {"error": terminal["message"]}))
        if self.parent is not None and hooks.on_session_end is not None:
            self._hook_later(dispatcher.invoke_hook(self, "on_session_end", {
                "reason": {"task_complete": "complete", "error": "error"}.get(kind, "abort"),
            }))

    def _hook_later(self, hook: Any) -> None:
        """End-of-task hooks run beside the ending, never delaying or blocking it."""
        try:
            self.engine.spawn_task(hook, "subsessions-hook", while_closing=True)
        except SubsessionError:  # the engine is closed: the hook cannot run any more
            hook.close()

    async def _turns(self) -> str | None:
        client = self.engine.model_client
        # The head of the task goes to the writer before the first model call, so the file
        # exists while the session works; later lines follow with the engine's periodic flush.
        self.recorder.flush()
        for _ in range(self.max_turns):
            if self.subsessions.has_notices:
                self._deliver_notices()
            request = ModelRequest(
                session_id=self.session_id,
                model=self.model,
                instructions=self.instructions,
                items=tuple(self.history),
                tools=self.tool_specs(),
                fallback_models=self.profile.fallback_models if self.profile else (),
            )
            self.turns += 1
            response = await client.respond(request)
            answered = response.model or self.model
            if answered not in (self.model, self._answering_model):
                self.recorder.event({
                    "type": "background_event",
                    "message": f"model {self.model} did not answer; {answered} answered",
                })
            self._answering_model = answered
            self._count(response.usage)
            answer: str | None = None
            calls: list[Item] = []
            for item in response.output:
                problem = output_problem(item)
                if problem is not None:
                    raise ModelError(f"malformed model output ({problem}): {item!r:.200}")
                self.history.append(item)
                self.recorder.record("response_item", item)
                if is_assistant_message(item):
                    answer = message_text(item)
                    self.recorder.event({"type": "agent_message", "message": answer})
                    emit(self, "assistant.message", {"content": answer})
                elif item.get("type") == "function_call":
                    calls.append(item)
            if not calls:
                return answer
            if len(calls) == 1:
                outputs = [await self._call_tool(calls[0])]
            else:
                outputs = await asyncio.gather(*(self._call_tool(c) for c in calls))
            for output in outputs:
                self.history.append(output)
                self.recorder.record("response_item", output)
        raise MaxTurnsExceeded(self.max_turns)

    def _deliver_notices(self) -> None:
        """One developer message for each child that ended without being waited for."""
        for info in self.subsessions.take_notices():
            body = {"session_id": info.session_id, **info.outcome()}
            payload = orjson.dumps(body).decode()
            message = developer_message(
                f"<subsession_notification>{payload}</subsession_notification>"
            )
            self.history.append(message)
            self.recorder.record("response_item", message)

    def _count(self, usage: TokenUsage) -> None:
        before = self.token_usage
        total = self.token_usage = TokenUsage(
            before.input_tokens + usage.input_tokens, before.output_tokens + usage.output_tokens
        )
        info: dict[str, Any] = {
            "last_token_usage": usage.as_dict(), "total_token_usage": total.as_dict()
        }
        if self._answering_model is not None and self._answering_model != self.model:
            info["model"] = self._answering_model  # which model these tokens were spent on
        self.recorder.event({"type": "token_count", "info": info})

    async def _call_tool(self, call: Item) -> Item:
        """Run one function call; every failure becomes a failed output, never an exception."""
        call_id = str(call.get("call_id", ""))
        name = str(call.get("name", ""))
        self.tool_calls += 1
        emit(self, "tool.execution_start", {"tool_call_id": call_id, "tool_name": name,
                                            "arguments": call.get("arguments")})
        try:
            output = await self._dispatch(name, str(call.get("arguments", "")), call_id)
            success = True
        except Exception as exc:
            output, success = error_text(exc), False
        emit(self, "tool.execution_complete", {"tool_call_id": call_id, "tool_name": name,
                                               "success": success, "result": output})
        return function_call_output(call_id, output, success)

    async def _dispatch(self, name: str, arguments: str, call_id: str) -> str:
        dispatcher = self.engine.dispatcher
        tool = self._tools.get(name)
        builtin: Callable[[dict[str, Any]], Awaitable[str]] | None = None
        if tool is None:
            if name in subsession_tools.NAMES and self.allows(name):
                builtin = partial(self._subsession_tool, name, call_id)
            elif name == ask_user.NAME:  # the root's handler decides, whatever the allowlist
                builtin = self._ask_user
            else:  # denied by the allowlist, or never offered: no handler runs
                raise ToolNotSupported(name)
        return await dispatcher.call_tool(
            self, tool, name, parse_arguments(name, arguments), call_id, builtin
        )

    async def _subsession_tool(self, name: str, call_id: str, arguments: dict[str, Any]) -> str:
        return await subsession_tools.call_parsed(self, name, arguments, call_id)

    async def _ask_user(self, arguments: dict[str, Any]) -> str:
        check_arguments(ask_user.NAME, ask_user.SPEC["parameters"], arguments)
        return await self.engine.dispatcher.ask_user(
            self, arguments["question"], arguments.get("choices")
        )

    def child_config(self, profile: Profile) -> SessionConfig:
        """A child's config: the profile's instructions and model, our tools filtered, our cwd.

        Built-in tools are made anew for the child: bound to its non-interactive context.
        """
        model = self.model if profile.model == "inherit" else profile.model
        custom = [t for t in self.config.tools if t.name not in BUILTIN_TOOL_NAMES]
        builtins: tuple[Tool, ...] = ()
        context = self.child_tool_context()
        if context is not None:
            names = [t.name for t in self._tools.values() if t.name in BUILTIN_TOOL_NAMES]
            builtins = builtin_tools(context, names)
        return SessionConfig(
            model=model,
            instructions=profile.developer_instructions,
            tools=filter_tools((*custom, *builtins), profile.tools),
            cwd=self.cwd,
            max_depth=self.config.max_depth,
            max_children=self.config.max_children,
            max_turns=profile.max_turns,
            notify_on_child_end=self.config.notify_on_child_end,
        )


def _builtin_names(config: SessionConfig) -> tuple[str, ...] | None:
    chosen = config.builtin_tools
    return None if chosen is True else tuple(chosen or ())
