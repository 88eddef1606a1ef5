"""Waiting on children: one (with the wait tools' timeout rules), the first of many, or all.

A waiter never cancels what it waits on: a cancelled wait leaves the child and its ending
alone. Every error (an unknown id, a bad timeout) is raised when the wait is awaited.

Parallel and chained runs (`run_parallel`, `run_chain`): ordinary children, spawned and
waited for together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from subsessions.children import ChildStatus, RunResult, RunStep, WaitResult, checked_seconds
from subsessions.errors import ChildNotFinished, ChildTimeout, InvalidArguments, SubsessionError
from subsessions.profiles import Profile

if TYPE_CHECKING:  # a name only: children are made above
    from subsessions._core.conversation import Child


Lookup = Callable[[str], "Child"]


async def wait_child(lookup: Lookup, session_id: str, timeout: float | None) -> Any:
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


async def wait_child_ms(lookup: Lookup, session_id: str, timeout_ms: int | None) -> Any:
    """`wait_child` in milliseconds, as the `wait_session` tool takes it."""
    return await wait_child(lookup, session_id, None if timeout_ms is None else timeout_ms / 1000)


async def _wait_one(record: Child, session_id: str, seconds: float | None,
                    label_ms: int) -> Any:
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


class Spawner(Protocol):
    """What a run needs of a manager: spawning a child and waiting for children."""

    async def spawn_child(
        self, profile: str | Profile, prompt: str, *, call_id: str | None = None
    ) -> str: ...

    async def wait_all(
        self, session_ids: list[str], timeout: float | None = None
    ) -> WaitResult: ...


async def run_parallel(
    manager: Spawner,
    tasks: list[tuple[str | Profile, str]],
    timeout: float | None = None,
    *,
    call_id: str | None = None,
) -> RunResult:
    """Spawn every task at once; results in task order (pending ones on timeout)."""
    check_tasks("run_parallel", tasks)
    checked_seconds("run_parallel", timeout)
    ids: list[str | None] = []
    errors: dict[int, str] = {}
    for index, (profile, prompt) in enumerate(tasks):
        try:
            ids.append(
                await manager.spawn_child(profile, prompt, call_id=step_call(call_id, index))
            )
        except SubsessionError as exc:  # e.g. the limit: that step fails, the rest run
            ids.append(None)
            errors[index] = str(exc)
    started = [cid for cid in ids if cid is not None]
    waited = await manager.wait_all(started, timeout)
    steps = [
        RunStep(index, waited.children[cid] if cid else None, errors.get(index))
        for index, cid in enumerate(ids)
    ]
    return RunResult(steps, waited.timed_out, None)


async def run_chain(
    manager: Spawner,
    tasks: list[tuple[str | Profile, str]],
    timeout: float | None = None,
    *,
    call_id: str | None = None,
) -> RunResult:
    """Run tasks one after another, `{previous}` in a prompt being the last result;
    stop at the first step that does not complete."""
    check_tasks("run_chain", tasks)
    seconds = checked_seconds("run_chain", timeout)
    deadline = None if seconds is None else time.monotonic() + seconds
    previous = ""
    steps: list[RunStep] = []
    for index, (profile, prompt) in enumerate(tasks):
        try:
            cid = await manager.spawn_child(
                profile, prompt.replace("{previous}", previous), call_id=step_call(call_id, index)
            )
        except SubsessionError as exc:
            steps.append(RunStep(index, None, str(exc)))
            return RunResult(steps, False, index)
        left = None if deadline is None else deadline - time.monotonic()
        waited = await manager.wait_all([cid], max(left, 0.001) if left is not None else None)
        info = waited.children[cid]
        steps.append(RunStep(index, info, None))
        if waited.timed_out:
            return RunResult(steps, True, index)
        if info.status is not ChildStatus.DONE:
            return RunResult(steps, False, index)
        previous = info.result or ""
    return RunResult(steps, False, None)


def step_call(call_id: str | None, index: int) -> str | None:
    """The spawning call of one step of a run: its events nest under the run's tool call."""
    return None if call_id is None else f"{call_id}:{index}"


def check_tasks(target: str, tasks: Any) -> None:
    if isinstance(tasks, str | bytes) or not all(
        isinstance(t, tuple | list) and len(t) == 2 and isinstance(t[1], str) for t in tasks
    ):
        raise InvalidArguments(target, "tasks must be a list of (profile, prompt) pairs")
