"""A batch's output file: one line per item in the order items end, JSONL or CSV.

JSONL lines are `{"item", "status", "result", "error", "session_id", "usage"}`; a CSV has
the input's columns (a JSONL input's: the fields the prompt names) and then those, each
cell that a spreadsheet would run as a formula written as text (a leading `'`). A
resume rebuilds the file from the journal (completed items only, written to a temporary
file and renamed over it), so each item ends up with exactly one line.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from attrs import define

from subsessions.batch.source import Format
from subsessions.errors import BatchError
from subsessions.rollouts.files import temporary_name

OURS = ("item", "status", "result", "error", "session_id", "usage")
# OWASP's CSV injection rule (CWE-1236): a cell starting so is a formula to a spreadsheet
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_HELD_LINES = 4096  # lines of a rebuilt output written at once


@define(eq=False)
class Output:
    path: Path
    format: Format
    columns: tuple[str, ...]  # the input columns a CSV output repeats
    properties: tuple[str, ...] = ()  # a typed result's top-level properties (CSV columns)
    _fd: int = -1

    @classmethod
    def plan(cls, path: Path, format: Format, columns: tuple[str, ...],
             output_schema: Mapping[str, Any] | None = None) -> Output:
        clash = sorted(set(columns) & set(OURS)) if format == "csv" else []
        if clash:
            raise BatchError(f"output {path}: the input's column {clash[0]!r} is also an output "
                             "column; write JSONL output (.jsonl) instead")
        found = (output_schema or {}).get("properties")
        properties = tuple(found) if isinstance(found, dict) and format == "csv" else ()
        return cls(path, format, columns, properties)

    @property
    def header(self) -> list[str]:
        """A CSV's columns: the input's, ours, then a typed result's properties (named as the
        property, or `result.{name}` where another column has that name)."""
        taken = {*self.columns, *OURS}
        return [*self.columns, *OURS,
                *(f"result.{name}" if name in taken else name for name in self.properties)]

    def line(self, item: int, status: str, result: Any, error: str | None,
             session_id: str | None, usage: dict[str, Any] | None,
             fields: Mapping[str, Any] | None) -> str:
        """One item's output line (with its newline)."""
        if self.format == "jsonl":
            return orjson.dumps({"item": item, "status": status, "result": result,
                                 "error": error, "session_id": session_id, "usage": usage},
                                option=orjson.OPT_APPEND_NEWLINE).decode()
        given = fields or {}
        values = [_cell(given.get(name)) for name in self.columns]
        text = result if isinstance(result, str) else (
            "" if result is None else orjson.dumps(result).decode())
        values += [str(item), status, text, error or "", session_id or "",
                   "" if usage is None else orjson.dumps(usage).decode()]
        typed = result if isinstance(result, dict) else {}
        values += [_cell(typed.get(name)) for name in self.properties]
        return _csv_line(values)

    def start(self, previous: Iterable[str] = ()) -> None:
        """Write the file afresh (a CSV's header, then `previous` lines) and keep it open
        for appending. It is written under a temporary name in its folder, made the way a
        rollout is (a new name, exclusive, never through a symlink), then renamed over it."""
        temporary = temporary_name(str(self.path))
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_APPEND | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise BatchError(f"output {self.path} cannot be written: {exc.strerror}") from None
        try:
            held = [_csv_line(self.header)] if self.format == "csv" else []
            for line in previous:
                held.append(line)
                if len(held) >= _HELD_LINES:
                    write_all(fd, "".join(held).encode())
                    held.clear()
            write_all(fd, "".join(held).encode())
            os.replace(temporary, self.path)
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(exc, OSError):
                raise BatchError(f"output {self.path} cannot be written: {exc.strerror}") from None
            raise
        self._fd = fd

    def append(self, line: str) -> None:
        try:
            write_all(self._fd, line.encode())
        except OSError as exc:
            raise BatchError(f"output {self.path} cannot be written: {exc.strerror}; the batch "
                             "stops (its journal has every ending)") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _csv_line(values: list[str]) -> str:
    """One CSV row, ended by `\n`; a cell a spreadsheet would take for a formula gets a
    leading `'`. Written with `\r\n` as the terminator, the one way `csv` quotes a cell
    holding a lone `\r` (a reader's line break), which is then cut back to `\n`."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow(
        "'" + value if value.startswith(FORMULA_STARTS) else value for value in values)
    return buffer.getvalue()[:-2] + "\n"
