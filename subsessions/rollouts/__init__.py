"""Rollout files: one JSONL transcript per session, in Codex's format."""

from subsessions.rollouts.reader import (
    Rollout,
    RolloutNode,
    SkippedLine,
    find_rollout,
    list_rollouts,
    read_rollout,
    rollout_files,
    rollout_tree,
)

__all__ = [
    "Rollout",
    "RolloutNode",
    "SkippedLine",
    "find_rollout",
    "list_rollouts",
    "read_rollout",
    "rollout_files",
    "rollout_tree",
]
