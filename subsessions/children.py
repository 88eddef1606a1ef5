"""What a parent knows of its children: states, snapshots, and the results of waits and runs."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

from attrs import define, frozen

from subsessions.errors import InvalidArguments
from subsessions.usage import Usage

MAX_WAIT_SECONDS = 3600.0


class ChildStatus(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@define
class Pending:
    task: asyncio.Task[str | None]


@frozen
class Done:
    result: str | None


@frozen
class Failed:
    error: str


@frozen
class Cancelled:
    pass


ChildState = Pending | Done | Failed | Cancelled
STATUS_OF = {Pending: ChildStatus.PENDING, Done: ChildStatus.DONE, Failed: ChildStatus.FAILED,
           Cancelled: ChildStatus.CANCELLED}


@frozen
class ChildInfo:
    """A snapshot of one child, for listings."""

    session_id: str
    session_type: str
    status: ChildStatus
    model: str
    result: str | None
    error: str | None
    started_at: float
    ended_at: float | None
    rollout_path: str
    usage: Usage
    answering_model: str  # `model`, or the fallback that answered for it

    @property
    def duration_ms(self) -> int | None:
        return None if self.ended_at is None else round((self.ended_at - self.started_at) * 1000)

    def outcome(self) -> dict[str, Any]:
        """The `{"status", "result"|"error"}` shape the wait tools report."""
        if self.status is ChildStatus.DONE:
            return {"status": "done", "result": self.result}
        if self.status is ChildStatus.FAILED:
            return {"status": "failed", "error": self.error}
        if self.status is ChildStatus.CANCELLED:
            return {"status": "cancelled", "error": "cancelled"}
        return {"status": "pending"}


@frozen
class RunStep:
    index: int
    child: ChildInfo | None  # None when the step could not even be spawned
    error: str | None = None  # why it could not be spawned

    def outcome(self) -> dict[str, Any]:
        if self.child is None:
            return {"status": "failed", "error": self.error}
        return {"session_id": self.child.session_id, "session_type": self.child.session_type,
                **self.child.outcome()}


@frozen
class RunResult:
    steps: list[RunStep]
    timed_out: bool
    failed_step: int | None  # chain: the step that stopped it

    @property
    def results(self) -> list[str | None]:
        return [s.child.result if s.child else None for s in self.steps]


@frozen
class WaitResult:
    """What `wait_any` / `wait_all` saw: every named child, and whether time ran out."""

    children: dict[str, ChildInfo]
    unknown: tuple[str, ...]
    timed_out: bool


def checked_seconds(target: str, timeout: float | None) -> float | None:
    """A caller's timeout in seconds, checked and clamped to an hour (None: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout != timeout:
        raise InvalidArguments(target, "timeout must be a number of seconds or None")
    return min(timeout, MAX_WAIT_SECONDS)
