"""RolloutRecorder: one session's rollout lines, buffered until its writer takes them
(`recorder.py`: the writer), and where its file lies (`rollout_path`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from subsessions._util.clock import clock
from subsessions.errors import RolloutError

# Called on the event loop once a chunk is in its file (None) or could not be written.
Written = Callable[[RolloutError | None], None]


class Writer(Protocol):
    """Where a recorder hands its lines (`RolloutWriter`)."""

    def submit(self, path: str, data: bytes | bytearray, waiter: Written | None,
               depth: int = 0) -> None: ...


_path_stamps: dict[int, tuple[str, str]] = {}


def rollout_path(home: Path, session_id: str, started: float) -> str:
    """`home/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-<id>.jsonl` in local time."""
    second = int(started)
    stamps = _path_stamps.get(second)
    if stamps is None:  # one strftime pair a second, not one a session
        local = time.localtime(second)
        stamps = (time.strftime("%Y/%m/%d", local), time.strftime("%Y-%m-%dT%H-%M-%S", local))
        _path_stamps.clear()
        _path_stamps[second] = stamps
    return f"{home}/sessions/{stamps[0]}/rollout-{stamps[1]}-{session_id}.jsonl"


_EMPTY = b""  # every empty recorder's buffer


class RolloutRecorder:
    """One session's rollout: buffered lines in the Codex rollout envelope.

    The buffer is one bytearray: orjson's output objects carry kilobytes of spare
    capacity, so holding them until a flush would cost far more than the lines. An empty
    one is the shared `b""` (a bytearray is made by the first line after a flush): most
    recorders wait empty, for a model's answer.
    """

    __slots__ = ("_buffer", "_depth", "_dirty", "_first", "_writer", "path")

    def __init__(
        self, writer: Writer, path: str, dirty: set[RolloutRecorder] | None = None,
        depth: int = 0,
    ) -> None:
        self._writer = writer
        self._buffer: bytes | bytearray = _EMPTY
        self._dirty = dirty  # where a recorder with unwritten lines announces itself
        self._depth = depth  # the session's: its file is written before its parent's
        self._first: list[Callable[[], None]] | None = None  # see before_flush
        self.path = path

    def __repr__(self) -> str:
        return f"<RolloutRecorder {self.path} buffered={len(self._buffer)}B>"

    def record(self, kind: str, payload: dict[str, Any]) -> None:
        # The envelope by hand around orjson's payload: one object fewer to serialise per line.
        self._add(b'{"timestamp":"%s","type":"%s","payload":%s}\n' % (
            clock.now().encode(), kind.encode(), orjson.dumps(payload)
        ))

    def start_new_line(self) -> None:
        """End a torn last line left by a crash, so the next record starts whole."""
        self._add(b"\n")

    def _add(self, line: bytes) -> None:
        if self._buffer:
            self._buffer += line  # the bytearray, in place
            return
        if self._dirty is not None:
            self._dirty.add(self)
        self._buffer = bytearray(line)

    def event(self, payload: dict[str, Any]) -> None:
        self.record("event_msg", payload)

    def before_flush(self, call: Callable[[], None]) -> None:
        """Call `call` before this recorder's next lines go to the writer: a spawned
        child's head is handed over first, yet not on the spawn path itself."""
        if self._first is None:
            self._first = [call]
        else:
            self._first.append(call)

    def _call_first(self) -> None:
        calls, self._first = self._first, None
        for call in calls or ():
            call()

    def flush(self) -> None:
        """Hand what is buffered to the writer without waiting for it."""
        if self._first is not None:
            self._call_first()
        if self._buffer:
            data, self._buffer = self._buffer, _EMPTY  # handed over, not copied
            self._writer.submit(self.path, data, None, self._depth)

    def flush_then(self, written: Written) -> None:
        """Hand what is buffered to the writer; `written` is called once it is in the file."""
        if self._first is not None:
            self._call_first()
        data, self._buffer = self._buffer, _EMPTY
        self._writer.submit(self.path, data, written, self._depth)

    def flush_durable(self) -> asyncio.Future[None]:
        """Hand what is buffered to the writer; the future resolves once it is in the file."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def written(error: RolloutError | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.flush_then(written)
        return future
