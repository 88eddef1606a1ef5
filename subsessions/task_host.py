"""TaskHost: what one task of a session needs of it (and may change: history, counters)."""

from __future__ import annotations

from typing import Any, Protocol

from subsessions.children import Stop
from subsessions.errors import BudgetExhausted
from subsessions.items import Item
from subsessions.kit import Kit
from subsessions.manager import SubsessionManager
from subsessions.meter import Meter
from subsessions.models.base import TokenUsage
from subsessions.rollouts.recorder import RolloutRecorder
from subsessions.runtime import Runtime
from subsessions.task_hooks import Hooked
from subsessions.usage import Usage


class TaskHost(Hooked, Protocol):
    """What a task needs of its session (and may change: history, counters)."""

    @property
    def runtime(self) -> Runtime: ...  # its model client, tracer, backend (the hooks' too)

    recorder: RolloutRecorder
    model: str
    depth: int
    def usage(self, include_children: bool = False) -> Usage: ...

    kit: Kit
    # its counters
    token_usage: TokenUsage
    turns: int  # model calls made
    tool_calls: int  # function calls run
    answered_by: str | None  # the model that answered last
    last_message: str | None  # its last assistant message

    @property
    def subsessions(self) -> SubsessionManager: ...  # the sub-session tools act on it

    async def tell_parent(self, message: str) -> str: ...  # send_parent_message

    history: list[Item]
    @property
    def meter(self) -> Meter: ...  # what it spent against its budget (and its ancestors')
    @property
    def metered(self) -> bool: ...  # a budget applies to it or an ancestor
    @property
    def inbox(self) -> list[str]: ...  # messages sent to it while it runs (send_message)
    @property
    def has_mail(self) -> bool: ...  # its inbox holds a message
    taking_messages: bool  # its task will read the inbox before another model call

    @property
    def spawned(self) -> SubsessionManager | None: ...  # its children, if it ever had any

    @property
    def source(self) -> str | dict[str, Any]: ...
    @property
    def instructions(self) -> str: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def sandbox_policy(self) -> dict[str, Any]: ...  # Codex's shape, for turn_context
    @property
    def stop(self) -> Stop | None: ...  # the first stop asked of this task
    @property
    def budget_stop(self) -> BudgetExhausted | None: ...  # its stop, if a budget's

    def task_begins(self) -> None: ...  # its task runs its first line
    def task_ended(self) -> None: ...  # its terminal record is written
    def claim_budget_stop(self, error: BudgetExhausted) -> None: ...  # it ends by itself
    def claim(self) -> bool: ...  # it runs a task from now on; whether its first
