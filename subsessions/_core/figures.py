"""Figures: what a child's task ran up in another process (a Ray shard), as its parent
shows it; `Child.apply` takes them in one place."""

from __future__ import annotations

from attrs import frozen

from subsessions.models.base import TokenUsage


@frozen
class Figures:
    token_usage: TokenUsage
    turns: int
    tool_calls: int
    answered_by: str | None  # the fallback that answered last, when one did
    spent: tuple[int, int] | None = None  # its meter (turns, tokens), descendants' included
