"""What a parent knows of its children: states, snapshots, and the results of waits and runs."""

from __future__ import annotations

import asyncio
import enum
import time
from typing import Any

import orjson
from attrs import frozen

from subsessions.budget import Budget
from subsessions.errors import (
    BudgetExhausted,
    InvalidArguments,
    error_text,
)
from subsessions.usage import Usage

MAX_TIMEOUT_MS = 3_600_000  # every wait is clamped to an hour: see checked_seconds
LAST_MESSAGE_CHARS = 500  # what list_sessions shows of a child's last message


class ChildStatus(enum.Enum):
    """A child's state; `word` is what the tools, MCP and the CLI show for it."""

    QUEUED = "queued"  # waiting for a place under max_children
    PENDING = "pending"
    CANCELLING = "cancelling"  # a cancel was delivered; the child is ending its own work
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def running(self) -> bool:
        """Not ended yet (queued, pending or cancelling)."""
        return self in (ChildStatus.QUEUED, ChildStatus.PENDING, ChildStatus.CANCELLING)

    @property
    def word(self) -> str:
        """What every surface shows (tools, MCP, the CLI): one word per state."""
        return STATUS_WORDS[self]


class Cancel(enum.Enum):
    """A stop that ends a child cancelled (the other stop is a `BudgetExhausted`)."""

    CANCEL = "cancel"


CANCEL = Cancel.CANCEL
Stop = Cancel | BudgetExhausted  # the first stop asked of a task: how it is to end


@frozen
class Pending:
    """Running, or waiting in its tree's queue (a `Child` with no outcome yet)."""


@frozen
class Done:
    """Ended with an answer: `result` is its last assistant message (None if it wrote none),
    or a typed child's validated JSON value (`output_schema`)."""

    result: Any


@frozen
class Failed:
    """Ended with an error: `error` is its text (`budget exhausted: ...`, a model error, ...)."""

    error: str


@frozen
class Cancelled:
    """Ended by a cancel: its parent's, the host's, or a closing engine's."""

    pass


PENDING = Pending()
CANCELLED = Cancelled()  # frozen: every cancelled child can share this one
ChildState = Pending | Done | Failed | Cancelled
"""A child's state as a value: `Pending` while it runs or waits queued, else its one
ending (`Done`, `Failed` or `Cancelled`)."""
Ending = Done | Failed | Cancelled
STATUS_OF = {Pending: ChildStatus.PENDING, Done: ChildStatus.DONE, Failed: ChildStatus.FAILED,
             Cancelled: ChildStatus.CANCELLED}
# the CLI's (and list_sessions') words for a child's state
STATUS_WORDS = {ChildStatus.QUEUED: "queued", ChildStatus.PENDING: "running",
                ChildStatus.CANCELLING: "running", ChildStatus.DONE: "completed",
                ChildStatus.FAILED: "failed", ChildStatus.CANCELLED: "cancelled"}


def ending_of(task: asyncio.Task[Any], unwritten: Exception | None = None) -> Ending:
    """How a finished child task ended, as its parent records it (`on_disk`)."""
    if task.cancelled():
        return Cancelled()
    exc = task.exception()
    return on_disk(Done(task.result()) if exc is None else Failed(error_text(exc)), unwritten)


def on_disk(outcome: Ending, unwritten: Exception | None) -> Ending:
    """A result counts only once it is in the rollout (`unwritten`: why it is not)."""
    if unwritten is not None and isinstance(outcome, Done):
        return Failed(str(unwritten))
    return outcome


@frozen
class ChildInfo:
    """A snapshot of one child, as `info`, `children` and the waits report it; it does not
    change as the child goes on.

    Attributes:
        session_id: the child's id.
        session_type: the profile it runs (`custom` for a `SessionConfig` child).
        status: its state when the snapshot was taken.
        model: the model it was spawned on.
        result: when done, its last assistant message (a typed child's value); when
            failed, its last message so far; else None.
        error: when failed, why (e.g. `budget exhausted: tokens limit 2000 reached`).
        started_at: when it started, in Unix seconds.
        ended_at: when it ended, in Unix seconds; None while it runs.
        rollout_path: its rollout file.
        usage: what it spent (its own, not its children's).
        answering_model: the model that answered last: `model`, or a fallback.
        last_message: its last assistant message so far.
        budget: its limits as clamped at spawn; None if it has none of its own.
        worktree: a worktree child's `{"path", "branch"}` while the worktree exists.
    """

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
    last_message: str | None = None  # its last assistant message so far
    budget: Budget | None = None  # its limits, as clamped at spawn (None: none of its own)
    # a worktree child's `{"path", "branch"}` while its worktree exists
    worktree: dict[str, str] | None = None

    @property
    def duration_ms(self) -> int | None:
        """How long it ran, in milliseconds; None while it runs."""
        return None if self.ended_at is None else round((self.ended_at - self.started_at) * 1000)

    def notice(self) -> str:
        """How a parent's model is told this child ended when it did not wait for it."""
        body = orjson.dumps({"session_id": self.session_id, **self.outcome()}).decode()
        return f"<subsession_notification>{body}</subsession_notification>"

    def listing(self, now: float | None = None) -> dict[str, Any]:
        """One entry of `list_sessions`."""
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        last = self.last_message
        return {
            "session_id": self.session_id,
            "session_type": self.session_type,
            "status": self.status.word,
            "usage": self.usage.as_dict(),
            "seconds": round(max(0.0, end - self.started_at), 3),
            "last_message": None if last is None else last[:LAST_MESSAGE_CHARS],
            **({} if self.worktree is None else {"worktree": self.worktree}),
        }

    def outcome(self) -> dict[str, Any]:
        """The `{"status", "result"|"error"}` shape the wait tools report (and the
        `worktree` a worktree child left)."""
        status = self.status
        told: dict[str, Any] = {"status": status.word}
        if status is ChildStatus.DONE:
            told["result"] = self.result
        elif status is ChildStatus.FAILED:
            told["error"] = self.error
        elif status is ChildStatus.CANCELLED:
            told["error"] = "cancelled"
        if self.worktree is not None:
            told["worktree"] = self.worktree
        return told


@frozen
class RunStep:
    """One task of `run_parallel` or `run_chain`: its child, or why it could not start."""

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
    """What `run_parallel` and `run_chain` give back.

    Attributes:
        steps: one `RunStep` per task, in task order.
        timed_out: the timeout passed before every step ended.
        failed_step: for a chain, the index of the step that stopped it (else None).
    """

    steps: list[RunStep]
    timed_out: bool
    failed_step: int | None  # chain: the step that stopped it

    @property
    def results(self) -> list[str | None]:
        return [s.child.result if s.child else None for s in self.steps]


@frozen
class WaitResult:
    """What `wait_any` / `wait_all` saw: every named child, and whether time ran out.

    Attributes:
        children: a snapshot of each named child of the session, by id.
        unknown: the named ids that are no child of the session.
        timed_out: the timeout passed before the wait was satisfied (one child ended for
            `wait_any`, every one for `wait_all`).
    """

    children: dict[str, ChildInfo]
    unknown: tuple[str, ...]
    timed_out: bool


def checked_seconds(target: str, timeout: float | None) -> float | None:
    """A caller's timeout in seconds, checked and clamped to an hour (None: no limit): the
    one clamp every wait goes through, the tools' `timeout_ms` included."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout != timeout:
        raise InvalidArguments(target, "timeout must be a number of seconds or None")
    return min(timeout, MAX_TIMEOUT_MS / 1000)
