"""Parallel and chained runs of children: ordinary children, spawned and waited for together."""

from __future__ import annotations

import time
from typing import Any, Protocol

from subsessions.children import ChildStatus, RunResult, RunStep, WaitResult, checked_seconds
from subsessions.errors import InvalidArguments, SubsessionError
from subsessions.profiles import Profile


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
