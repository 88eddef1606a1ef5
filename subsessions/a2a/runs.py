"""One A2A task: a task of one engine session, and what its caller hears of it.

The session's task runs in a task of its own (`TaskRun.work`), not in the SDK's `execute`:
`execute` returns when the task needs input (`input-required`, the session's `ask_user`) and
is called again with the answer, while the session waits on its question. What the session
does reaches the run's outbox (events, questions, its end); the SDK's `execute` drains it
into status updates (`pump`). The terminal update is published once (`finish`), by whoever
sees the end first: the pump, a cancel, or the run itself when nobody pumps (it ended while
waiting for input).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from attrs import define, field

from subsessions._core.session import Session
from subsessions.errors import error_text

if TYPE_CHECKING:
    from a2a.server.tasks import TaskUpdater

log = logging.getLogger("subsessions.a2a")

# what a child's start and end say on the parent's A2A task
CHILD_EVENTS = ("subagent.started", "subagent.completed", "subagent.failed")
# events after which the tree's usage has moved: a status update carries it
USAGE_EVENTS = ("assistant.message", "subagent.usage", "tool.execution_complete")


@define(eq=False)
class Ending:
    """How the session's task ended: `completed` (its answer), `failed` (the error text) or
    `canceled`."""

    state: str
    text: str = ""


@define(eq=False)
class TaskRun:
    """The run of one A2A task on `session`; `updater` publishes on the task's queue."""

    session: Session
    task_id: str
    updater: TaskUpdater
    work: asyncio.Task[None] | None = field(default=None, init=False)
    ending: Ending | None = field(default=None, init=False)
    pumping: bool = field(default=False, init=False)
    _outbox: asyncio.Queue[tuple[str, Any]] = field(factory=asyncio.Queue, init=False)
    _question: asyncio.Future[str] | None = field(default=None, init=False)
    _finished: bool = field(default=False, init=False)
    _finish_lock: asyncio.Lock = field(factory=asyncio.Lock, init=False)

    def __repr__(self) -> str:
        state = self.ending.state if self.ending else ("asking" if self._question else "working")
        return f"<TaskRun {self.task_id} session={self.session.session_id} {state}>"

    # -- the session's side -----------------------------------------------------------------
    def start(self, prompt: str) -> asyncio.Task[None]:
        self.work = asyncio.get_running_loop().create_task(
            self._work(prompt), name=f"subsessions-a2a-{self.task_id}")
        return self.work

    async def _work(self, prompt: str) -> None:
        ending = Ending("canceled")
        try:
            answer = await self.session.send_and_wait(prompt)
            ending = Ending("completed", answer or "")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the server is closing: `close` publishes the ending
        except Exception as exc:  # the task failed: its text is the caller's
            ending = Ending("failed", error_text(exc))
        finally:
            self.ending = ending
            self._outbox.put_nowait(("end", ending))
        if not self.pumping:  # it ended while waiting for input: nobody else will say so
            await self.finish()

    async def ask(self, question: str) -> str:
        """The session's `ask_user`: the question goes to the caller; its answer comes back
        as the caller's next message on the task."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._outbox.put_nowait(("question", (question, future)))
        return await future

    def heard(self, kind: str, data: dict[str, Any]) -> None:
        """An event of the session's tree (an engine callback: never blocks)."""
        if kind in CHILD_EVENTS:
            self._outbox.put_nowait(("child", (kind, data)))
        elif kind in USAGE_EVENTS:
            self._outbox.put_nowait(("usage", None))

    # -- the caller's side ------------------------------------------------------------------
    def answer(self, text: str) -> bool:
        """The caller's next message answers the open question; False if none is open."""
        question, self._question = self._question, None
        if question is None or question.done():
            return False
        question.set_result(text)
        return True

    def abort(self) -> bool:
        """`tasks/cancel`: the session's task (its children first) is cancelled."""
        if self._question is not None and not self._question.done():
            self._question.cancel()
        return self.session.abort()

    async def pump(self) -> None:
        """Status updates until the task ends or asks (then `execute` returns)."""
        self.pumping = True
        try:
            while True:
                kind, value = await self._outbox.get()
                if kind == "usage" and not self._outbox.empty():
                    continue  # a newer figure follows: one update for the lot
                if kind == "usage":
                    await self._say_usage()
                elif kind == "child":
                    await self._say_child(*value)
                elif kind == "question":
                    question, future = value
                    if future.done():
                        continue  # asked of a task cancelled since
                    self._question = future
                    await self._publish("input-required", question)
                    return
                else:
                    await self.finish()
                    return
        finally:
            self.pumping = False

    async def finish(self) -> None:
        """The terminal update, once: the answer as artifact and message, the error, or
        the cancel."""
        async with self._finish_lock:
            if self._finished or self.ending is None:
                return
            self._finished = True
            ending = self.ending
            if ending.state == "completed":
                from a2a.helpers.proto_helpers import new_text_part

                await self.updater.add_artifact([new_text_part(ending.text)], name="answer",
                                                last_chunk=True)
            await self._publish(ending.state, ending.text or None)

    async def _say_usage(self) -> None:
        usage = self.session.usage(include_children=True).as_dict()
        await self._publish("working", None, {"usage": usage})

    async def _say_child(self, kind: str, data: dict[str, Any]) -> None:
        shown = ("remote_session_id", "agent_name", "error")
        child: dict[str, Any] = {key: data[key] for key in shown if key in data}
        name = child.get("agent_name", "")
        text = f"{kind} {name} {child.get('remote_session_id', '')}".strip()
        usage = self.session.usage(include_children=True).as_dict()
        await self._publish("working", text, {"event": kind, **child, "usage": usage})

    async def _publish(self, state: str, text: str | None,
                       metadata: dict[str, Any] | None = None) -> None:
        from a2a.helpers.proto_helpers import new_text_part
        from a2a.types import TaskState

        message = None
        if text is not None:
            message = self.updater.new_agent_message([new_text_part(text)], metadata=metadata)
        name = "TASK_STATE_" + state.upper().replace("-", "_")
        try:
            await self.updater.update_status(TaskState.Value(name), message=message,
                                             metadata=metadata)
        except RuntimeError as exc:  # a terminal state was published already
            log.debug("task %s: %s", self.task_id, exc)
