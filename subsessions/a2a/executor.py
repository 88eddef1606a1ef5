"""The SDK's two plug points: the `AgentExecutor` that runs a task as a session's task, and
the `RequestContextBuilder` that keeps each caller to its own contexts.

`execute` is called once for a new task (a new context, or a follow-up in one the caller
owns) and once for each answer to its question (`input-required`); `cancel` for
`tasks/cancel`. Both hand over to the task's `TaskRun`.
"""

from __future__ import annotations

import asyncio

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.tasks import TaskUpdater
from a2a.types import SendMessageRequest, Task
from a2a.utils.errors import TaskNotFoundError

from subsessions.a2a.callers import caller_of
from subsessions.a2a.contexts import Contexts
from subsessions.errors import SubsessionError, error_text
from subsessions.ids import new_session_id

SKILL_KEY = "skill"


class SessionIds(IDGenerator):
    """New contexts are named as sessions are (uuid7): the context id is the session id."""

    def generate(self, context: IDGeneratorContext) -> str:
        return new_session_id()


class OwnedContexts(SimpleRequestContextBuilder):
    """A message naming a context its caller did not create is `task not found` (the SDK's
    answer for another caller's task), before any task is made for it."""

    def __init__(self, contexts: Contexts) -> None:
        super().__init__(context_id_generator=SessionIds())
        self._contexts = contexts

    async def build(self, context: ServerCallContext, params: SendMessageRequest | None = None,
                    task_id: str | None = None, context_id: str | None = None,
                    task: Task | None = None) -> RequestContext:
        if task_id and not context_id:  # an answer naming only its task
            context_id = self._contexts.context_of(task_id)
        if context_id and not self._contexts.owns(caller_of(context), context_id):
            raise TaskNotFoundError(f"Context {context_id} not found")
        return await super().build(context, params, task_id, context_id, task)


class SessionsExecutor(AgentExecutor):
    def __init__(self, contexts: Contexts) -> None:
        self._contexts = contexts

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        text = context.get_user_input()
        run = self._contexts.run(task_id)
        if run is not None:  # the caller's next message on a task that asked
            run.answer(text)
            await run.updater.start_work()
            await run.pump()
            return
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None and context.message is not None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        try:
            if self._contexts.closing:
                raise SubsessionError("the server is shutting down")
            run = await self._contexts.start(caller_of(context.call_context), context_id,
                                             task_id, updater, text, _skill(context))
        except SubsessionError as exc:  # an empty prompt, a busy context, an unknown skill
            await updater.failed(updater.new_agent_message([new_text_part(error_text(exc))]))
            return
        await updater.start_work()
        await run.pump()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        run = self._contexts.run(context.task_id)
        if run is None:  # nothing runs it (it never started): just say so
            await TaskUpdater(event_queue, context.task_id or "",
                              context.context_id or "").cancel()
            return
        run.abort()
        if run.work is not None:
            await asyncio.wait((run.work,))
        await run.finish()


def _skill(context: RequestContext) -> str | None:
    """`metadata.skill` of the message (or of the request): a profile to run top-level."""
    message = context.message
    found = message.metadata[SKILL_KEY] if message is not None and (
        SKILL_KEY in message.metadata) else context.metadata.get(SKILL_KEY)
    return found if isinstance(found, str) and found else None
