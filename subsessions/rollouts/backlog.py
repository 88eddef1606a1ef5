"""What the rollout writer's thread holds of each file, and the endings parked on the loop.

The writer (`recorder.py`) hands chunks to one thread through one queue, but a small chunk
someone waits for (a child's ending) waits only for what it must follow: the earlier lines
of its own file, and those of deeper files (a child's head, which its lines may name). So it
is written on the loop when the thread holds nothing of its file nor of a deeper one (with
its file's queued lines, taken off the queue, when the thread has not started on them: a
child cancelled as its head is handed over), and parked here while the thread writes earlier
lines of its file, until they are written; never behind other files' backlog (a storm of new
children being created). Both threads use this, every step under one lock.
"""

from __future__ import annotations

import threading
from collections import deque
from enum import Enum
from typing import Any

from subsessions.errors import RolloutError
from subsessions.rollouts.lines import Written

Parked = tuple[bytes | bytearray, Written | None, int]  # (chunk, its waiter, its depth)
Queued = tuple[str, bytes | bytearray, Written | None, int]  # (path, chunk, waiter, depth)


class Route(Enum):
    INLINE = "write it on the loop"
    PARK = "parked behind its file's lines in the thread"
    QUEUE = "to the thread"


class Backlog:
    """Counts of the chunks the thread holds (queued or in hand), and the parked ones."""

    __slots__ = ("_depths", "_in_hand", "_lock", "_parked", "_pending", "queue")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.queue: deque[Queued] = deque()  # the loop appends, the thread takes rounds
        self._pending: dict[str, int] = {}  # per file, until written
        self._depths: dict[int, int] = {}  # per depth, until the end of their round
        self._in_hand: set[str] = set()  # files of the thread's round, until written
        self._parked: dict[str, list[Parked]] = {}  # per file, in submit order

    def route(self, path: str, data: bytes | bytearray, waiter: Written | None, depth: int,
              small: int, now: bool) -> tuple[Route, list[Queued]]:
        """Where a submitted chunk goes (on the loop). A parked file takes every chunk of
        its own until it is resumed; a waited chunk of at most `small` bytes that may be
        written `now` is, once nothing it follows is unwritten, with its file's queued
        chunks (returned) if the thread has not taken them, else parks behind them. A chunk
        routed to the thread is counted."""
        with self._lock:
            parked = self._parked.get(path)
            if parked is not None:
                parked.append((data, waiter, depth))
                return Route.PARK, []
            fits = waiter is not None and len(data) <= small
            if fits and path not in self._pending:
                if now and self._none_deeper(depth):
                    return Route.INLINE, []
            elif fits:
                if now and path not in self._in_hand and self._none_deeper(depth):
                    mine = [queued for queued in self.queue if queued[0] == path]
                    if sum(len(queued[1]) for queued in mine) + len(data) <= small:
                        self._steal(path, mine)
                        return Route.INLINE, mine
                self._parked[path] = [(data, waiter, depth)]
                return Route.PARK, []
            self._count(path, depth)
            return Route.QUEUE, []

    def _steal(self, path: str, mine: list[Queued]) -> None:
        """Take `path`'s queued chunks off the queue (the thread holds none of them)."""
        rest = [queued for queued in self.queue if queued[0] != path]
        self.queue.clear()
        self.queue.extend(rest)
        del self._pending[path]
        for _, _, _, depth in mine:
            self._depths[depth] -= 1
            if not self._depths[depth]:
                del self._depths[depth]

    def take(self) -> list[Queued]:
        """The thread's next round: everything queued, its files now in its hands."""
        with self._lock:
            taken = []
            while self.queue:
                taken.append(self.queue.popleft())
            self._in_hand.update(queued[0] for queued in taken)
            return taken

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
            self._in_hand.discard(path)
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


class InOrder:
    """Waiters told in the order their chunks were submitted (on the loop): endings settle
    in the order they were recorded, whichever file reached the disk first; none waits for
    other files' lines without a waiter (a storm of new children's heads)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: deque[list[Any]] = deque()  # [waiter, told yet, what it is told]

    def wrap(self, waiter: Written) -> Written:
        entry: list[Any] = [waiter, False, None]
        self._waiting.append(entry)

        def told(problem: RolloutError | None) -> None:
            entry[1:] = True, problem
            waiting = self._waiting
            while waiting and waiting[0][1]:
                first = waiting.popleft()
                first[0](first[2])

        return told
