"""run_child: one task of a child, from its first line to its settle in its parent.

As anyio's task handle records a task's outcome in the task's own wrapper, the child's
coroutine decides its ending where it catches it, and hands it to its parent in its own
`finally` once the ending is on disk: no done callback, and no second place deciding it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import partial
from typing import Protocol

from subsessions.children import CANCELLED, Done, Ending, Failed, on_disk
from subsessions.errors import error_text
from subsessions.rollouts.recorder import RolloutRecorder


class Settles(Protocol):
    """Where a child's ending goes once it is on disk (the child: its parent settles it)."""

    def written(self, outcome: Ending) -> None: ...


class ChildTask(Protocol):
    """What running a child's task needs of the child."""

    @property
    def recorder(self) -> RolloutRecorder: ...

    def child_task(self, prompt: str) -> Awaitable[str | None]: ...


async def run_child(child: ChildTask, prompt: str, record: Settles) -> str | None:
    """Run the child's task (its backend's coroutine, awaited in this frame); its `record`
    gets its ending once that is in its rollout (a result that never reached the disk
    fails)."""
    outcome: Ending = CANCELLED
    try:
        result = await child.child_task(prompt)
        outcome = Done(result)
        return result
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        outcome = Failed(error_text(exc))
        raise
    finally:
        settle_when_written(child.recorder, record, outcome)


def settle_when_written(recorder: RolloutRecorder, record: Settles, outcome: Ending) -> None:
    """`record` gets `outcome` once what `recorder` holds is on disk (a result that never
    reached the disk fails)."""
    written = partial(_settle, record, outcome)
    try:
        recorder.flush_then(written)
    except RuntimeError:  # the writer is closed: nothing more can reach the disk
        written(None)


def _settle(record: Settles, outcome: Ending, unwritten: Exception | None) -> None:
    record.written(on_disk(outcome, unwritten))
