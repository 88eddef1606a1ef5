"""The task loop: one task of a session, from the user's prompt to exactly one ending.

`run` begins the task (`_begin`), runs its turns (model calls, and the tool calls they ask
for in `tool_calls.calls`, with notices of children that ended unseen, token counts and
budgets) and ends it (`_end`: the one terminal record on every path, the hosts' hooks).
A child's ending reaches its parent once it is on disk (`settle_when_written`), on both
backends. The session keeps identity and state; this module is what a task does to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from subsessions._core.conversation import Child, Conversation
from subsessions._core.hooks import announce_end, budget_limited, prompt_hooks, stop_blocked
from subsessions._core.tool_calls.calls import call_tool
from subsessions._core.turn_budget import budget_cancelled, budget_ending, check, fresh
from subsessions._core.turn_children import children_at_turn_end, deliver_notices
from subsessions._core.typed import REMINDER, Typed
from subsessions.children import CANCELLED, Done, Ending, Failed, on_disk
from subsessions.config import SUBMIT_RESULT
from subsessions.errors import (
    BudgetExhausted,
    MaxTurnsExceeded,
    ModelError,
    error_text,
)
from subsessions.events import emit
from subsessions.ids import new_session_id
from subsessions.items import (
    Item,
    is_assistant_message,
    message_text,
    output_problem,
    user_message,
)
from subsessions.models.base import ModelRequest, ModelResponse, TokenUsage
from subsessions.rollouts import records
from subsessions.rollouts.recorder import RolloutRecorder

if TYPE_CHECKING:  # the [otel] extra
    from subsessions.otel.tracing import TaskSpan


class Settles(Protocol):
    """Where a child's ending goes once it is on disk (the child: its parent settles it)."""

    def written(self, outcome: Ending) -> None: ...


class InProcess:
    """The default backend: a session's task runs here, in this event loop."""

    def run_task(self, host: Conversation, prompt: str, first: bool) -> Awaitable[str | None]:
        return run(host, prompt, first)

    def run_child(self, child: Child, prompt: str) -> Coroutine[Any, Any, str | None]:
        """The task loop itself, claimed at its first line and settling `child` in its
        parent from its own `finally`."""
        return run(child, prompt, None, child)

    async def aclose(self) -> None:
        return None


IN_PROCESS = InProcess()


