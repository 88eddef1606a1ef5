"""The followed sessions as display rows: parents above their children, subtree totals summed.

Top-level sessions come newest first (what runs now is at the top); children follow
their parent oldest first, in the order they were spawned. A session whose parent
has no rollout is a root, and so is the oldest member of a parent cycle (hand-made
files), so every session is placed exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from subsessions.watch.stats import Alive, SessionStats


@frozen
class Totals:
    """A session's own counts plus all of its descendants'."""

    sessions: int
    running: int
    input_tokens: int
    output_tokens: int
    tool_calls: int


@frozen
class Row:
    stats: SessionStats
    depth: int
    status: str
    totals: Totals | None  # only for a session with descendants


def build_rows(sessions: Mapping[str, SessionStats], alive: Alive) -> list[Row]:
    """Rows in display order; `alive` tells whether an open task's writer still runs."""
    statuses = {key: stats.status(alive) for key, stats in sessions.items()}
    by_id: dict[str, str] = {}
    for key in sorted(sessions):
        stats = sessions[key]
        if stats.session_id is not None:
            by_id.setdefault(stats.session_id.lower(), key)
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for key in sorted(sessions):
        parent_id = sessions[key].parent_id
        parent = by_id.get(parent_id.lower()) if parent_id is not None else None
        if parent is None or parent == key:
            roots.append(key)
        else:
            children.setdefault(parent, []).append(key)
    placed: set[str] = set()
    order: list[tuple[str, int]] = []
    for root in [*reversed(roots), *sorted(sessions)]:  # then what hangs off a cycle
        if root not in placed:
            _place(root, children, placed, order)
    totals = _totals(order, children, sessions, statuses)
    return [Row(sessions[key], depth, statuses[key], totals.get(key)) for key, depth in order]


def _place(root: str, children: dict[str, list[str]], placed: set[str],
           order: list[tuple[str, int]]) -> None:
    """Depth first without recursion (a fan-out may be thousands wide and deep chains exist)."""
    stack = [(root, 0)]
    while stack:
        key, depth = stack.pop()
        if key in placed:
            continue
        placed.add(key)
        order.append((key, depth))
        stack.extend((kid, depth + 1) for kid in reversed(children.get(key, [])))


def _totals(order: list[tuple[str, int]], children: dict[str, list[str]],
            sessions: Mapping[str, SessionStats], statuses: Mapping[str, str]) -> dict[str, Totals]:
    """Subtree sums, children before parents (display order reversed)."""
    sums: dict[str, Totals] = {}
    shown: dict[str, Totals] = {}
    positions = {key: at for at, (key, _) in enumerate(order)}
    for key, _ in reversed(order):
        stats = sessions[key]
        total = Totals(1, int(statuses[key] == "running"), stats.input_tokens, stats.output_tokens,
                       stats.tool_calls)
        kids = [kid for kid in children.get(key, []) if positions.get(kid, -1) > positions[key]]
        for kid in kids:
            below = sums[kid]
            total = Totals(total.sessions + below.sessions, total.running + below.running,
                           total.input_tokens + below.input_tokens,
                           total.output_tokens + below.output_tokens,
                           total.tool_calls + below.tool_calls)
        sums[key] = total
        if kids:
            shown[key] = total
    return shown
