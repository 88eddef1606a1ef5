"""Following a rollout as its session writes it, like `tail -f`, until the task ends.

The writer appends whole lines and never rewrites, so following is polling the
file size and reading what was added; a partial line waits for its newline.
It stops at a terminal record, or when the writing process is gone (the
session is then `interrupted`), so it never waits on a session nobody runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from subsessions.errors import RolloutError
from subsessions.rollouts.status import TASK_EVENTS, status_of, writer_alive, writer_claim
from subsessions.rollouts.summary import RolloutSummary, as_record

_WINDOW = 8192
FOLLOWED = ("running", "idle")  # states in which more may still be written


class Tail:
    """The last lines of a rollout, then (with `follow`) the lines it gains."""

    def __init__(self, summary: RolloutSummary, interval: float = 0.25) -> None:
        self.path = summary.path
        self.creator = summary.creator  # the writer session_meta names
        self.status = summary.status  # as of `offset`; updated by what follows
        claim = (summary.task_event or {}).get("writer")
        self.writer: dict[str, Any] = claim if isinstance(claim, dict) else self.creator
        self.offset = summary.size  # the end of the last whole line read
        self.interval = interval
        self.torn = b""  # a partial last line, waiting for the rest
        self.writer_gone = False  # why following stopped, if it was not a terminal record

    def __repr__(self) -> str:
        return f"<Tail {self.path} at {self.offset} {self.status}>"

    def last(self, count: int, wanted: Callable[[bytes], bool] | None = None) -> list[bytes]:
        """Up to `count` whole lines ending at `offset` (session_meta included, as tail would),
        counting only the `wanted` ones (a view that hides some records counts what it shows)."""
        if count <= 0:
            return []
        window = _WINDOW
        with _File(self.path) as f:
            while True:
                low = max(0, self.offset - window)
                lines = f.pread(self.offset - low, low).split(b"\n")
                lines.pop()  # `offset` is just after a newline: this is the empty string
                if low > 0 and lines:
                    lines.pop(0)
                lines = [x for x in lines if x.strip() and (wanted is None or wanted(x))]
                if len(lines) >= count or low == 0:
                    return lines[-count:]
                window *= 4

    def follow(self, sleep: Callable[[float], None] = time.sleep) -> Iterator[bytes]:
        """Whole lines as they are written, until the task ends or the writer is gone."""
        while self.status in FOLLOWED:
            lines = self._read_more()
            if not lines:
                if writer_alive(self.writer):
                    sleep(self.interval)
                    continue
                lines = self._read_more()  # its last words, written just before it went
                if not lines:
                    self.writer_gone = True
                    if self.status == "running":
                        self.status = "interrupted"
                    return
            for line in lines:
                yield line
                record = as_record(line)
                if record is not None and record["type"] == "turn_context":
                    self.writer = writer_claim(record) or self.creator  # a resumed task's writer
                if record is None or record["type"] != "event_msg":
                    continue
                payload: dict[str, Any] = record["payload"]
                if payload.get("type") in TASK_EVENTS:
                    self.status = status_of({**payload, "writer": self.writer}, self.creator)
                    if self.status not in FOLLOWED:
                        return

    def _read_more(self) -> list[bytes]:
        try:
            size = os.stat(self.path).st_size
        except OSError as exc:
            raise RolloutError(self.path, f"cannot read: {exc.strerror or exc}") from None
        start = self.offset + len(self.torn)
        if size < start:
            raise RolloutError(self.path, "the file shrank while being followed")
        if size == start:
            return []
        with _File(self.path) as f:
            data = self.torn + f.pread(size - start, start)
        lines = data.split(b"\n")
        self.torn = lines.pop()
        self.offset += len(data) - len(self.torn)
        return [line for line in lines if line.strip()]


class _File:
    """A read-only descriptor for one burst of reads; none is held while waiting."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> _File:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise RolloutError(self.path, f"cannot read: {exc.strerror or exc}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def pread(self, count: int, offset: int) -> bytes:
        try:
            return os.pread(self.fd, count, offset)
        except OSError as exc:
            raise RolloutError(self.path, f"cannot read: {exc.strerror or exc}") from None