async def run(host: Conversation, prompt: str, first: bool | None,
              settles: Settles | None = None) -> Any:
    """One task of `host`, in this one coroutine frame: `_begin`, the turns (a model call,
    then the tools it asks for, until it answers without asking for one), `_end`. Exactly
    one terminal record is written however it ends. A child's task (`settles`: the child
    itself) is claimed at its first line (`first` None) and settles in its parent from this
    frame's `finally`, its ending on disk. The turns stay in this frame: a frame of their own
    would weigh on every child held at its model call."""
    outcome: Ending = CANCELLED  # how it ended, as its parent records it (`settles`)
    try:
        if first is None:
            first = host.claim()
        turn_id, started = _head(host, first)
        ending: list[dict[str, Any]] | None = None
        answer: Any = None  # its last message; a typed child's validated value
        cancelled = False
        since = len(host.history)
        tracer = host.runtime.tracer
        traced = None if tracer is None else tracer.begin(host, prompt)  # its invoke_agent span
        host.task_begins()
        try:
            await _begin(host, prompt, first)
            host.taking_messages = True
            try:
                host.recorder.flush()  # the task's head reaches the file before the first call
                tool_choice = host.config.tool_choice  # then auto, once a tool was called
                blocks = 0  # its stop hook kept it going so often (a child's)
                typed = host.typed  # a typed child answers through submit_result
                for _ in range(host.max_turns):
                    request = _request(host, tool_choice, typed)
                    responding = host.tree.respond(host, host.runtime.model_client, request)
                    answer, calls = _answered(host, await (
                        responding if tracer is None else tracer.chat(host, request, responding)))
                    if not calls:  # done, unless a message came, its children are awaited,
                        if host.has_mail or await children_at_turn_end(host):  # or a hook
                            continue  # keeps a child going
                        if typed is not None and typed.turn_ended():  # (raises the 2nd time)
                            _tell(host, REMINDER)
                            tool_choice = SUBMIT_RESULT  # the reminded turn must deliver
                            continue
                        if host.is_child and host.tree.config.hooks is not None and (
                                reason := await stop_blocked(host, answer, blocks)) is not None:
                            blocks += 1
                            _tell(host, reason)
                            continue
                        break
                    tool_choice = "auto"  # (map: a closure over `host` is a cell a frame)
                    _took(host, [await call_tool(host, calls[0])] if len(calls) == 1 else
                          await asyncio.gather(*map(call_tool, repeat(host), calls)))
                    if typed is not None and (typed.submitted or typed.spent):
                        if not typed.submitted:
                            raise typed.failure()
                        answer = typed.value
                        break
                else:
                    raise MaxTurnsExceeded(host.max_turns)
            finally:
                host.taking_messages = False
            ending = records.completed(turn_id, started, answer if host.typed is None
                                       else orjson.dumps(answer).decode())
        except asyncio.CancelledError:
            stop = host.budget_stop
            if stop is not None and budget_cancelled():
                ending = budget_ending(turn_id, started, stop)
                raise fresh(stop) from None
            cancelled = True
            raise
        except BudgetExhausted as exc:
            ending = budget_ending(turn_id, started, exc)
            raise
        except Exception as exc:
            ending = records.failed(turn_id, started, error_text(exc), _last_answer(host, since))
            raise
        finally:  # torn down by something other than a cancel, it was interrupted (our bug)
            await _end(host, ending or records.interrupted(turn_id, started), cancelled,
                       (turn_id, started), traced)
        outcome = Done(answer)
        return answer
    except BaseException as exc:
        outcome = ending_of(exc)
        raise
    finally:
        if settles is not None:
            settle_when_written(host.recorder, settles, outcome)


async def settled(child: Child, task: Awaitable[str | None]) -> str | None:
    """A child's task run elsewhere (`task`, awaited in this frame): its parent gets its
    ending once that is on disk, as `run` settles a child run here."""
    outcome: Ending = CANCELLED
    try:
        result = await task
        outcome = Done(result)
        return result
    except BaseException as exc:
        outcome = ending_of(exc)
        raise
    finally:
        settle_when_written(child.recorder, child, outcome)


def ending_of(exc: BaseException) -> Ending:
    """How a child whose task raised `exc` ended, as its parent records it."""
    return CANCELLED if isinstance(exc, asyncio.CancelledError) else Failed(error_text(exc))


def settle_when_written(recorder: RolloutRecorder, record: Settles, outcome: Ending) -> None:
    """`record` gets `outcome` once what `recorder` holds is on disk (a result that never
    reached the disk fails)."""
    written = partial(_settle, record, outcome)
    try:
        recorder.flush_then(written)
    except RuntimeError:  # the writer is closed: nothing more can reach the disk
        written(None)


def _settle(record: Settles, outcome: Ending, unwritten: Exception | None) -> None:
    record.written(on_disk(outcome, unwritten))


def _head(host: Conversation, first: bool) -> tuple[str, float]:
    """A task's first records (its session's start at its first task): its turn's id, start."""
    if first and host.heard:  # where a listener (or its parent) can see it
        emit(host.events, "session.start", {"session_id": host.session_id, "source": host.source})
    approval = "never" if host.is_child else host.config.approval
    turn_id, started = new_session_id(), time.time()
    host.recorder.record("turn_context", records.turn_context(
        turn_id, host.cwd, approval, host.sandbox_policy, host.model))
    host.recorder.event(records.task_started(turn_id, started))
    return turn_id, started


async def _begin(host: Conversation, prompt: str, first: bool) -> None:
    """Before the first model call: a stop that came first ends the task, a budget already
    spent too; the host's prompt hooks may rewrite the prompt; messages its children sent
    while it was idle, then the prompt, join the history."""
    stop = host.stop
    if isinstance(stop, BudgetExhausted):  # stopped by a budget before its first line
        raise fresh(stop)
    if stop is not None:  # cancelled before its first line
        raise asyncio.CancelledError
    if host.metered and not (first and host.is_child):  # (clamped at spawn)
        check(host, host.meter.spent())
    if host.tree.config.hooks is not None:
        prompt = await prompt_hooks(host, prompt, first)
    while not host.is_child and host.has_mail:
        _tell(host, host.inbox.pop(0))
    _tell(host, prompt)


