"""What a parent knows of its children: states, snapshots, and the results of waits and runs."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import orjson
from attrs import define, field, frozen

from subsessions.budget import Budget
from subsessions.errors import (
    BudgetExhausted,
    ChildCancelled,
    ChildFailed,
    ChildNotFinished,
    InvalidArguments,
    error_text,
)
from subsessions.usage import Usage

MAX_TIMEOUT_MS = 3_600_000  # every wait is clamped to an hour (DESIGN 3.1): see checked_seconds
LAST_MESSAGE_CHARS = 500  # what list_sessions shows of a child's last message


class ChildStatus(enum.Enum):
    QUEUED = "queued"  # waiting for a place under max_children (DESIGN 3.11)
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
    """Running (its task owned by the runtime; a stop reaches it through the child)."""


@frozen
class Done:
    result: str | None


@frozen
class Failed:
    error: str


@frozen
class Cancelled:
    pass


@frozen
class Queued(Pending):
    """Waiting in its tree's queue: no task, no rollout yet. A cancel `withdraw`s it."""

    withdraw: Callable[[], None]


PENDING = Pending()
CANCELLED = Cancelled()  # frozen: every cancelled child can share this one
ChildState = Pending | Done | Failed | Cancelled
Ending = Done | Failed | Cancelled
STATUS_OF = {Queued: ChildStatus.QUEUED, Pending: ChildStatus.PENDING, Done: ChildStatus.DONE,
             Failed: ChildStatus.FAILED, Cancelled: ChildStatus.CANCELLED}
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
    last_message: str | None = None  # its last assistant message so far
    budget: Budget | None = None  # its limits, as clamped at spawn (None: none of its own)

    @property
    def duration_ms(self) -> int | None:
        return None if self.ended_at is None else round((self.ended_at - self.started_at) * 1000)

    def notice(self) -> str:
        """How a parent's model is told this child ended when it did not wait for it."""
        body = orjson.dumps({"session_id": self.session_id, **self.outcome()}).decode()
        return f"<subsession_notification>{body}</subsession_notification>"

    def listing(self, now: float | None = None) -> dict[str, Any]:
        """One entry of `list_sessions` (DESIGN 3.1)."""
        end = self.ended_at if self.ended_at is not None else (now or time.time())
        last = self.last_message
        return {
            "session_id": self.session_id,
            "session_type": self.session_type,
            "status": self.status.word,
            "usage": self.usage.as_dict(),
            "seconds": round(max(0.0, end - self.started_at), 3),
            "last_message": None if last is None else last[:LAST_MESSAGE_CHARS],
        }

    def outcome(self) -> dict[str, Any]:
        """The `{"status", "result"|"error"}` shape the wait tools report."""
        status = self.status
        if status is ChildStatus.DONE:
            return {"status": status.word, "result": self.result}
        if status is ChildStatus.FAILED:
            return {"status": status.word, "error": self.error}
        if status is ChildStatus.CANCELLED:
            return {"status": status.word, "error": "cancelled"}
        return {"status": status.word}


