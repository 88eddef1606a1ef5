"""A batch's input: a CSV or JSONL file read as a stream, never held in memory whole.

`scan` reads it once before anything runs: its SHA-256 (a journal belongs to one input),
whether it is UTF-8, whether its last line is torn, the CSV's shape, and how many items it
holds. A problem of the whole file refuses the batch with one line (`BatchError`); a bad
JSONL line is only a bad item (`Item.problem`): it fails alone and the rest run.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from attrs import define, field, frozen

from subsessions.errors import BatchError

Format = Literal["csv", "jsonl"]
_CHUNK = 1 << 20
_FORMATS: dict[str, Format] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
ITEM = 1  # in `scan`'s `starts`: an item starts on this line


@frozen
class Item:
    """One item: its line number (where its record starts), its fields, or why it is bad."""

    line: int
    fields: dict[str, Any] | None
    problem: str | None = None


@frozen
class Scan:
    path: Path
    format: Format
    sha256: str
    total: int  # items, bad ones included
    columns: tuple[str, ...] | None  # a CSV's header


def format_of(path: Path, role: str) -> Format:
    found = _FORMATS.get(path.suffix.lower())
    if found is None:
        raise BatchError(f"{role} {path} must end in .csv or .jsonl")
    return found


def scan(path: Path, starts: bytearray | None = None) -> Scan:
    """Check the whole file and count its items (two streaming passes). With `starts`, it
    becomes one byte per line of the file, ITEM where an item starts (what a journal's
    endings are checked against: its size is the input's, never a number a journal gave)."""
    kind = format_of(path, "input")
    digest, lines, torn = _bytes_pass(path)
    if starts is not None:
        starts[:] = bytes(lines + 1)
    total = 0
    reader = CsvItems(path, torn_tail=torn) if kind == "csv" else None
    for item in jsonl_items(path) if reader is None else reader:
        total += 1
        if starts is not None:
            starts[item.line] = ITEM
        if reader is None and torn and item.problem is not None and item.line == lines:
            raise BatchError(f"input {path}: its last line ({lines}) is torn (no newline at "
                             "the end and not a whole record); complete or remove it")
    return Scan(path, kind, digest, total, None if reader is None else reader.columns)


def open_input(path: Path) -> int:
    """A read-only descriptor of the input. Anything but a regular file (a FIFO, a device, a
    folder) is refused before it is opened: opening a FIFO waits for a writer, reading a
    device may never end. Opened without waiting and checked again, in case it was swapped."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise BatchError(f"input {path} does not exist") from None
    except OSError as exc:
        raise BatchError(f"input {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_a_file(path, info.st_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise BatchError(f"input {path} cannot be read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_file(path, mode)
    os.set_blocking(fd, True)
    return fd


def _not_a_file(path: Path, mode: int) -> BatchError:
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "not a file")
    return BatchError(f"input {path} is {kind}, not a regular file; name a .csv or .jsonl file")


def _bytes_pass(path: Path) -> tuple[str, int, bool]:
    """The file's SHA-256, checked as UTF-8; its number of lines; and whether its last line
    has no newline at its end."""
    fd = open_input(path)
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines = 0
    last = b"\n"
    with os.fdopen(fd, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                line = lines + chunk.count(b"\n", 0, exc.start) + 1
                raise BatchError(f"input {path} is not UTF-8 text (line {line}); save it as "
                                 "UTF-8") from None
            lines += chunk.count(b"\n")
            last = chunk[-1:]
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise BatchError(f"input {path} is not UTF-8 text (line {lines + 1}); its last "
                             "character is cut") from None
    torn = last != b"\n"
    return digest.hexdigest(), lines + torn, torn


def jsonl_items(path: Path) -> Iterator[Item]:
    """Each non-blank line as an item; one that is not a JSON object is a bad item."""
    with os.fdopen(open_input(path), "rb") as file:
        for number, raw in enumerate(file, 1):
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield Item(number, None, f"line {number} is not valid JSON ({exc})")
                continue
            if not isinstance(value, dict):
                yield Item(number, None, f"line {number} is not a JSON object")
                continue
            yield Item(number, value)


@define
class CsvItems:
    """A CSV's rows as items (the first row names the columns). A row with the wrong
    number of fields, or a quote left open, refuses the batch: the file is malformed."""

    path: Path
    _torn_tail: bool = False  # the file does not end with a newline
    columns: tuple[str, ...] | None = field(default=None, init=False)  # known once read

    def __iter__(self) -> Iterator[Item]:
        path = self.path
        with open(open_input(path), encoding="utf-8-sig", newline="") as file:
            reader = csv.reader(file, strict=True)
            header = self._header(reader)
            width = len(header)
            while True:
                start = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    raise self._bad(start, reader.line_num, str(exc)) from None
                if not row:
                    continue
                if len(row) != width:
                    raise self._bad(start, reader.line_num,
                                    f"{len(row)} fields where the header has {width}")
                yield Item(start, dict(zip(header, row, strict=True)))

    def _header(self, reader: Any) -> tuple[str, ...]:
        try:
            header = next((row for row in reader if row), None)
        except csv.Error as exc:
            raise self._bad(1, reader.line_num, str(exc)) from None
        if header is None:
            raise BatchError(f"input {self.path} is empty: its first line must name the columns")
        names = tuple(name.strip() for name in header)
        if len(set(names)) != len(names) or not all(names):
            raise BatchError(f"input {self.path} line 1: the column names must be distinct and "
                             "non-empty")
        self.columns = names
        return names

    def _bad(self, line: int, end: int, problem: str) -> BatchError:
        """A malformed row; on the last line of a file with no final newline, a torn one."""
        if self._torn_tail and _is_last_line(self.path, end):
            return BatchError(f"input {self.path}: its last line ({line}) is torn (no newline "
                              "at the end and not a whole record); complete or remove it")
        return BatchError(f"input {self.path} line {line}: {problem}")


def _is_last_line(path: Path, line: int) -> bool:
    with os.fdopen(open_input(path), "rb") as file:
        return sum(1 for _ in file) <= line


def items(scanned: Scan) -> Iterator[Item]:
    """The items of a scanned input, streamed in file order."""
    if scanned.format == "csv":
        return iter(CsvItems(scanned.path))
    return jsonl_items(scanned.path)
