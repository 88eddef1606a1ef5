"""Conversation: what top-level sessions (`Session`) and children (`Child`) share: their
children, the edges of their tasks, their rollout's head and their listeners. A child is one
object, its life in its parent and its conversation; only top-level sessions are `Session`s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from subsessions._core.figures import Figures
from subsessions._core.kit import Kit, child_config
from subsessions._core.manager import SubsessionManager
from subsessions._core.origin import NEW, Origin, Phase
from subsessions._core.specs import heard
from subsessions._core.state import SessionState
from subsessions.budget import Budget
from subsessions.children import (
    PENDING,
    STATUS_OF,
    Cancelled,
    ChildInfo,
    ChildState,
    ChildStatus,
    Done,
    Ending,
    Failed,
)
from subsessions.config import SessionConfig
from subsessions.errors import (
    BudgetExhausted,
    ChildCancelled,
    ChildFailed,
    ChildNotFinished,
    EngineClosed,
    SessionBusy,
)
from subsessions.events import EventHandler, EventStream
from subsessions.profiles import Profile
from subsessions.rollouts import records
from subsessions.rollouts.reader import read_rollout
from subsessions.tools import ToolContext, worktrees
from subsessions.tools.worktrees import Worktree
from subsessions.usage import Usage

Settle = Callable[["Child", Ending], None]  # how a parent settles a child whose ending is on disk


def settle_itself(child: Child, outcome: Ending) -> None:
    child.settle(outcome)


class Conversation(SessionState):
    """One conversation, top-level or a child: see `Session` and `Child`."""

    __slots__ = ()

    @property
    def subsessions(self) -> SubsessionManager:
        """Its children: spawn, wait for, message and cancel them here."""
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
        """Call `handler` with each event of this session and its descendants.

        Args:
            handler: called with each `SessionEvent` as it happens, in the engine's event
                loop, so it must not block; an exception it raises is logged and ignored.

        Returns:
            A function that unsubscribes `handler`.
        """
        return self.events.on(handler)

    def event_stream(self) -> EventStream:
        """This session's events (its descendants' included) from now until it closes.

        Iterate it with `async for`; it ends when the session is destroyed or the engine
        closes. A stream counts as a host that can answer deferred tools only once it is
        being read (a deferred call nobody could answer fails at once). Drop it or
        `aclose()` it to stop listening.

        Returns:
            A new stream of `SessionEvent`s.
        """
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
                  on_ended: Settle, withdraw: Callable[[], None] | None,
                  origin: Origin = NEW) -> Child:
        """What the manager asks for: a child, not started (`withdraw`: it waits queued;
        `origin`: a fork's copied history)."""
        return Child(self, kit, session_id, call_id, budget, on_ended, withdraw, origin=origin)

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
            model_provider=self.runtime.provider_of(self.model), instructions=self.instructions,
            session_type=self.profile.name if self.profile is not None else None,
            forked_from=self.forked_from,
            spawn=None if self.parent is None else {
                "parent": self.parent.session_id, "depth": self.depth, "call_id": self.call_id},
        ))
        if self._extras is not None:
            if self._extras.forked_from is not None:  # a fork's copied items come first
                for item in self.history:
                    self.recorder.record("response_item", item)
            for note in self._extras.notes:
                self.recorder.event(note)
            self._extras.notes = ()