class ChildSession(Protocol):
    """What a child record needs of the session it tracks."""

    @property
    def session_id(self) -> str: ...
    @property
    def agent_name(self) -> str | None: ...
    @property
    def model(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def rollout_path(self) -> str: ...
    @property
    def answering_model(self) -> str: ...
    @property
    def call_id(self) -> str | None: ...  # the call that spawned it
    @property
    def stop(self) -> Stop | None: ...  # the first stop asked of its current task
    last_message: str | None
    @property
    def budget(self) -> Budget | None: ...
    taking_messages: bool  # its task will read sent messages before another model call

    def usage(self, include_children: bool = False) -> Usage: ...
    def request_stop(self, budget: BudgetExhausted | None = None, *,
                     deliver: bool = True) -> bool: ...


S = TypeVar("S", bound=ChildSession)


@define(eq=False, repr=False)
class ChildRecord(Generic[S]):
    """One child as its parent knows it. `settle` is the one terminal transition.

    The status is derived from the state alone (plus the child's stop while pending);
    `finished` resolves at the settle, so waiters and the state never disagree.
    """

    session: S
    _state: ChildState
    ended_at: float | None = None
    waiters: int = 0  # waits in progress: an ending they see needs no notice
    waited: bool = False  # the parent has been told how this child ended
    finished: asyncio.Future[None] = field(init=False)
    # how its parent settles it once its ending is on disk (`ended`): one bound method of
    # the parent's manager, shared by all its records
    on_ended: Callable[[ChildRecord[S], Ending], None] = field(
        default=lambda record, outcome: record.settle(outcome), kw_only=True)

    def __attrs_post_init__(self) -> None:
        self.finished = asyncio.get_running_loop().create_future()
        if not isinstance(self._state, Pending):
            self.finished.set_result(None)

    def __repr__(self) -> str:
        return f"<ChildRecord {self.session.session_id} {self.status.value}>"

    @property
    def state(self) -> ChildState:
        return self._state

    @property
    def status(self) -> ChildStatus:
        if type(self._state) is Pending and self.session.stop is not None:
            return ChildStatus.CANCELLING
        return STATUS_OF[type(self._state)]

    def cancel(self, budget: BudgetExhausted | None = None, *, deliver: bool = True) -> bool:
        """Stop a running child: the child's `request_stop` (first stop wins); nothing
        once it has settled."""
        state = self._state
        if isinstance(state, Queued):
            state.withdraw()
            return True
        if not isinstance(state, Pending):
            return False
        return self.session.request_stop(budget, deliver=deliver)

    def dequeued(self) -> None:
        """Its turn in the queue came: it starts (pending)."""
        if not isinstance(self._state, Queued):
            raise RuntimeError(f"child {self.session.session_id} is not queued")
        self._state = PENDING

    def restart(self) -> None:
        """An ended child runs a follow-up task: a new pending state and a new ending."""
        if isinstance(self._state, Pending):
            raise RuntimeError(f"child {self.session.session_id} is running")
        self._state = PENDING
        self.ended_at = None
        self.waited = False
        self.finished = asyncio.get_running_loop().create_future()

    @property
    def accepting(self) -> bool:
        """Running and not ending: a message sent now is read before its next model call."""
        return (isinstance(self._state, Pending) and self.session.stop is None
                and self.session.taking_messages)

    def ended(self, outcome: Ending) -> None:
        """The child's task has written its ending: its parent settles it (`on_ended`)."""
        self.on_ended(self, outcome)

    def settle(self, outcome: Ending) -> None:
        """The child's one ending; a second raises (exactly one ending per child)."""
        if not isinstance(self._state, Pending):
            raise RuntimeError(f"child {self.session.session_id} has ended already")
        self._state = outcome
        self.ended_at = time.time()
        self.finished.set_result(None)

    def result(self) -> str | None:
        """An ended child's last message, or the error of how it did not complete."""
        state = self._state
        if isinstance(state, Done):
            return state.result
        if isinstance(state, Failed):
            raise ChildFailed(self.session.session_id, state.error)
        if isinstance(state, Cancelled):
            raise ChildCancelled(self.session.session_id)
        raise ChildNotFinished(self.session.session_id)

    def ending_data(self) -> dict[str, Any]:
        """The `subagent.completed` / `subagent.failed` payload: built only for listeners."""
        child, state = self.session, self._state
        ended = self.ended_at or time.time()
        usage = child.usage()
        data: dict[str, Any] = {
            "tool_call_id": child.call_id, "agent_name": child.agent_name,
            "remote_session_id": child.session_id, "model": child.model,
            "total_tokens": usage.total_tokens, "total_tool_calls": usage.tool_calls,
            "turns": usage.turns, "duration_ms": round((ended - child.started_at) * 1000),
        }
        if not isinstance(state, Done):
            data["error"] = state.error if isinstance(state, Failed) else "cancelled"
            data["cancelled"] = isinstance(state, Cancelled)
        return data

    def info(self) -> ChildInfo:
        state = self._state
        session = self.session
        return ChildInfo(
            session_id=session.session_id,
            session_type=session.agent_name or "custom",
            status=self.status,
            model=session.model,
            # a failed child's last message stays readable (a budget stopped it mid-work)
            result=state.result if isinstance(state, Done) else (
                session.last_message if isinstance(state, Failed) else None),
            error=state.error if isinstance(state, Failed) else None,
            started_at=session.started_at,
            ended_at=self.ended_at,
            rollout_path=session.rollout_path,
            usage=session.usage(),
            answering_model=session.answering_model,
            last_message=session.last_message,
            budget=session.budget,
        )


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
    """A caller's timeout in seconds, checked and clamped to an hour (None: no limit): the
    one clamp every wait goes through, the tools' `timeout_ms` included."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout != timeout:
        raise InvalidArguments(target, "timeout must be a number of seconds or None")
    return min(timeout, MAX_TIMEOUT_MS / 1000)
