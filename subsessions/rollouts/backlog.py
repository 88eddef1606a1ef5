"""What the rollout writer's thread holds of each file, and the endings parked on the loop.

The writer (`recorder.py`) hands chunks to one thread through one queue, but a small chunk
someone waits for (a child's ending) waits only for what it must follow: the earlier lines
of its own file, and those of deeper files (a child's head, which its lines may name). So it
is written on the loop when the thread holds nothing of its file nor of a deeper one, and
parked here while the thread holds earlier lines of its file, until they are written; never
behind other files' backlog (a storm of new children being created). Both threads use this,
every step under one lock.
"""

from __future__ import annotations

import threading
from enum import Enum

from subsessions.rollouts.lines import Written

Parked = tuple[bytes | bytearray, Written | None, int]  # (chunk, its waiter, its depth)


class Route(Enum):
    INLINE = "write it on the loop"
    PARK = "parked behind its file's lines in the thread"
    QUEUE = "to the thread"


class Backlog:
    """Counts of the chunks the thread holds (queued or in hand), and the parked ones."""

    __slots__ = ("_depths", "_lock", "_parked", "_pending")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # per file, until written
        self._depths: dict[int, int] = {}  # per depth, until the end of their round
        self._parked: dict[str, list[Parked]] = {}  # per file, in submit order

    def route(self, path: str, data: bytes | bytearray, waiter: Written | None, depth: int,
              small: bool, now: bool) -> Route:
        """Where a submitted chunk goes (on the loop). A parked file takes every chunk of
        its own until it is resumed; a `small` waited one parks behind its file's lines in
        the thread; one that may be written `now` is, once nothing it follows is unwritten.
        A chunk routed to the thread is counted."""
        with self._lock:
            parked = self._parked.get(path)
            if parked is not None:
                parked.append((data, waiter, depth))
                return Route.PARK
            if path in self._pending:
                if small:
                    self._parked[path] = [(data, waiter, depth)]
                    return Route.PARK
            elif now and self._none_deeper(depth):
                return Route.INLINE
            self._count(path, depth)
            return Route.QUEUE

    def queued(self, path: str, depth: int) -> None:
        """A chunk handed to the thread (besides `route`'s)."""
        with self._lock:
            self._count(path, depth)

    def _count(self, path: str, depth: int) -> None:
        self._pending[path] = self._pending.get(path, 0) + 1
        self._depths[depth] = self._depths.get(depth, 0) + 1

    def none_deeper(self, depth: int) -> bool:
        with self._lock:
            return self._none_deeper(depth)

    def _none_deeper(self, depth: int) -> bool:
        return all(held <= depth for held in self._depths)

    def written(self, path: str, count: int) -> bool:
        """The thread wrote `count` chunks of `path`; whether parked ones may follow now."""
        with self._lock:
            left = self._pending[path] - count
            if left:
                self._pending[path] = left
                return False
            del self._pending[path]
            return path in self._parked

    def round_done(self, depths: dict[int, int]) -> None:
        """The thread's round, with this many chunks of each depth, is written."""
        with self._lock:
            for depth, count in depths.items():
                left = self._depths[depth] - count
                if left:
                    self._depths[depth] = left
                else:
                    del self._depths[depth]

    def resume(self, path: str) -> list[Parked]:
        """The chunks parked for `path`, which is no longer parked (on the loop)."""
        with self._lock:
            return self._parked.pop(path, [])
