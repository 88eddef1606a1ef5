"""ChildBook, the base of `SubsessionManager`: what a parent knows of its children and what
it does to those that run (each child by id, oldest first, those that ended unseen; waits
and cancels). Spawning, the queue and endings are the manager's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from subsessions._core import waits
from subsessions.children import Cancelled, ChildInfo, ChildStatus, WaitResult
from subsessions.errors import BudgetExhausted, SessionBusy, UnknownSession

if TYPE_CHECKING:  # names only: sessions and children are made above
    from subsessions._core.conversation import Child, Conversation


class ChildBook:
    """The base of `SubsessionManager`: its children's records and what they answer."""

    __slots__ = ("_children", "_owner", "_unnoticed")

    def __init__(self, owner: Conversation) -> None:
        self._owner = owner
        self._children: dict[str, Child] = {}
        self._unnoticed: list[Child] = []  # ended children the parent was not told of yet

    def __repr__(self) -> str:
        counts = Counter(child.status.value for child in self._children.values())
        return f"<SubsessionManager of {self._owner.session_id} {dict(counts)}>"

    def _lookup(self, session_id: str) -> Child:
        record = self._children.get(session_id) if isinstance(session_id, str) else None
        if record is None:
            raise UnknownSession(str(session_id))
        return record

    def status(self, session_id: str) -> ChildStatus:
        """A child's state now (queued, pending, cancelling, done, failed or cancelled).

        Raises:
            UnknownSession: `session_id` is not a child of this session.
        """
        return self._lookup(session_id).status

    def info(self, session_id: str) -> ChildInfo:
        """A snapshot of a child: its state, result or error, usage and rollout.

        Raises:
            UnknownSession: `session_id` is not a child of this session.
        """
        return self._lookup(session_id).info()

    def children(self) -> list[ChildInfo]:
        """A snapshot of every child of this session (its own, not grandchildren), oldest
        first. A batch's children are not kept once their endings are journaled."""
        return [child.info() for child in self._children.values()]

    def forget(self, session_id: str) -> None:
        """Drop an ended child that nobody will ask about again (a batch's, once its ending
        is journaled): a million of them are not kept. Its rollout stays on disk."""
        record = self._lookup(session_id)
        if not record.settled:
            raise SessionBusy(session_id, "is running; only an ended child can be forgotten")
        del self._children[session_id]
        self._owner.runtime.dispatcher.forget_child(session_id)

    def running(self) -> list[str]:
        return [cid for cid, child in self._children.items() if not child.settled]

    @property
    def has_children(self) -> bool:
        return bool(self._children)

    @property
    def has_notices(self) -> bool:
        return bool(self._unnoticed)

    def take_notices(self) -> list[ChildInfo]:
        """Children that ended unseen since the last call; each is returned once."""
        notices = [r.info() for r in self._unnoticed if not r.waited]
        for record in self._unnoticed:
            record.waited = True
        self._unnoticed.clear()
        return notices

    def mark_seen(self, session_id: str) -> None:
        """The model learned how this child ended (e.g. from cancel_session): no notice."""
        self._lookup(session_id).waited = True

    # -- waiting ---------------------------------------------------------------------------
    def wait_child(
        self, session_id: str, timeout: float | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Wait for a child to end and return its answer.

        A wait that ends early (its timeout, or its caller cancelled) leaves the child
        running. Every error is raised when the returned coroutine is awaited.

        Args:
            session_id: the child's id.
            timeout: seconds to wait, at most an hour (a longer one is cut to an hour).
                None: wait until it ends; 0 or less: do not wait.

        Returns:
            Its last assistant message (None if it wrote none), or a typed child's
            validated value.

        Raises:
            UnknownSession: `session_id` is not a child of this session.
            InvalidArguments: `timeout` is not a number of seconds.
            ChildNotFinished: `timeout` is 0 or less and the child still runs.
            ChildTimeout: the timeout passed first. Also a `TimeoutError`.
            ChildFailed: the child ended with an error (its `error` says which).
            ChildCancelled: the child was cancelled.
        """
        return waits.wait_child(self._lookup, session_id, timeout)

    def wait_child_ms(
        self, session_id: str, timeout_ms: int | None
    ) -> Coroutine[Any, Any, Any]:
        """`wait_child` in milliseconds, as the `wait_session` tool takes it."""
        return waits.wait_child_ms(self._lookup, session_id, timeout_ms)

    async def wait_any(self, session_ids: list[str], timeout: float | None = None) -> WaitResult:
        """Wait until one of the named children has ended.

        Args:
            session_ids: the children's ids; an id that is no child of this session is
                reported in the result's `unknown`, not raised.
            timeout: seconds to wait, at most an hour. None: no limit; 0 or less: look
                without waiting.

        Returns:
            A snapshot of every named child of this session (all that ended by then
            included), with `timed_out` set if none had ended when the timeout passed.
            With no named child known it returns at once.

        Raises:
            InvalidArguments: `session_ids` is not a list of ids, or `timeout` is not a
                number of seconds.
        """
        return await waits.wait_many(self._children, session_ids, timeout, every=False)

    async def wait_all(self, session_ids: list[str], timeout: float | None = None) -> WaitResult:
        """Wait until every named child has ended, or the timeout passes.

        Args:
            session_ids: the children's ids; an id that is no child of this session is
                reported in the result's `unknown`, not raised.
            timeout: seconds to wait, at most an hour. None: no limit; 0 or less: look
                without waiting.

        Returns:
            A snapshot of every named child of this session, with `timed_out` set if some
            still ran when the timeout passed (they go on running).

        Raises:
            InvalidArguments: `session_ids` is not a list of ids, or `timeout` is not a
                number of seconds.
        """
        return await waits.wait_many(self._children, session_ids, timeout, every=True)

    # -- cancelling ------------------------------------------------------------------------
    async def cancel_child(self, session_id: str) -> bool:
        """Cancel a child (its own children first) and wait until it has ended.

        A queued child leaves the queue unstarted. Cancelling the caller leaves the
        cancel under way.

        Args:
            session_id: the child's id.

        Returns:
            True if it ended cancelled; False if it had already ended, or ended otherwise
            meanwhile.

        Raises:
            UnknownSession: `session_id` is not a child of this session.
        """
        record = self._lookup(session_id)
        if record.settled:
            return False
        record.cancel()
        await asyncio.shield(record.finished)  # a cancelled caller leaves the ending alone
        return isinstance(record.outcome, Cancelled)

    async def abort_all_children(self, budget: BudgetExhausted | None = None) -> None:
        """Cancel every running or queued child and wait until each has ended.

        Their endings are not reported to this session's model as notices.

        Args:
            budget: the budget stop to end them with (they end failed, with
                `budget exhausted: ...`). None: they end cancelled. Set by the engine;
                hosts leave it None.
        """
        pending = self.stop_all_children(budget)
        for child in pending:
            child.waited = True
        if pending:
            await asyncio.wait([child.finished for child in pending])

    async def outlast(self) -> None:
        """Until every running child has ended, without seeing them: their notices stay for
        the parent's next model call (`children_at_turn_end="wait"`)."""
        pending = [r.finished for r in self._children.values() if not r.settled]
        if pending:
            await asyncio.wait(pending)

    def stop_all_children(self, budget: BudgetExhausted | None) -> list[Child]:
        """Deliver a cancel (or a budget stop) to every running child; they end by
        themselves, each with its one ending."""
        pending = [child for child in self._children.values() if not child.settled]
        for child in pending:
            child.cancel(budget)
        return pending
