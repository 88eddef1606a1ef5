"""A2A contexts as sessions: a `contextId` is the id of one top-level session its caller
created; each task in it is one task of that session (a follow-up on the same history).

The registry answers who owns a context (`owns`, the access rule) and which run a task
is (`run`). The `keep_open` most recently idle sessions stay open in the engine for quick
follow-ups; an older idle one (with no child running) is closed, its rollout kept, and a
follow-up resumes it from the rollout: many contexts cost a record each, not a session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from attrs import define, field

from subsessions._core.session import Session
from subsessions.a2a.runs import TaskRun
from subsessions.config import SessionConfig
from subsessions.engine.command_hooks import hooks_from_settings
from subsessions.engine.facade import Engine
from subsessions.engine.instructions import with_base_instructions
from subsessions.errors import SessionBusy, ToolNotSupported, UnknownSession
from subsessions.events import SessionEvent
from subsessions.settings import Settings

if TYPE_CHECKING:
    from a2a.server.tasks import TaskUpdater


@define(eq=False)
class Context:
    """One caller's context: its session, and the run of its current task."""

    context_id: str
    owner: str
    skill: str | None = None
    session: Session | None = None
    run: TaskRun | None = None
    off: Any = None  # removes the session's event listener
    released: bool = False  # its session was closed while idle: a follow-up resumes it
    lock: asyncio.Lock = field(factory=asyncio.Lock)  # its session opens or closes at a time

    async def ask(self, request: dict[str, Any]) -> str:
        """The session's `user_input_handler` (its children's questions too)."""
        run = self.run
        if run is None or run.ending is not None:
            raise ToolNotSupported("ask_user")
        return await run.ask(str(request.get("question", "")))

    def heard(self, event: SessionEvent) -> None:
        run = self.run
        if run is not None and run.ending is None:
            run.heard(event.type, event.data)


@define(eq=False)
class Contexts:
    """Every context of the server, by id, and every live run, by task id."""

    engine: Engine
    settings: Settings
    keep_open: int = 64
    _contexts: dict[str, Context] = field(factory=dict, init=False)
    _idle: OrderedDict[str, None] = field(factory=OrderedDict, init=False)
    _runs: dict[str, TaskRun] = field(factory=dict, init=False)
    _work: set[asyncio.Task[None]] = field(factory=set, init=False)
    closing: bool = field(default=False, init=False)

    def __repr__(self) -> str:
        return f"<Contexts {len(self._contexts)} contexts, {len(self._runs)} running>"

    def owns(self, owner: str, context_id: str) -> bool:
        context = self._contexts.get(context_id)
        return context is not None and context.owner == owner

    def context_of(self, task_id: str) -> str | None:
        run = self._runs.get(task_id)
        return None if run is None else run.session.session_id

    def run(self, task_id: str | None) -> TaskRun | None:
        return None if task_id is None else self._runs.get(task_id)

    async def start(self, owner: str, context_id: str, task_id: str, updater: TaskUpdater,
                    prompt: str, skill: str | None) -> TaskRun:
        """A new task in the context (opened now if new): the session runs `prompt`."""
        context = self._contexts.get(context_id)
        if context is None:
            context = self._contexts[context_id] = Context(context_id, owner)
        if context.owner != owner:  # the builder refused it already; never run it
            raise SessionBusy(context_id, "belongs to another caller")
        if context.run is not None and context.run.ending is None:
            raise SessionBusy(context_id, f"is running task {context.run.task_id}; send a "
                              "follow-up once it ends, or cancel it")
        self._idle.pop(context_id, None)
        await self._release_idle()  # before a new task: idle sessions beyond keep_open go
        async with context.lock:
            if context.session is None:
                context.session = await self._open(context, skill)
        task_run = TaskRun(context.session, task_id, updater)
        context.run = task_run
        self._runs[task_id] = task_run
        work = task_run.start(prompt)
        self._work.add(work)
        work.add_done_callback(lambda done: self._ended(task_id, done))
        return task_run

    async def _open(self, context: Context, skill: str | None) -> Session:
        settings = self.settings
        config = SessionConfig(
            max_depth=settings.max_depth, max_children=settings.max_children,
            max_queued=settings.max_queued, env_policy=settings.env_policy,
            hooks=hooks_from_settings(settings.command_hooks),
            user_input_handler=context.ask)
        try:
            if context.released:  # its history and instructions are its rollout's
                session = await self.engine.resume_session(context.context_id, config)
            else:
                config = with_base_instructions(config)
                context.skill = skill
                session = await self.engine.create_session(
                    config, source="exec", profile=skill, session_id=context.context_id)
        except BaseException:
            if not context.released:
                self._contexts.pop(context.context_id, None)
            raise
        context.off = session.on(context.heard)
        return session

    async def _release_idle(self) -> None:
        """Close the oldest idle sessions beyond `keep_open` (not one with a child running:
        closing it would cancel the child)."""
        for context_id in list(self._idle)[:max(0, len(self._idle) - self.keep_open)]:
            context = self._contexts[context_id]
            async with context.lock:
                session = context.session
                if (session is None or context_id not in self._idle
                        or session.subsessions.running() or self.closing):
                    continue
                del self._idle[context_id]
                if context.off is not None:
                    context.off()
                context.session, context.off, context.run = None, None, None
                context.released = True
                with contextlib.suppress(UnknownSession):
                    await self.engine.destroy_session(session.session_id)

    def _ended(self, task_id: str, work: asyncio.Task[None]) -> None:
        self._work.discard(work)
        run = self._runs.pop(task_id, None)
        if run is None or self.closing:
            return
        self._idle[run.session.session_id] = None

    async def cancel_all(self) -> None:
        """Every running task ends `canceled` (its tree's rollouts end as cancels), and
        says so to its caller, before the server stops."""
        self.closing = True
        runs = [run for run in self._runs.values() if run.ending is None]
        for run in runs:
            run.abort()
        works = [run.work for run in runs if run.work is not None]
        if works:
            await asyncio.wait(works)
        for run in runs:
            await run.finish()

    async def close(self) -> None:
        """What `cancel_all` left (nothing, normally) is cancelled; listeners go."""
        for work in list(self._work):
            work.cancel()
        if self._work:
            await asyncio.wait(list(self._work))
        for context in self._contexts.values():
            if context.off is not None:
                context.off()