class Child(Conversation):
    """A child: its conversation and its life as its parent knows it (its stop, its one
    outcome, its place in the queue, who waits for it), one object.

    Invariants: `outcome` is set once, by `settle` (a second settle raises); `stop` is the
    first stop asked of its current task (first wins) and is cleared only by `restart`;
    `withdraw` is set while it waits in its tree's queue. The status is derived from these
    fields alone, and `finished` resolves at the one `settle`, so waiters and the status
    never disagree. Its counters (tokens, turns, tool calls, last message) are its session
    state's own; a run elsewhere lands them through `apply`.
    """

    __slots__ = ("_finished", "ended_at", "on_ended", "outcome", "waited", "waiters",
                 "withdraw", "worktree", "worktree_removed")

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
        self.worktree = origin.worktree  # a worktree child's (`tools.worktrees`)
        self.worktree_removed = False  # unchanged at its end: made again for a follow-up
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

    def __repr__(self) -> str:
        return f"<Child {self.session_id} {self.status.value}>"

    # -- state ------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        return self.outcome is not None

    @property
    def finished(self) -> asyncio.Future[None]:
        """Resolved at its settle (made for the first waiter: most children have none)."""
        future = self._finished
        if future is None:
            future = self._finished = asyncio.get_running_loop().create_future()
            if self.outcome is not None:
                future.set_result(None)
        return future

    @property
    def state(self) -> ChildState:
        return PENDING if self.outcome is None else self.outcome

    @property
    def status(self) -> ChildStatus:
        outcome = self.outcome
        if outcome is not None:
            return STATUS_OF[type(outcome)]
        if self.withdraw is not None:
            return ChildStatus.QUEUED
        return ChildStatus.PENDING if self.stop is None else ChildStatus.CANCELLING

    @property
    def accepting(self) -> bool:
        """Running and not ending: a message sent now is read before its next model call."""
        return (self.outcome is None and self.withdraw is None and self.stop is None
                and self.taking_messages)

    # -- stops ------------------------------------------------------------------------------
    @property
    def past_stopping(self) -> bool:
        """Settled, or its task has written its ending: a stop asked now changes nothing."""
        return self.outcome is not None or self.ended

    def cancel(self, budget: BudgetExhausted | None = None, *, deliver: bool = True) -> bool:
        """Stop it: out of the queue if it waits there, else `request_stop`; nothing once
        it has settled."""
        if self.withdraw is not None:
            self.withdraw()
            return True
        if self.outcome is not None:
            return False
        return self.request_stop(budget, deliver=deliver)

    # -- transitions ------------------------------------------------------------------------
    def dequeued(self) -> None:
        """Its turn in the queue came: it starts (pending)."""
        if self.withdraw is None:
            raise RuntimeError(f"child {self.session_id} is not queued")
        self.withdraw = None

    def restart(self) -> None:
        """An ended child runs a follow-up task: nothing of its last ending carries over."""
        if self.outcome is None:
            raise RuntimeError(f"child {self.session_id} is running")
        self.outcome = self.ended_at = self.stop = self._finished = None
        self.waited = False

    def written(self, outcome: Ending) -> None:
        """Its task has written its ending: its parent settles it (`on_ended`), a worktree
        child once its worktree is settled (removed if unchanged; a cancelled one's stays)."""
        if self.worktree is None or isinstance(outcome, Cancelled):
            self.on_ended(self, outcome)
            return
        try:
            self.runtime.spawn_task(self._leave_worktree(self.worktree, outcome),
                                    f"worktree-{self.session_id}", while_closing=True)
        except EngineClosed:
            self.on_ended(self, outcome)

    async def _leave_worktree(self, worktree: Worktree, outcome: Ending) -> None:
        try:
            self.worktree_removed = not await worktrees.settle(worktree)
        except OSError:  # git missing or hung: kept, as `info()` tells
            pass
        finally:
            self.on_ended(self, outcome)

    def settle(self, outcome: Ending) -> None:
        """Its one ending; a second raises (exactly one ending per child)."""
        if self.outcome is not None:
            raise RuntimeError(f"child {self.session_id} has ended already")
        self.outcome = outcome
        self.ended_at = time.time()
        self.withdraw = None
        if self._finished is not None:
            self._finished.set_result(None)

    def apply(self, figures: Figures) -> None:
        """The one place a run in another process (a Ray shard) lands: its counters, the
        model that answered, and what its meter counted."""
        self.token_usage = figures.token_usage
        self.turns = figures.turns
        self.tool_calls = figures.tool_calls
        self.answered_by = figures.answered_by
        if figures.spent is not None:
            self.count_spent(figures.spent)

    # -- what it reports --------------------------------------------------------------------
    def result(self) -> Any:
        """An ended child's last message (a typed child's value), or the error of how it
        did not complete."""
        outcome = self.outcome
        if isinstance(outcome, Done):
            return outcome.result
        if isinstance(outcome, Failed):
            raise ChildFailed(self.session_id, outcome.error)
        if outcome is not None:
            raise ChildCancelled(self.session_id)
        raise ChildNotFinished(self.session_id)

    def ending_data(self) -> dict[str, Any]:
        """The `subagent.completed` / `subagent.failed` payload: built only for listeners."""
        outcome = self.outcome
        ended = self.ended_at or time.time()
        usage = self.usage()
        data: dict[str, Any] = {
            "tool_call_id": self.call_id, "agent_name": self.agent_name,
            "remote_session_id": self.session_id, "model": self.model,
            "total_tokens": usage.total_tokens, "total_tool_calls": usage.tool_calls,
            "turns": usage.turns, "duration_ms": round((ended - self.begun) * 1000),
        }
        if not isinstance(outcome, Done):
            data["error"] = outcome.error if isinstance(outcome, Failed) else "cancelled"
            data["cancelled"] = not isinstance(outcome, Failed)
        return data

    def info(self) -> ChildInfo:
        outcome = self.outcome
        return ChildInfo(
            session_id=self.session_id,
            session_type=self.agent_name or "custom",
            status=self.status,
            model=self.model,
            # a failed child's last message stays readable (a budget stopped it mid-work)
            result=outcome.result if isinstance(outcome, Done) else (
                self.last_message if isinstance(outcome, Failed) else None),
            error=outcome.error if isinstance(outcome, Failed) else None,
            started_at=self.begun,
            ended_at=self.ended_at,
            rollout_path=self.rollout_path,
            usage=self.usage(),
            answering_model=self.answered_by or self.model,
            last_message=self.last_message,
            budget=self.budget,
            worktree=None if (tree := self.left_worktree) is None else tree.as_dict(),
        )

    @property
    def left_worktree(self) -> Worktree | None:
        """Its worktree while it exists."""
        return None if self.worktree_removed else self.worktree

    # -- its tasks -------------------------------------------------------------------------
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
