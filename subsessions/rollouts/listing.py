"""Listing rollouts newest first, a page at a time, and arranging them as trees.

The order comes from file names (uuid7 ids sort by creation), so a page opens
only the files it returns or filters out, and the cursor is simply the id of
the last row: the next page is everything older than it. New sessions sort
before every cursor already handed out, so pages never shift under a reader.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import overload

import attrs
from attrs import field, frozen

from subsessions.errors import InvalidArguments, RolloutError
from subsessions.rollouts.files import (
    RolloutEntry,
    check_id,
    find_rollout,
    rollout_entries,
    uuid7_millis,
)
from subsessions.rollouts.index import SummaryIndex
from subsessions.rollouts.status import STATUSES
from subsessions.rollouts.summary import RolloutSummary
from subsessions.rollouts.values import epoch_ms, parse_stamp


@frozen
class RolloutPage(Sequence[RolloutSummary]):
    """Rows newest first; `next_cursor` is None once the listing is known to be exhausted."""

    items: tuple[RolloutSummary, ...]
    next_cursor: str | None = None
    unreadable: tuple[str, ...] = field(default=(), repr=False)  # named like rollouts, but not

    @overload
    def __getitem__(self, index: int) -> RolloutSummary: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[RolloutSummary, ...]: ...
    def __getitem__(self, index: int | slice) -> RolloutSummary | tuple[RolloutSummary, ...]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[RolloutSummary]:
        return iter(self.items)


def list_rollouts(
    home: str | os.PathLike[str],
    *,
    parent: str | None = None,
    source: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> RolloutPage:
    """Rollouts newest first, filtered; files that are not rollouts are left out (and named).

    `parent` is a full session id; `since` a datetime (naive = local time);
    `cursor` the `next_cursor` of the previous page.
    """
    if status is not None and status not in STATUSES:
        raise InvalidArguments("list_rollouts", f"status must be one of {', '.join(STATUSES)}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise InvalidArguments("list_rollouts", "limit must be a positive integer or None")
    parent_key = check_id(parent, "parent session id") if parent is not None else None
    every = rollout_entries(home)
    entries = every
    if cursor is not None:
        entries = entries[: bisect.bisect_left(entries, (check_id(cursor, "cursor"),))]
    index = SummaryIndex(home)
    try:
        return _page(entries, index, parent_key, source, status, since, limit)
    finally:
        index.save(every)


def _page(
    entries: list[RolloutEntry],
    index: SummaryIndex,
    parent_key: str | None,
    source: str | None,
    status: str | None,
    since: datetime | None,
    limit: int | None,
) -> RolloutPage:
    since_ms = epoch_ms(since) if since is not None else None
    items: list[RolloutSummary] = []
    unreadable: list[str] = []
    millis: int | None = None
    for key, path in reversed(entries):
        if since_ms is not None:
            millis = uuid7_millis(key)
            if millis is not None and millis < since_ms:
                continue
        if parent_key is not None and _older(key, parent_key):
            continue  # a child is always created after its parent
        try:
            summary = index.summary(path, key)
        except RolloutError:
            unreadable.append(path)
            continue
        if parent_key is not None and summary.parent_id != parent_key:
            continue
        if source is not None and summary.source_kind != source:
            continue
        if status is not None and summary.status != status:
            continue
        if since_ms is not None and millis is None:
            started = parse_stamp(summary.started)
            if started is None or started * 1000 < since_ms:
                continue
        items.append(summary)
        if limit is not None and len(items) >= limit:
            return RolloutPage(tuple(items), key, tuple(unreadable))
    return RolloutPage(tuple(items), None, tuple(unreadable))


def _older(key: str, than: str) -> bool:
    """Whether `key` was certainly created no later than `than` (both uuid7)."""
    return key <= than and uuid7_millis(key) is not None and uuid7_millis(than) is not None


@frozen
class RolloutNode:
    rollout: RolloutSummary
    children: tuple[RolloutNode, ...]
    cycle: bool = False  # its parent is itself or one of its descendants: shown as a root


def rollout_tree(home: str | os.PathLike[str], root_id: str | None = None) -> list[RolloutNode]:
    """Top-level sessions (or the one named) with their descendants, oldest first.

    A child whose parent's rollout is missing is shown as a root of its own, and
    so is the oldest session of a parent cycle (hand-made files), marked `cycle`.
    """
    every = entries = rollout_entries(home)
    root_key: str | None = None
    if root_id is not None:
        root_key = Path(find_rollout(home, root_id)).name[-42:-6]
        entries = [e for e in entries if not _older(e[0], root_key) or e[0] == root_key]
    summaries: list[RolloutSummary] = []
    index = SummaryIndex(home)
    for key, path in reversed(entries):  # newest first, as a listing reads them
        try:
            summaries.append(index.summary(path, key))
        except RolloutError:
            if key == root_key:
                raise
    index.save(every)
    summaries.reverse()
    forest = _Forest(summaries)
    if root_key is not None:
        (root,) = [s for s in summaries if s.key == root_key]
        return [forest.root(root)]
    nodes = [forest.root(s) for s in summaries if forest.parent(s) is None]
    for summary in summaries:  # what is left hangs off a cycle: cut each at its oldest member
        if summary.key not in forest.placed:
            nodes.append(forest.root(forest.oldest_in_cycle(summary)))
    order = {s.key: at for at, s in enumerate(summaries)}
    return sorted(nodes, key=lambda node: order[node.rollout.key])


class _Forest:
    """Summaries linked by parent id; each is placed once, so a cycle cannot recurse."""

    def __init__(self, summaries: list[RolloutSummary]) -> None:
        self.by_id: dict[str, RolloutSummary] = {}
        self.children: dict[str, list[RolloutSummary]] = {}
        for summary in summaries:
            self.by_id.setdefault(summary.session_id, summary)
            if summary.parent_id is not None:
                self.children.setdefault(summary.parent_id, []).append(summary)
        self.placed: set[str] = set()  # keys

    def parent(self, summary: RolloutSummary) -> RolloutSummary | None:
        return self.by_id.get(summary.parent_id) if summary.parent_id is not None else None

    def root(self, summary: RolloutSummary) -> RolloutNode:
        below: set[str] = set()
        node = self._build(summary, below)
        return attrs.evolve(node, cycle=summary.parent_id in below)

    def _build(self, summary: RolloutSummary, below: set[str]) -> RolloutNode:
        self.placed.add(summary.key)
        below.add(summary.session_id)
        kids = [self._build(kid, below) for kid in self.children.get(summary.session_id, [])
                if kid.key not in self.placed]
        return RolloutNode(summary, tuple(kids))

    def oldest_in_cycle(self, summary: RolloutSummary) -> RolloutSummary:
        """The oldest session of the cycle that `summary`'s chain of parents runs into."""
        chain: dict[str, RolloutSummary] = {}  # key -> summary, in the order walked
        current: RolloutSummary | None = summary
        while current is not None and current.key not in chain:
            chain[current.key] = current
            current = self.parent(current)
        if current is None:  # not a cycle after all (cannot happen for unplaced summaries)
            return summary
        walked = list(chain)
        return chain[min(walked[walked.index(current.key):])]
