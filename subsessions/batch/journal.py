"""A batch's journal: `home/batches/{batch_id}.jsonl` (0600), the one truth of a batch.

Line 1 records the options and the input's SHA-256; then one line per item's ending,
carrying the item's output line too, so the output file can always be rebuilt from it.
Each line is one `write` to an `O_APPEND` descriptor before the output line is written: a
SIGKILL loses no ending that reached the output, and a resume runs no completed item again.
A journal is locked (`flock`) while a batch runs it; a damaged one is refused, never
rewritten; a torn last line (a crash mid-write) is ended with a newline and ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from attrs import define, field

from subsessions.batch.output import write_all
from subsessions.errors import BatchError
from subsessions.ids import is_session_id
from subsessions.rollouts.files import folder_problem, make_private_dirs, secure_home

_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW
_HEADER_KEYS = ("batch_id", "session_type", "input_path", "input_sha256", "total", "prompt",
                "output_path", "max_concurrency", "budget")
COMPLETED = "completed"


def journal_path(home: Path, batch_id: str) -> Path:
    return home / "batches" / f"{batch_id}.jsonl"


@define(eq=False)
class Journal:
    path: Path
    header: dict[str, Any]
    _fd: int
    _done: bytearray = field(factory=bytearray)  # one byte per line number: 1 = completed
    completed: int = 0  # items with a completed ending

    @classmethod
    def create(cls, home: Path, header: dict[str, Any]) -> Journal:
        secure_home(home)
        folder = home / "batches"
        with contextlib.suppress(OSError):  # one that cannot be made fails at the open
            make_private_dirs(str(folder))
        problem = folder_problem(str(folder))
        if problem is not None:
            raise BatchError(f"refusing the batch journal folder: {problem}")
        path = journal_path(home, header["batch_id"])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _FLAGS, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else holds it
        journal = cls(path, {"type": "batch", **header, "created_at": time.time()}, fd)
        journal._write(journal.header)
        return journal

    @classmethod
    def open(cls, home: Path, batch_id: str) -> Journal:
        """An existing batch's journal, read and locked for a resume."""
        path = journal_path(home, batch_id)
        if not isinstance(batch_id, str) or not is_session_id(batch_id):
            raise BatchError(f"unknown batch {batch_id[:80]!r}: a batch id is the uuid a batch "
                             "printed when it started")
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | _FLAGS)
        except FileNotFoundError:
            raise BatchError(f"unknown batch {batch_id}: no journal {path}") from None
        except OSError as exc:
            raise BatchError(f"batch journal {path} cannot be opened: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BatchError(f"batch {batch_id} is running in another process") from None
            journal = cls(path, {}, fd)
            journal._read(batch_id)
        except BaseException:
            os.close(fd)
            raise
        return journal

    def _read(self, batch_id: str) -> None:
        torn = False
        for number, raw, record in self._records():
            if record is None:
                if raw.endswith(b"\n"):
                    raise self._damaged(number, "not a JSON object")
                torn = True  # the last line, cut by a crash: ended below, then ignored
                continue
            if number == 1:
                if record.get("type") != "batch" or record.get("batch_id") != batch_id or any(
                        key not in record for key in _HEADER_KEYS):
                    raise self._damaged(1, "its first line is not this batch's header")
                self.header = record
            elif record.get("type") == "item":
                if not (isinstance(record.get("item"), int) and isinstance(
                        record.get("status"), str) and isinstance(record.get("output"), str)):
                    raise self._damaged(number, "an item's ending lacks its line, status or "
                                        "output")
                if record["status"] == COMPLETED:
                    self._mark(record["item"])
            elif record.get("type") != "resume":
                raise self._damaged(number, "an unknown record")
        if not self.header:
            raise self._damaged(1, "it has no header")
        if torn:
            os.write(self._fd, b"\n")

    def _records(self) -> Iterator[tuple[int, bytes, dict[str, Any] | None]]:
        with open(self.path, "rb") as file:
            for number, raw in enumerate(file, 1):
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    record = None
                yield number, raw, record if isinstance(record, dict) else None

    def _damaged(self, line: int, what: str) -> BatchError:
        return BatchError(f"batch journal {self.path} is damaged (line {line}: {what}); it is "
                          "left as it is")

    def _mark(self, item: int) -> None:
        done = self._done
        if item >= len(done):
            done.extend(bytes(max(item + 1 - len(done), len(done))))
        if not done[item]:
            done[item] = 1
            self.completed += 1

    def is_completed(self, item: int) -> bool:
        return item < len(self._done) and bool(self._done[item])

    def completed_outputs(self) -> Iterator[str]:
        """The output lines of completed items, in the order they completed."""
        for _number, _raw, record in self._records():
            if record is not None and record.get("type") == "item" and record.get(
                    "status") == COMPLETED:
                yield record["output"]  # checked when the journal was opened

    def resumed(self, options: dict[str, Any]) -> None:
        self._write({"type": "resume", "at": time.time(), **options})

    def ended(self, item: int, status: str, session_id: str | None, error: str | None,
              output: str) -> None:
        """An item's ending: written (whole, in one write) before its output line."""
        self._write({"type": "item", "item": item, "status": status, "session_id": session_id,
                     "error": error, "output": output})
        if status == COMPLETED:
            self._mark(item)

    def _write(self, record: dict[str, Any]) -> None:
        write_all(self._fd, orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with it
            self._fd = -1