async def _end(host: Conversation, ending: list[dict[str, Any]], cancelled: bool,
               turn: tuple[str, float], traced: TaskSpan | None) -> None:
    """Its children end first (a cancelled task's, a budget-ended one's, and any child's,
    since nobody could wait for them any more); a cancel landing meanwhile makes the ending
    an abort. Then the terminal records, and what hears of its end (span, events, hooks)."""
    try:
        family = host.spawned
        limited = budget_limited(ending[-1])
        if family is not None and family.has_children and (
                cancelled or host.is_child or limited):
            await family.abort_all_children(host.budget_stop if limited else None)
    except asyncio.CancelledError:
        cancelled = True
        raise
    finally:
        if cancelled:
            ending = records.cancelled(*turn, _cancelled_by(host))
        for event in ending:
            host.recorder.event(event)
        host.task_ended()
        if traced is not None:
            traced.end(host, ending[-1])
        announce_end(host, ending[-1])


def _tell(host: Conversation, prompt: str) -> None:
    """A user message joins the history and the rollout."""
    message = user_message(prompt)
    host.history.append(message)
    host.recorder.record("response_item", message)
    host.recorder.event({"type": "user_message", "message": prompt})


def _cancelled_by(host: Conversation) -> str:
    if host.runtime.closed:
        return "close"
    return "parent" if host.is_child else "host"


def _last_answer(host: Conversation, since: int) -> str | None:
    """This task's last assistant message so far: a failed task's ending keeps it."""
    for item in reversed(host.history[since:]):
        if is_assistant_message(item):
            return message_text(item)
    return None


def _request(host: Conversation, tool_choice: Any, typed: Typed | None) -> ModelRequest:
    """The next model call: notices of children that ended unseen and messages sent
    meanwhile join the history first."""
    family = host.spawned
    if family is not None and family.has_notices:
        deliver_notices(host, family)
    while host.has_mail:  # sent while it ran: read before this model call
        _tell(host, host.inbox.pop(0))
    request = ModelRequest(
        session_id=host.session_id,
        model=host.model,
        instructions=host.instructions,
        items=tuple(host.history),
        tools=host.kit.specs() if typed is None else (*host.kit.specs(), typed.spec()),
        fallback_models=host.kit.fallback_models,
        tool_choice=tool_choice,
        reasoning_effort=host.kit.reasoning_effort,
        shared_items=host.copied,
    )
    host.turns += 1
    return request


def _answered(host: Conversation, response: ModelResponse) -> tuple[str | None, list[Item]]:
    """A model's answer joins the history and the rollout, and is counted (against its
    budget too): its last assistant message, and the function calls it asks for."""
    recorder = host.recorder
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
            if host.heard:
                emit(host.events, "assistant.message", {"content": answer})
        elif item.get("type") == "function_call":
            calls.append(item)
    _count(host, response.usage)
    if host.metered and (reached := host.meter.charge(
            response.usage.total_tokens, bool(calls) or host.has_mail)) is not None:
        check(host, reached)
    return answer, calls


def _took(host: Conversation, outputs: list[Item]) -> None:
    for output in outputs:
        host.history.append(output)
        host.recorder.record("response_item", output)


def _count(host: Conversation, usage: TokenUsage) -> None:
    total = host.token_usage = host.token_usage + usage
    fallback = host.answered_by if host.answered_by != host.model else None
    host.recorder.event(records.token_count(usage.as_dict(), total.as_dict(), fallback))
    if host.is_child and host.heard:  # a host's live meter of each child
        emit(host.events, "subagent.usage", {
            "remote_session_id": host.session_id, "tool_call_id": host.call_id,
            "agent_name": host.agent_name, "last": usage.as_dict(),
            **host.usage().as_dict(),
        })
