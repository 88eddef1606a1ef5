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
    keys = sorted(sessions)
    by_id: dict[str, str] = {}
    for key in keys:
        session_id = sessions[key].session_id
        if session_id is not None:
            by_id.setdefault(session_id.lower(), key)
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for key in keys:
        parent_id = sessions[key].parent_id
        parent = by_id.get(parent_id.lower()) if parent_id is not None else None
        if parent is None or parent == key:
            roots.append(key)
        else:
            children.setdefault(parent, []).append(key)
    placed: set[str] = set()
    order: list[tuple[str, int]] = []
    for root in [*reversed(roots), *keys]:  # then what hangs off a cycle
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
    sums: dict[str, list[int]] = {}
    shown: dict[str, Totals] = {}
    positions = {key: at for at, (key, _) in enumerate(order)}
    for key, _ in reversed(order):
        stats = sessions[key]
        total = [1, int(statuses[key] == "running"), stats.input_tokens, stats.output_tokens,
                 stats.tool_calls]
        below = False
        for kid in children.get(key, ()):
            if positions[kid] > positions[key]:  # placed under it (not cut off a cycle above)
                below = True
                for at, value in enumerate(sums[kid]):
                    total[at] += value
        sums[key] = total
        if below:
            shown[key] = Totals(*total)
    return shown
