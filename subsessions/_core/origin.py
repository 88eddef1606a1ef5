"""Where a session starts from (`Origin`), and the phases of its life (`Phase`)."""

from __future__ import annotations

import enum
from typing import Any

from attrs import frozen

from subsessions._core.tree import LOCAL, TreeLedger
from subsessions.items import Item
from subsessions.models.base import NO_USAGE, TokenUsage
from subsessions.tools.worktrees import Worktree


class Phase(enum.Enum):
    NEW = "new"  # nothing written yet
    OPEN = "open"  # session_meta written, no task run yet (or resumed)
    RUNNING = "running"  # a task is running
    IDLE = "idle"  # between tasks (top-level sessions)
    ENDED = "ended"  # a child's one task has written its ending
    RELEASED = "released"  # ended, its ending on disk; history and tools dropped


@frozen
class Origin:
    """Where a session starts from. The named constructors (`new`, `resumed`, `stand_in`,
    and the shard's) build one and `__init__` takes it whole: nothing is assigned after."""

    session_id: str | None = None  # None: a new id
    rollout_path: str | None = None  # a rollout it appends to (resumed); None: a new file
    started_at: float | None = None  # None: now
    history: tuple[Item, ...] = ()
    token_usage: TokenUsage = NO_USAGE
    counts: tuple[int, int] = (0, 0)  # turns, tool calls (a shard's child: its earlier tasks')
    forked_from: str | None = None
    resume_report: str | None = None  # what resuming or forking read and skipped
    ledger: TreeLedger = LOCAL  # a top-level session's tree is counted elsewhere too
    inbox: tuple[str, ...] = ()  # messages it reads before its next model call
    output_schema: dict[str, Any] | None = None  # a typed child's
    worktree: Worktree | None = None  # a worktree child's checkout (`tools.worktrees`)


NEW = Origin()
