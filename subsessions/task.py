"""The task loop: one task of a session, from the user's prompt to exactly one ending.

Model turns, tool calls (through the session's router), notices of children that ended
unseen, token counts, the hosts' hooks around the task; and the one terminal record on
every path. The session keeps identity and state; this module is what a task does to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, Protocol

from subsessions.children import Stop
from subsessions.errors import (
    BudgetExhausted,
    MaxTurnsExceeded,
    ModelError,
    SubsessionError,
    error_text,
)
from subsessions.events import emit, listening
from subsessions.ids import new_session_id
from subsessions.items import (
    Item,
    developer_message,
    is_assistant_message,
    message_text,
    output_problem,
    user_message,
)
from subsessions.manager import SubsessionManager
from subsessions.meter import Meter
from subsessions.models.base import ModelRequest, ModelResponse, TokenUsage
from subsessions.rollouts import records
from subsessions.router import RouterHost, call_tool


class TaskHost(RouterHost, Protocol):
    """What a task needs of its session (and may change: history, counters)."""

    history: list[Item]
    turns: int
    token_usage: TokenUsage
    answered_by: str | None  # the model that answered last, when it was not `model`
    meter: Meter  # what it spent against its budget (and its ancestors')
    last_message: str | None  # its last assistant message so far
    inbox: list[str]  # messages sent to it while it runs (send_message)
    taking_messages: bool  # its task will read the inbox before another model call

    @property
    def spawned(self) -> SubsessionManager | None: ...  # its children, if it ever had any

    @property
    def source(self) -> str | dict[str, Any]: ...
    @property
    def instructions(self) -> str: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def sandbox_policy(self) -> dict[str, Any]: ...  # Codex's shape, for turn_context
    @property
    def stop(self) -> Stop | None: ...  # the first stop asked of this task
    @property
    def budget_stop(self) -> BudgetExhausted | None: ...  # its stop, if a budget's

    def task_begins(self) -> None: ...  # its task runs its first line
    def task_ended(self) -> None: ...  # its terminal record is written
    def claim_budget_stop(self, error: BudgetExhausted) -> None: ...  # it ends by itself


class InProcess:
    """The default backend: a session's task runs here, in this event loop."""

    def run_task(self, host: TaskHost, prompt: str, first: bool) -> Awaitable[str | None]:
        return run(host, prompt, first)

    async def aclose(self) -> None:
        return None


IN_PROCESS = InProcess()


async def run(host: TaskHost, prompt: str, first: bool) -> str | None:
    """Run one task; exactly one terminal record is written, however it ends."""
    if first:  # at its first task, where a listener (or parent) can see it
        emit(host.events, "session.start", {"session_id": host.session_id,
                                            "source": host.source})
    record = host.recorder
    approval = "never" if host.is_child else host.config.approval
    turn_id, started = new_session_id(), time.time()
    record.record("turn_context", records.turn_context(
        turn_id, host.cwd, approval, host.sandbox_policy, host.model))
    record.event(records.task_started(turn_id, started))
    # Exactly one ending, on every path: children are ended first (a cancelled task's
    # children, and any child's children, since nobody could wait for them any more), and
    # a cancel landing meanwhile makes it an abort.
    ending: list[dict[str, Any]] | None = None
    answer: str | None = None
    cancelled = False
    since = len(host.history)
    tracer = host.runtime.tracer
    traced = None if tracer is None else tracer.begin(host, prompt)  # its invoke_agent span
    host.task_begins()
    try:
        stop = host.stop
        if isinstance(stop, BudgetExhausted):  # stopped by a budget before its first line
            raise _fresh(stop)
        if stop is not None:  # cancelled before its first line
            raise asyncio.CancelledError
        if host.meter.active and not (first and host.is_child):  # (clamped at spawn)
            _check(host, host.meter.spent())
        if host.tree.config.hooks is not None:
            prompt = await _prompt_hooks(host, prompt, first)
        _tell(host, prompt)
        host.taking_messages = True
        try:
            answer = await _turns(host)
        finally:
            host.taking_messages = False
        ending = records.completed(turn_id, started, answer)
    except asyncio.CancelledError:
        stop = host.budget_stop
        if stop is not None and _budget_cancelled():
            ending = _budget_ending(turn_id, started, stop)
            raise _fresh(stop) from None
        cancelled = True
        raise
    except BudgetExhausted as exc:
        ending = _budget_ending(turn_id, started, exc)
        raise
    except Exception as exc:
        ending = records.failed(turn_id, started, error_text(exc), _last_answer(host, since))
        raise
    finally:
        if ending is None:  # torn down by something other than a cancel (a bug of ours)
            ending = records.interrupted(turn_id, started)
        try:
            family = host.spawned
            if family is not None and family.has_children and (
                    cancelled or host.is_child or _budget_limited(ending[-1])):
                await family.abort_all_children(
                    host.budget_stop if _budget_limited(ending[-1]) else None)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            if cancelled:
                ending = records.cancelled(turn_id, started, _cancelled_by(host))
            for event in ending:
                record.event(event)
            host.task_ended()
            if traced is not None:
                traced.end(host, ending[-1])
            _announce_end(host, ending[-1])
    return answer


