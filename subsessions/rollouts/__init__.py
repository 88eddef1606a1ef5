"""Rollout files: one JSONL transcript per session, in Codex's format.

Reading them back: `read_rollout` (a whole transcript, tolerant of bad lines),
`find_rollout` (an id or a unique prefix of one), `list_rollouts` (newest
first, a page at a time, from file names and the ends of files), and
`rollout_tree` (parents to children to grandchildren).

The names are imported on first use: the command line's parser reads `status.STATUSES`
without loading the readers (`subsessions mcp` answers its host before any of them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subsessions.rollouts.reader import (
        Rollout,
        RolloutNode,
        RolloutPage,
        RolloutSummary,
        SkippedLine,
        find_rollout,
        list_rollouts,
        read_rollout,
        rollout_files,
        rollout_tree,
    )
    from subsessions.rollouts.status import STATUSES
    from subsessions.rollouts.summary import summarise

_HOMES = {"STATUSES": "status", "summarise": "summary"}

__all__ = [
    "STATUSES",
    "Rollout",
    "RolloutNode",
    "RolloutPage",
    "RolloutSummary",
    "SkippedLine",
    "find_rollout",
    "list_rollouts",
    "read_rollout",
    "rollout_files",
    "rollout_tree",
    "summarise",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_HOMES.get(name, 'reader')}")
    value = getattr(module, name)
    globals()[name] = value
    return value
