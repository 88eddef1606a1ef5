"""Waiting on children: one (with the wait tools' timeout rules), the first of many, or all.

A waiter never cancels what it waits on: a cancelled wait leaves the child and its ending
alone. Every error (an unknown id, a bad timeout) is raised when the wait is awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from subsessions.children import WaitResult, checked_seconds
from subsessions.errors import ChildNotFinished, ChildTimeout, InvalidArguments

if TYPE_CHECKING:  # a name only: children are made above
    from subsessions._core.conversation import Child

Lookup = Callable[[str], "Child"]


async def wait_child(lookup: Lookup, session_id: str, timeout: float | None) -> str | None:
    """The child's last assistant message. `None` waits forever, `<= 0` does not wait; a
    timeout names the clamped wait in whole milliseconds."""
    record = lookup(session_id)
    if timeout is None:  # `gather(wait_child(...))` over thousands: no wait set
        if not record.settled:
            record.waiters += 1
            try:
                await asyncio.shield(record.finished)
            finally:
                record.waiters -= 1
        record.waited = True
        return record.result()
    seconds = checked_seconds("wait_child", timeout)
    label = 0 if seconds is None or seconds <= 0 else max(1, round(seconds * 1000))
    return await _wait_one(record, session_id, seconds, label)


async def wait_child_ms(lookup: Lookup, session_id: str, timeout_ms: int | None) -> str | None:
    """`wait_child` in milliseconds, as the `wait_session` tool takes it."""
    return await wait_child(lookup, session_id, None if timeout_ms is None else timeout_ms / 1000)


async def _wait_one(record: Child, session_id: str, seconds: float | None,
                    label_ms: int) -> str | None:
    if not record.settled:
        if seconds is not None and seconds <= 0:
            raise ChildNotFinished(session_id)
        await wait_for([record], seconds, every=True)
        if not record.settled:
            raise ChildTimeout(session_id, label_ms)
    record.waited = True
    return record.result()


async def wait_many(children: Mapping[str, Child], session_ids: list[str],
                    timeout: float | None, *, every: bool) -> WaitResult:
    """Once one (or every one) of the named children has ended, or at the timeout."""
    if isinstance(session_ids, str) or not all(isinstance(i, str) for i in session_ids):
        raise InvalidArguments("wait_any/wait_all", "session_ids must be a list of ids")
    seconds = checked_seconds("wait_any/wait_all", timeout)
    named = dict.fromkeys(session_ids)
    known = {i: children[i] for i in named if i in children}
    unknown = tuple(i for i in named if i not in children)
    records = list(known.values())
    await wait_for(records, seconds, every=every)
    ended = [r for r in records if r.settled]
    for record in ended:
        record.waited = True
    satisfied = len(ended) == len(records) if every else bool(ended) or not records
    return WaitResult(
        children={cid: r.info() for cid, r in known.items()},
        unknown=unknown,
        timed_out=not satisfied,
    )


async def wait_for(records: Sequence[Child], seconds: float | None, *,
                   every: bool) -> None:
    """Wait for the first (or every) one of `records` to settle, or for the timeout."""
    pending = [r.finished for r in records if not r.settled]
    if not pending or (seconds is not None and seconds <= 0):
        return
    if not every and len(pending) < len(records):
        return  # one has ended already
    for record in records:
        record.waiters += 1
    try:
        when = asyncio.ALL_COMPLETED if every else asyncio.FIRST_COMPLETED
        await asyncio.wait(pending, timeout=seconds, return_when=when)
    finally:
        for record in records:
            record.waiters -= 1
