"""Rollout files: one JSONL transcript per session, in Codex's format.

Reading them back: `read_rollout` (a whole transcript, tolerant of bad lines),
`find_rollout` (an id or a unique prefix of one), `list_rollouts` (newest
first, a page at a time, from file names and the ends of files), and
`rollout_tree` (parents to children to grandchildren).
"""

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