def _tell(host: TaskHost, prompt: str) -> None:
    """A user message joins the history and the rollout."""
    message = user_message(prompt)
    host.history.append(message)
    host.recorder.record("response_item", message)
    host.recorder.event({"type": "user_message", "message": prompt})


def _fresh(stop: BudgetExhausted) -> BudgetExhausted:
    """Each task raises its own exception (a cascade shares one stop among many tasks)."""
    return BudgetExhausted(stop.kind, stop.limit)


def _budget_ending(turn_id: str, started: float, stop: BudgetExhausted) -> list[dict[str, Any]]:
    return records.budget_limited(turn_id, started, stop.kind, stop.limit, str(stop))


def _budget_limited(terminal: dict[str, Any]) -> bool:
    return terminal.get("reason") == "budget_limited"


def _budget_cancelled() -> bool:
    """Whether the cancel being handled is the budget's own (one delivered, none other):
    it then ends the task as a failure; any other cancel still wins as a cancel."""
    task = asyncio.current_task()
    return task is not None and task.uncancel() == 0


def _check(host: TaskHost, reached: tuple[Meter, BudgetExhausted] | None) -> None:
    """A budget limit was reached: the session whose limit it is stops (with its tree),
    and this task ends here, by itself, with the same error."""
    if reached is None:
        return
    meter, error = reached
    host.claim_budget_stop(error)
    if meter is not host.meter:
        meter.stop(error)
    raise _fresh(error)


def _cancelled_by(host: TaskHost) -> str:
    if host.runtime.closed:
        return "close"
    return "parent" if host.is_child else "host"


def _last_answer(host: TaskHost, since: int) -> str | None:
    """This task's last assistant message so far: a failed task's ending keeps it."""
    for item in reversed(host.history[since:]):
        if is_assistant_message(item):
            return message_text(item)
    return None


async def _prompt_hooks(host: TaskHost, prompt: str, first: bool) -> str:
    dispatcher = host.runtime.dispatcher
    if host.is_child and first:
        await dispatcher.invoke_hook(host, "on_session_start", {"source": "subsession"})
    changed = await dispatcher.invoke_hook(host, "on_user_prompt_submitted", {"prompt": prompt})
    if isinstance(changed, dict) and isinstance(changed.get("modifiedPrompt"), str):
        return str(changed["modifiedPrompt"])
    return prompt


def _announce_end(host: TaskHost, terminal: dict[str, Any]) -> None:
    failure: str | None = (terminal.get("error") or {}).get("message")
    if _budget_limited(terminal):
        failure = terminal["message"]
    kind = "error" if failure is not None else terminal["type"]
    if failure is not None:
        emit(host.events, "session.error", {"message": failure})
    else:
        emit(host.events, "session.idle", {"aborted": kind == "turn_aborted"})
    hooks = host.tree.config.hooks
    if hooks is None:
        return
    dispatcher = host.runtime.dispatcher
    if failure is not None and hooks.on_error_occurred is not None:
        _hook_later(host, dispatcher.invoke_hook(host, "on_error_occurred", {"error": failure}))
    if host.is_child and hooks.on_session_end is not None:
        _hook_later(host, dispatcher.invoke_hook(host, "on_session_end", {
            "reason": {"task_complete": "complete", "error": "error"}.get(kind, "abort"),
        }))


