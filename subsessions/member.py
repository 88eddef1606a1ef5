"""Member: what a children manager needs of the session that owns it and of its children.

The manager is typed against this protocol, never against `Session`, so the session
module sits above it (it builds sessions; the manager only asks for them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Protocol

from subsessions.budget import Budget
from subsessions.children import Stop
from subsessions.config import SessionConfig, Tool
from subsessions.dispatch import Caller
from subsessions.errors import BudgetExhausted
from subsessions.kit import Kit
from subsessions.models.base import TokenUsage
from subsessions.profiles import Profile
from subsessions.rollouts.recorder import RolloutRecorder
from subsessions.runtime import Runtime
from subsessions.tools.context import ToolContext
from subsessions.tree import SessionTree
from subsessions.usage import Usage


class Family(Protocol):
    """A member's own children, as far as its parent's manager reads them."""

    def tree(self) -> list[Member]: ...


class Member(Caller, Protocol):
    """What the manager needs of the session that owns it and of the children it asks for."""

    depth: int
    model: str
    @property
    def is_child(self) -> bool: ...
    @property
    def ended(self) -> bool: ...  # a child whose one task has written its ending
    @property
    def started(self) -> bool: ...
    @property
    def wrote_meta(self) -> bool: ...
    runtime: Runtime
    tree: SessionTree
    recorder: RolloutRecorder
    @property
    def rollout_path(self) -> str: ...
    @property
    def spawned(self) -> Family | None: ...  # its children, if it ever had any
    @property
    def answering_model(self) -> str: ...
    token_usage: TokenUsage
    @property
    def tool_calls(self) -> int: ...
    turns: int
    @property
    def stop(self) -> Stop | None: ...
    last_message: str | None
    @property
    def budget(self) -> Budget | None: ...
    inbox: list[str]
    taking_messages: bool

    async def take_message(self, message: str) -> bool: ...
    async def flush_durable(self) -> None: ...

    def tools(self) -> tuple[Tool, ...]: ...
    def usage(self, include_children: bool = False) -> Usage: ...
    def remote_usages(self) -> Iterable[Usage]: ...  # of descendants run by another process
    def request_stop(self, budget: BudgetExhausted | None = None, *,
                     deliver: bool = True) -> bool: ...
    def write_meta(self) -> None: ...
    def release(self) -> None: ...
    def child_config(self, profile: Profile) -> SessionConfig: ...
    def child_tool_context(self) -> ToolContext | None: ...
    def new_child(self, kit: Kit, call_id: str, budget: Budget | None = None) -> Member: ...
    def hand_over_head(self) -> None: ...
    def prepare_follow_up(self) -> None: ...
    def wake(self) -> None: ...
    def child_task(self, prompt: str) -> Awaitable[str | None]: ...
