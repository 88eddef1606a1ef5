"""Pacing Python's cyclic collector while engines hold many children (L0).

CPython 3.11 starts a full collection whenever what was promoted since the last one reaches a
quarter of the old generation, and it checks that every `threshold0 * threshold1` allocations.
A parent spawning 100,000 children grows the old generation by tens of objects a child, so the
whole tree was scanned about twenty times: 45% of fan-out time went to the collector. While an
engine is open its runtime raises the first threshold in step with the tasks it owns (it paces
every generation), so collections stay as frequent per live object as with an empty heap. The
value found is put back when the last engine closes. A host that sets thresholds itself is
obeyed: once `gc.get_threshold()` is not what we set, pacing stops until every engine has closed.
`Engine(pace_collector=False)` leaves the collector alone.
"""

from __future__ import annotations

import gc

PER_TASK = 1  # collector allocations between young collections, per task the engines own
CEILING = 100_000  # young collections scan at most this many objects
STEP = 1024  # the task count is looked at again after changing by this much


class CollectorPacer:
    """Process-wide: engines share one collector, so one ledger of who raised it."""

    __slots__ = ("_found", "_ours", "_tasks")

    def __init__(self) -> None:
        self._found: tuple[int, int, int] | None = None  # thresholds before the first engine
        self._ours: tuple[int, int, int] | None = None  # what we set last (None: unchanged)
        self._tasks: dict[int, int] = {}  # tasks owned, by holder (every open engine)

    def hold(self, holder: int) -> None:
        if holder in self._tasks:
            return
        if not self._tasks:
            self._found, self._ours = gc.get_threshold(), None
        self._tasks[holder] = 0

    def release(self, holder: int) -> None:
        if self._tasks.pop(holder, None) is None:
            return
        if not self._tasks:
            found, ours = self._found, self._ours
            if found is not None and ours is not None and gc.get_threshold() == ours:
                gc.set_threshold(*found)
            self._found = self._ours = None
        else:
            self._follow()

    def follow(self, holder: int, tasks: int) -> None:
        """`holder` owns `tasks` tasks now."""
        if holder in self._tasks:
            self._tasks[holder] = tasks
            self._follow()

    def _follow(self) -> None:
        found = self._found
        if found is None:
            return
        current = gc.get_threshold()
        if current != (self._ours or found):  # the host tuned it: theirs from now on
            self._found = self._ours = None
            return
        wanted = max(found[0], min(sum(self._tasks.values()) * PER_TASK, CEILING))
        if wanted != current[0]:
            self._ours = (wanted, current[1], current[2])
            gc.set_threshold(*self._ours)


pacer = CollectorPacer()
