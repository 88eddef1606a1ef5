"""Conversation: what top-level sessions (`Session`) and children (`Child`) share: their
children, the edges of their tasks, their rollout's head and their listeners. A child is one
object, its life (`ChildLife`) and its conversation; only top-level sessions are `Session`s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from subsessions._core.child import ChildLife, Settle, settle_itself
from subsessions._core.kit import Kit, child_config
from subsessions._core.manager import SubsessionManager
from subsessions._core.origin import NEW, Origin, Phase
from subsessions._core.specs import heard
from subsessions._core.state import SessionState
from subsessions.budget import Budget
from subsessions.children import Ending
from subsessions.config import SessionConfig
from subsessions.errors import SessionBusy
from subsessions.events import EventHandler, EventStream
from subsessions.profiles import Profile
from subsessions.rollouts import records
from subsessions.rollouts.reader import read_rollout
from subsessions.tools import ToolContext
from subsessions.usage import Usage


class Conversation(SessionState):
    """One conversation, top-level or a child: see `Session` and `Child`."""

    __slots__ = ()

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

    def claim(self) -> bool:
        """The session is running a task from now on (refused if it is); whether it is its
        first."""
        if self._phase is Phase.RUNNING:
            raise SessionBusy(self.session_id)
        first = not self.started
        if self.released:
            self._reload()
        self.write_meta()
        self._phase = Phase.RUNNING
        return first

    # -- listeners --------------------------------------------------------------------------
    def on(self, handler: EventHandler) -> Callable[[], None]:
        """Call `handler` with each event of this session and its descendants."""
        return self.events.on(handler)

    def event_stream(self) -> EventStream:
        """This session's events (its descendants' included) from now until it closes.
        Only a stream being read can answer deferred tools; drop it or `aclose()` it to stop."""
        return self.events.stream()

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

    def new_child(self, session_id: str, kit: Kit, call_id: str, budget: Budget | None,
                  on_ended: Settle, withdraw: Callable[[], None] | None) -> Child:
        """What the manager asks for: a child, not started (`withdraw`: it waits queued)."""
        return Child(self, kit, session_id, call_id, budget, on_ended, withdraw)

    def hear(self, text: str) -> str:
        """A child's message, read before this session's next model call."""
        self.inbox.append(text)
        return "queued"

    def wake(self) -> None:
        """Its children ended unseen: only an idle top-level session starts a task for that
        (`Session.wake`); a child reads their notices at its next model call."""

    async def tell_parent(self, message: str) -> str:
        """`send_parent_message` from this child: how its parent took it."""
        parent = self.parent
        assert isinstance(parent, Conversation)
        return parent.hear(heard(self.session_id, message))

    # -- what applications ask of it -------------------------------------------------------
    def flush(self) -> None:
        """Hand what it has recorded to the rollout writer (the periodic flush would, a
        moment later): an application that reads the file next sees it."""
        self.recorder.flush()

    async def flush_durable(self) -> None:
        """Its recorded lines written to its rollout and synced (RolloutError if not)."""
        await self.recorder.flush_durable()

    # -- its rollout ------------------------------------------------------------------------
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


class Child(ChildLife["Child"], Conversation):
    """A child: its life in its parent (`ChildLife`) and its conversation, one object."""

    __slots__ = ("_finished", "ended_at", "on_ended", "outcome", "waited", "waiters",
                 "withdraw")

    def __init__(self, parent: Conversation, kit: Kit, session_id: str, call_id: str | None,
                 budget: Budget | None = None, on_ended: Settle = settle_itself,
                 withdraw: Callable[[], None] | None = None, *, origin: Origin = NEW,
                 source: str | dict[str, Any] = "subagent", outcome: Ending | None = None,
                 ended_at: float | None = None) -> None:
        self.on_ended = on_ended
        self.outcome = outcome  # known ended (resume)
        self.withdraw = withdraw
        self.ended_at = ended_at
        self.waiters = 0
        self.waited = False
        self._finished: asyncio.Future[None] | None = None
        super().__init__(parent.runtime, kit.config, parent=parent, kit=kit, call_id=call_id,
                         source=source, budget=budget, session_id=session_id, origin=origin)

    @classmethod
    def ended_earlier(cls, config: SessionConfig, origin: Origin,
                      parent: Conversation, profile: Profile, source: str | dict[str, Any],
                      outcome: Ending, ended_at: float | None, on_ended: Settle) -> Child:
        """A child that ended in an earlier run (resume): known, waitable, and run again
        (a follow-up) from its rollout."""
        assert origin.session_id is not None and origin.rollout_path is not None
        kit = Kit.of(config, profile, None, parent.tree, parent.depth + 1)
        child = cls(parent, kit, origin.session_id, None, None, on_ended, origin=origin,
                    source=source, outcome=outcome, ended_at=ended_at)
        child.release()  # run again, it reloads its history from its rollout
        return child

    def prepare_follow_up(self) -> None:
        """Before a new task of an ended child (send_message): it reads sent messages
        again (`restart` clears its stop)."""
        self.taking_messages = True

    def hand_over_head(self) -> None:
        """A spawned child's first lines to the writer, before its parent's line naming it."""
        self.write_meta()
        self.recorder.flush()

    def run_child(self, prompt: str) -> Coroutine[Any, Any, str | None]:
        """Its task as the one coroutine of its asyncio task, settling in its parent at its
        end (in process the task loop itself; elsewhere, `turns.settled` around it)."""
        return self.runtime.backend.run_child(self, prompt)

    def child_task(self, prompt: str) -> Awaitable[str | None]:
        """Its task on its backend, claimed as its own task runs its first line (`run_child`
        awaits it)."""
        return self.runtime.backend.run_task(self, prompt, self.claim())
