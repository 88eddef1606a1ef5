"""Session: one conversation as hosts hold it: its named constructors, its tasks (run in
`task.py`), its listeners and what applications ask of it; its state is `SessionState`'s."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from attrs import evolve

from subsessions import task
from subsessions.budget import Budget
from subsessions.child import Child
from subsessions.config import SessionConfig
from subsessions.errors import InvalidArguments, SessionBusy, SubsessionError
from subsessions.events import EventHandler, EventStream
from subsessions.handlers import parent_message
from subsessions.kit import Kit, child_config
from subsessions.ledger import TreeLedger
from subsessions.loop import Settles, run_child
from subsessions.manager import SubsessionManager
from subsessions.profiles import Profile
from subsessions.rollouts import records
from subsessions.rollouts.reader import read_rollout
from subsessions.runtime import Runtime
from subsessions.session_state import NEW, Origin, Phase, SessionState
from subsessions.tools import ToolContext
from subsessions.usage import Usage

log = logging.getLogger("subsessions")


class Session(SessionState):
    """One conversation. Create top-level ones with `Engine.create_session`."""

    __slots__ = ()

    # -- the named constructors ---------------------------------------------------------------
    @classmethod
    def new(cls, runtime: Runtime, config: SessionConfig, *, profile: Profile | None = None,
            source: str | dict[str, Any] = "exec", session_id: str | None = None,
            origin: Origin = NEW) -> Session:
        """A new top-level session (`session_id`: a host's own id for it; a fork's `origin`
        names what it starts from)."""
        if session_id is not None:
            origin = evolve(origin, session_id=session_id)
        return cls(runtime, config, profile=profile, source=source, origin=origin)

    @classmethod
    def resumed(cls, runtime: Runtime, config: SessionConfig, origin: Origin, *,
                source: str | dict[str, Any] = "exec", parent: Session | None = None,
                profile: Profile | None = None, life: Child[Any] | None = None) -> Session:
        """A session whose rollout exists (`origin.rollout_path`): a resumed top-level
        session, or (with `parent`) the body of its child `life` that ended in an earlier
        run."""
        return cls(runtime, config, parent=parent, profile=profile, source=source,
                   origin=origin, life=life)

    @classmethod
    def stand_in(cls, runtime: Runtime, config: SessionConfig, session_id: str,
                 ledger: TreeLedger) -> Session:
        """A top-level session of another process, standing in for it where some of its
        children run (a Ray shard): it writes nothing and never runs a task; its tree is
        counted by that process through `ledger`."""
        return cls(runtime, config, origin=Origin(session_id, os.devnull, ledger=ledger))

    @property
    def subsessions(self) -> SubsessionManager:
        """Its children. Made on first use: most children never have any."""
        extras = self.extras
        manager = extras.subsessions
        if manager is None:
            manager = extras.subsessions = SubsessionManager(self)
        return manager

    # -- its counters from elsewhere, and the edges of its tasks ---------------------------
    def remote_usage(self, session_id: str) -> Usage:
        """What a descendant run by another process reported so far (nothing: zeros)."""
        elsewhere = None if self._extras is None else self._extras.elsewhere
        known = None if elsewhere is None else elsewhere.get(session_id)
        return known or Usage()

    def count_remote(self, session_id: str, usage: Usage) -> None:
        """A descendant run by another process reports its usage (it replaces the last)."""
        extras = self.extras
        if extras.elsewhere is None:
            extras.elsewhere = {}
        extras.elsewhere[session_id] = usage

    def task_begins(self) -> None:
        self._task = asyncio.current_task()
        if self.parent is None:
            self.tree.root_busy(True)
        elif self._meter is not None:
            self._meter.arm()

    def task_ended(self) -> None:
        self._task = None
        if self.parent is not None:
            self._phase = Phase.ENDED
            if self._meter is not None:
                self._meter.disarm()
        else:
            self.tree.root_busy(False)

    def prepare_follow_up(self) -> None:
        """Before a new task of an ended child (send_message): it reads sent messages
        again (its record's `restart` clears its stop)."""
        self.taking_messages = True

    # -- listeners and host answers ---------------------------------------------------------
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
        return self.runtime.dispatcher.answer(self, request_id, result, error)

    # -- children ---------------------------------------------------------------------------
    def child_tool_context(self) -> ToolContext | None:
        """This session's workspace and policies as its children get them (built once)."""
        if self.tool_context is None:
            return None
        extras = self.extras
        if extras.child_context is None:
            extras.child_context = self.tool_context.for_child()
        return extras.child_context

    def child_config(self, profile: Profile) -> SessionConfig:
        """A child's config (`kit.child_config`)."""
        return child_config(self.kit, profile, self.model, self.cwd, self.child_tool_context())

    def new_child(self, life: Child[Any], kit: Kit, call_id: str,
                  budget: Budget | None = None) -> Session:
        """What the manager asks for: the body of the child `life`, not started."""
        return Session(self.runtime, kit.config, parent=self, kit=kit, call_id=call_id,
                       source="subagent", budget=budget, life=life)

    def hand_over_head(self) -> None:
        """A spawned child's first lines to the writer, before its parent's line naming it."""
        self.write_meta()
        self.recorder.flush()

    # -- what applications ask of it -------------------------------------------------------
    def flush(self) -> None:
        """Hand what it has recorded to the rollout writer (the periodic flush would, a
        moment later): an application that reads the file next sees it."""
        self.recorder.flush()

    async def flush_durable(self) -> None:
        """Its recorded lines written to its rollout and synced (RolloutError if not)."""
        await self.recorder.flush_durable()

    def abort(self) -> bool:
        """Cancel its running task (each aborts its own children first); whether one ran."""
        return bool(self.runtime.cancel_top_tasks(self.session_id))

    # -- the task loop ----------------------------------------------------------------------
    async def send_and_wait(self, prompt: str, timeout: float | None = None) -> str | None:
        """Run one task to TaskComplete and return the last assistant message.

        With `timeout` (seconds), stop waiting after it with `StillRunning` (a
        `TimeoutError`): the task goes on, as with the Copilot SDKs' `send_and_wait(timeout=)`;
        its end is the `session.idle` event, its answer is in the events and the rollout.
        """
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, int | float)
                                    or not 0 < timeout < math.inf):
            raise InvalidArguments("send_and_wait", "timeout must be a positive number of "
                                   "seconds, or None")
        return await self.runtime.run_owned(self.run_task(prompt), self.session_id, timeout)

    def run_child(self, prompt: str, settles: Settles) -> Coroutine[Any, Any, str | None]:
        """A child's task as the one coroutine of its asyncio task, settling in its parent
        (`settles`) at its end: in process the task loop itself; on another backend,
        `loop.run_child` around the backend's task."""
        if self.runtime.backend is None:
            return task.run(self, prompt, None, settles)
        return run_child(self, prompt, settles)

    def child_task(self, prompt: str) -> Awaitable[str | None]:
        """A child's task, claimed as its own task runs its first line (`run_child` awaits
        it): its backend's coroutine, without a frame of the session's."""
        return (self.runtime.backend or task.IN_PROCESS).run_task(self, prompt, self._claim())

    async def run_task(self, prompt: str, first: bool | None = None) -> str | None:
        """One task of a top-level session (or a shard's child), claimed here unless the
        caller claimed it (`first` known: a woken task)."""
        if first is None:
            if not isinstance(prompt, str) or not prompt.strip():
                raise InvalidArguments("send_and_wait", "prompt must be a non-empty string")
            first = self._claim()
        try:
            return await (self.runtime.backend or task.IN_PROCESS).run_task(self, prompt, first)
        finally:
            if self._phase is Phase.RUNNING:
                self._phase = Phase.IDLE
            if self.parent is None:  # a child's flush is awaited by its manager instead
                self.wake()
                await self.recorder.flush_durable()

    def claim(self) -> bool:
        """The session is running a task from now on (refused if it is); whether it is its
        first."""
        return self._claim()

    def _claim(self) -> bool:
        """The session is running a task from now on (refused if it is); whether it is its
        first."""
        if self._phase is Phase.RUNNING:
            raise SessionBusy(self.session_id)
        first = not self.started
        if self.parent is None:
            self._stop = None  # a top-level session's earlier task ended by a budget
        if self.released:
            self._reload()
        self.write_meta()
        self._phase = Phase.RUNNING
        return first

    def wake(self) -> None:
        """`wake_on_child_end`: children ended unseen while this top-level session is idle,
        so a task starts whose input is their completion notices (a host never polls)."""
        if (not self._wakes(self.config.wake_on_child_end)
                or self.spawned is None or not self.subsessions.has_notices):
            return
        notices = "\n".join(info.notice() for info in self.subsessions.take_notices())
        if notices:  # else every one of them was seen meanwhile
            self._start_woken(notices)

    def _wakes(self, asked: bool) -> bool:
        return (asked and self.parent is None and self._phase is not Phase.RUNNING
                and not self.runtime.closed and self.runtime.registered(self.session_id))

    def _start_woken(self, prompt: str) -> None:
        first = self._claim()
        self.runtime.spawn_task(self._woken(first, prompt), f"subsessions-wake-{self.session_id}")

    async def tell_parent(self, message: str) -> str:
        """`send_parent_message` from this child: how its parent took it."""
        parent = self.parent
        assert isinstance(parent, Session)
        return parent.hear(parent_message.heard(self.session_id, message))

    def hear(self, text: str) -> str:
        """A child's message: read before this session's next model call ("queued"), or,
        idle and top-level with `wake_on_child_end` or `wake_on_message`, the prompt of a
        task started now ("started")."""
        config = self.config
        if self._wakes(config.wake_on_child_end or config.wake_on_message):
            self._start_woken(text)
            return "started"
        self.inbox.append(text)
        return "queued"

    async def _woken(self, first: bool, notices: str) -> None:
        try:
            await self.run_task(notices, first)
        except SubsessionError as exc:  # its ending is in the rollout and the events
            log.info("task woken by a child's ending failed: %s", exc)

    def release(self) -> None:
        """Drop what only a task needs (history, tools) once a child has ended and its rollout
        is written: a long-lived parent of many children must not hold every transcript."""
        self.history = []
        if self._extras is not None:
            self._extras.child_context = None
        self._phase = Phase.RELEASED

    def _reload(self) -> None:
        """Before a released child runs again: its history from its rollout."""
        self.history = read_rollout(self.recorder.path).response_items()
        self._phase = Phase.IDLE

    def note(self, message: str) -> None:
        """A background event for the rollout, kept until its session_meta comes first."""
        event = records.background(message)
        if self.wrote_meta:
            self.recorder.event(event)
        else:
            self.extras.notes += (event,)

    def write_meta(self) -> None:
        if self._phase is not Phase.NEW:
            return
        self._phase = Phase.OPEN
        self.recorder.record("session_meta", records.session_meta(
            self.session_id, cwd=self.cwd, source=self.source, model=self.model,
            model_provider=self.runtime.model_provider, instructions=self.instructions,
            session_type=self.profile.name if self.profile is not None else None,
            forked_from=self.forked_from,
            spawn=None if self.parent is None else {
                "parent": self.parent.session_id, "depth": self.depth, "call_id": self.call_id},
        ))
        if self._extras is not None:
            for note in self._extras.notes:
                self.recorder.event(note)
            self._extras.notes = ()
