"""ChildLife: the one owner of a child's life as its parent knows it: its stop, its outcome,
its place in the queue, who waits for it. A child is one object (`conversation.Child`):
this part of it is what its parent's book, its waiters and its stops read and change, so
those stand below the sessions; its counters (tokens, turns, tool calls, last message) are
its session state's own, where a run elsewhere lands them through `apply`.

The status is derived from these fields alone, and `finished` resolves at the one `settle`,
so waiters and the status never disagree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from subsessions._core.figures import Figures
from subsessions.budget import Budget
from subsessions.children import (
    CANCEL,
    PENDING,
    STATUS_OF,
    ChildInfo,
    ChildState,
    ChildStatus,
    Done,
    Ending,
    Failed,
    Stop,
)
from subsessions.errors import BudgetExhausted, ChildCancelled, ChildFailed, ChildNotFinished
from subsessions.models.base import TokenUsage
from subsessions.usage import Usage


class Body(Protocol):
    """What a child's life reads of its session side (the same object)."""

    @property
    def agent_name(self) -> str | None: ...
    @property
    def model(self) -> str: ...
    @property
    def rollout_path(self) -> str: ...
    @property
    def call_id(self) -> str | None: ...  # the call that spawned it
    @property
    def ended(self) -> bool: ...  # its task has written its ending
    @property
    def budget(self) -> Budget | None: ...
    taking_messages: bool  # its task will read sent messages before another model call

    def usage(self, include_children: bool = False) -> Usage: ...  # its own
    def cancel_task(self) -> None: ...  # deliver a cancel to its running task, if any
    def count_spent(self, spent: tuple[int, int]) -> None: ...  # its meter's (turns, tokens)


B = TypeVar("B", bound=Body, covariant=True)
Settle = Callable[["ChildLife[Any]", Ending], None]


def settle_itself(child: ChildLife[Any], outcome: Ending) -> None:
    child.settle(outcome)


class ChildLife(Generic[B]):
    """A child's life, mixed into the child (`conversation.Child` declares the slots).

    Invariants: `outcome` is set once, by `settle` (a second settle raises); `stop` is the
    first stop asked of its current task (first wins) and is cleared only by `restart`;
    `withdraw` is set while it waits in its tree's queue.
    """

    if not TYPE_CHECKING:  # the child's class declares them (mypy would refuse the writes)
        __slots__ = ()

    session_id: str
    on_ended: Settle  # how its parent settles it once its ending is on disk
    outcome: Ending | None
    withdraw: Callable[[], None] | None  # queued: a cancel takes it out of the queue
    ended_at: float | None
    stop: Stop | None
    waiters: int  # waits in progress: an ending they see needs no notice
    waited: bool  # the parent has been told how this child ended
    _finished: asyncio.Future[None] | None
    # its counters (its session state's): what `apply` sets
    begun: float
    token_usage: TokenUsage
    turns: int
    tool_calls: int
    answered_by: str | None
    last_message: str | None

    def __repr__(self) -> str:
        return f"<Child {self.session_id} {self.status.value}>"

    @property
    def body(self) -> B:
        """Its conversation: the same object, typed as its life and its parent's manager
        use it (`Body`, the manager's `Kid`)."""
        return cast(B, self)

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
                and self.body.taking_messages)

    # -- stops ------------------------------------------------------------------------------
    def request_stop(self, budget: BudgetExhausted | None = None, *,
                     deliver: bool = True) -> bool:
        """Stop its task (with `budget`: it ends `budget_limited`, else cancelled) unless a
        stop came first; False then, or once it has ended. Without `deliver` the task is
        ending so by itself. A task that has not run its first line yet ends there, so its
        own `finally` still writes its ending."""
        if self.stop is not None or self.outcome is not None or self.body.ended:
            return False
        self.stop = CANCEL if budget is None else budget
        if deliver:
            self.body.cancel_task()
        return True

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
        """Its task has written its ending: its parent settles it (`on_ended`)."""
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
            self.body.count_spent(figures.spent)

    # -- what it reports --------------------------------------------------------------------
    def result(self) -> str | None:
        """An ended child's last message, or the error of how it did not complete."""
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
        body, outcome = self.body, self.outcome
        ended = self.ended_at or time.time()
        usage = self.body.usage()
        data: dict[str, Any] = {
            "tool_call_id": body.call_id, "agent_name": body.agent_name,
            "remote_session_id": self.session_id, "model": body.model,
            "total_tokens": usage.total_tokens, "total_tool_calls": usage.tool_calls,
            "turns": usage.turns, "duration_ms": round((ended - self.begun) * 1000),
        }
        if not isinstance(outcome, Done):
            data["error"] = outcome.error if isinstance(outcome, Failed) else "cancelled"
            data["cancelled"] = not isinstance(outcome, Failed)
        return data

    def info(self) -> ChildInfo:
        outcome, body = self.outcome, self.body
        return ChildInfo(
            session_id=self.session_id,
            session_type=body.agent_name or "custom",
            status=self.status,
            model=body.model,
            # a failed child's last message stays readable (a budget stopped it mid-work)
            result=outcome.result if isinstance(outcome, Done) else (
                self.last_message if isinstance(outcome, Failed) else None),
            error=outcome.error if isinstance(outcome, Failed) else None,
            started_at=self.begun,
            ended_at=self.ended_at,
            rollout_path=body.rollout_path,
            usage=body.usage(),
            answering_model=self.answered_by or body.model,
            last_message=self.last_message,
            budget=body.budget,
        )
