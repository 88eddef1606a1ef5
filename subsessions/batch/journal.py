"""A batch's journal: `home/batches/{batch_id}.jsonl` (0600), the one truth of a batch.

Line 1 records the options (a CLI batch's model options too, never a key) and the input's
SHA-256; then one line per item's ending, carrying the item's output line too, so the output
file can always be rebuilt from it. Each line is one `write` to an `O_APPEND` descriptor
before the output line is written: a SIGKILL loses no ending that reached the output, and a
resume runs no completed item again. A journal is locked (`flock`) while a batch runs it; one
whose lines do not fit its input (an item that is not one of the input's, a second ending
after a completed one, an unknown status, a line that is not JSON) is damaged: refused,
never rewritten. A torn last line (a crash mid-write) is ended with a newline and ignored.
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
from subsessions.batch.source import ITEM
from subsessions.budget import Budget
from subsessions.errors import BatchError
from subsessions.ids import is_session_id
from subsessions.rollouts.files import folder_problem, make_private_dirs, secure_home

_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW
_HEADER_TYPES: dict[str, type | tuple[type, ...]] = {
    "batch_id": str, "session_type": str, "input_path": str, "input_sha256": str, "total": int,
    "prompt": str, "output_path": str, "max_concurrency": int, "budget": (dict, type(None))}
_OPTION_TYPES = (str, int, float, bool, type(None))
COMPLETED = "completed"
STATUSES = frozenset({COMPLETED, "failed", "cancelled"})
_DONE = 2  # in `_marks`, beside source.ITEM: the item has a completed ending


def journal_path(home: Path, batch_id: str) -> Path:
    return home / "batches" / f"{batch_id}.jsonl"


@define(eq=False)
class Journal:
    path: Path
    header: dict[str, Any]
    _fd: int
    # a resumed batch's: one byte per line of its input (`source.scan`), ITEM | _DONE
    _marks: bytearray = field(factory=bytearray)
    completed: int = 0  # items with a completed ending
    _torn: bool = False  # its last line was cut by a crash (ended when it runs again)

    @classmethod
    def create(cls, home: Path, header: dict[str, Any]) -> Journal:
        """A new batch's journal; one that exists already (an id used twice) is refused."""
        secure_home(home)
        folder = home / "batches"
        with contextlib.suppress(OSError):  # one that cannot be made fails at the open
            make_private_dirs(str(folder))
        problem = folder_problem(str(folder))
        if problem is not None:
            raise BatchError(f"refusing the batch journal folder: {problem}")
        path = journal_path(home, header["batch_id"])
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _FLAGS,
                         0o600)
        except FileExistsError:
            raise BatchError(f"batch {header['batch_id']} exists already ({path}); it is left "
                             "as it is: start the batch again") from None
        except OSError as exc:
            raise BatchError(f"batch journal {path} cannot be made: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else holds it
            journal = cls(path, {"type": "batch", **header, "created_at": time.time()}, fd)
            journal._write(journal.header)
        except BaseException:
            os.close(fd)
            raise
        return journal

    @classmethod
    def open(cls, home: Path, batch_id: str) -> Journal:
        """An existing batch's journal, locked for a resume; its header read and checked (its
        endings are read by `load`, once the input is known)."""
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
            journal._read_header(batch_id)
        except BaseException:
            os.close(fd)
            raise
        return journal

    def _read_header(self, batch_id: str) -> None:
        for _number, _raw, record in self._records():
            if record is None or record.get("type") != "batch" or record.get(
                    "batch_id") != batch_id or not all(
                    isinstance(record.get(key, ...), kind) and not isinstance(
                        record.get(key), bool) for key, kind in _HEADER_TYPES.items()):
                break
            options = record.get("options", {})
            if record["total"] < 0 or record["max_concurrency"] < 1 or not isinstance(
                    options, dict) or not all(isinstance(value, _OPTION_TYPES)
                                              for value in options.values()):
                break
            if record["budget"] is not None:
                try:
                    Budget(**record["budget"])
                except (TypeError, ValueError):
                    break
            self.header = record
            return
        raise self.damaged(1, "its first line is not this batch's header")

    def load(self, starts: bytearray, total: int) -> None:
        """Read the endings, each checked against the input's items (`starts`, from
        `source.scan`, which this journal then keeps). A torn last line is ended when the
        batch runs again (`resumed`): until then, nothing is written."""
        if total != self.header["total"]:
            raise self.damaged(1, f"it counts {self.header['total']} items where its input "
                               f"has {total}")
        self._marks = marks = starts
        for number, raw, record in self._records():
            if number == 1:
                continue
            if record is None:
                if raw.endswith(b"\n"):
                    raise self.damaged(number, "not a JSON object")
                self._torn = True  # the last line, cut by a crash: ended, then ignored
            elif record.get("type") == "item":
                item, status = record.get("item"), record.get("status")
                output = record.get("output")
                if not (isinstance(item, int) and isinstance(status, str) and isinstance(
                        output, str) and output.endswith("\n")) or isinstance(item, bool):
                    raise self.damaged(number, "an item's ending lacks its line, status or "
                                       "output")
                if status not in STATUSES:
                    raise self.damaged(number, f"unknown status {status[:40]!r}")
                if not 0 < item < len(marks) or not marks[item] & ITEM:
                    raise self.damaged(number, f"no item of the input starts on line {item}")
                if marks[item] & _DONE:
                    raise self.damaged(number, f"a second ending of item {item}, which had "
                                       "completed")
                if status == COMPLETED:
                    marks[item] |= _DONE
                    self.completed += 1
            elif record.get("type") != "resume":
                raise self.damaged(number, "an unknown record")

    def _records(self) -> Iterator[tuple[int, bytes, dict[str, Any] | None]]:
        with open(self.path, "rb") as file:
            for number, raw in enumerate(file, 1):
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    record = None
                yield number, raw, record if isinstance(record, dict) else None

    def damaged(self, line: int, what: str) -> BatchError:
        return BatchError(f"batch journal {self.path} is damaged (line {line}: {what}); it is "
                          "left as it is")

    def is_completed(self, item: int) -> bool:
        return item < len(self._marks) and bool(self._marks[item] & _DONE)

    def completed_outputs(self) -> Iterator[str]:
        """The output lines of completed items, in the order they completed."""
        for _number, _raw, record in self._records():
            if record is not None and record.get("type") == "item" and record.get(
                    "status") == COMPLETED:
                yield record["output"]  # checked by `load`

    def resumed(self, options: dict[str, Any]) -> None:
        """A resumed run begins (after a torn last line is ended)."""
        if self._torn:
            self._torn = False
            write_all(self._fd, b"\n")
        self._write({"type": "resume", "at": time.time(), **options})

    def ended(self, item: int, status: str, session_id: str | None, error: str | None,
              output: str) -> None:
        """An item's ending: written (whole, in one write) before its output line."""
        self._write({"type": "item", "item": item, "status": status, "session_id": session_id,
                     "error": error, "output": output})

    def _write(self, record: dict[str, Any]) -> None:
        try:
            write_all(self._fd, orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        except OSError as exc:
            raise BatchError(f"batch journal {self.path} cannot be written: {exc.strerror}; "
                             "the batch stops") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with it
            self._fd = -1