def _hook_later(host: TaskHost, hook: Any) -> None:
    """End-of-task hooks run beside the ending, never delaying or blocking it."""
    try:
        host.runtime.spawn_task(hook, "subsessions-hook", while_closing=True)
    except SubsessionError:  # the engine is closed: the hook cannot run any more
        hook.close()


async def _turns(host: TaskHost) -> str | None:
    client = host.runtime.model_client
    tracer = host.runtime.tracer
    recorder = host.recorder
    # The head of the task goes to the writer before the first model call, so the file
    # exists while the session works; later lines follow with the runtime's periodic flush.
    recorder.flush()
    tool_choice = host.config.tool_choice  # until a tool is called, then auto (so it can end)
    for _ in range(host.max_turns):
        family = host.spawned
        if family is not None and family.has_notices:
            _deliver_notices(host, family)
        while host.inbox:  # sent while it ran: read before this model call
            _tell(host, host.inbox.pop(0))
        request = ModelRequest(
            session_id=host.session_id,
            model=host.model,
            instructions=host.instructions,
            items=tuple(host.history),
            tools=host.kit.specs(),
            fallback_models=host.kit.fallback_models,
            tool_choice=tool_choice,
        )
        host.turns += 1
        responding = host.tree.respond(host, client, request)
        response: ModelResponse = await (responding if tracer is None
                                         else tracer.chat(host, request, responding))
        answered = response.model or host.model
        if answered not in (host.model, host.answered_by):
            recorder.event(records.background(
                f"model {host.model} did not answer; {answered} answered"
            ))
        host.answered_by = answered
        answer: str | None = None
        calls: list[Item] = []
        for item in response.output:
            problem = output_problem(item)
            if problem is not None:
                raise ModelError(f"malformed model output ({problem}): {item!r:.200}")
            host.history.append(item)
            recorder.record("response_item", item)
            if is_assistant_message(item):
                answer = host.last_message = message_text(item)
                recorder.event({"type": "agent_message", "message": answer})
                emit(host.events, "assistant.message", {"content": answer})
            elif item.get("type") == "function_call":
                calls.append(item)
        _count(host, response.usage)
        if host.meter.active and (reached := host.meter.charge(
                response.usage.total_tokens, bool(calls) or bool(host.inbox))) is not None:
            _check(host, reached)
        if not calls:
            if host.inbox:  # a message came while it answered: one more turn reads it
                continue
            return answer
        tool_choice = "auto"
        if len(calls) == 1:
            outputs = [await call_tool(host, calls[0])]
        else:
            outputs = await asyncio.gather(*(call_tool(host, c) for c in calls))
        for output in outputs:
            host.history.append(output)
            recorder.record("response_item", output)
    raise MaxTurnsExceeded(host.max_turns)


def _deliver_notices(host: TaskHost, family: SubsessionManager) -> None:
    """One developer message for each child that ended without being waited for."""
    for info in family.take_notices():
        message = developer_message(info.notice())
        host.history.append(message)
        host.recorder.record("response_item", message)


def _count(host: TaskHost, usage: TokenUsage) -> None:
    total = host.token_usage = host.token_usage + usage
    fallback = host.answered_by if host.answered_by != host.model else None
    host.recorder.event(records.token_count(usage.as_dict(), total.as_dict(), fallback))
    if host.is_child and listening(host.events):  # a host's live meter of each child
        emit(host.events, "subagent.usage", {
            "remote_session_id": host.session_id, "tool_call_id": host.call_id,
            "agent_name": host.agent_name, "last": usage.as_dict(),
            **host.usage().as_dict(),
        })
