"""A batch's output file: one line per item in the order items end, JSONL or CSV.

JSONL lines are `{"item", "status", "result", "error", "session_id", "usage"}`; a CSV has
the input's columns (a JSONL input's: the fields the prompt names) and then those. A
resume rebuilds the file from the journal (completed items only, written to a temporary
file and renamed over it), so each item ends up with exactly one line.
"""

from __future__ import annotations

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

OURS = ("item", "status", "result", "error", "session_id", "usage")


@define(eq=False)
class Output:
    path: Path
    format: Format
    columns: tuple[str, ...]  # the input columns a CSV output repeats
    _fd: int = -1

    @classmethod
    def plan(cls, path: Path, format: Format, columns: tuple[str, ...]) -> Output:
        clash = sorted(set(columns) & set(OURS)) if format == "csv" else []
        if clash:
            raise BatchError(f"output {path}: the input's column {clash[0]!r} is also an output "
                             "column; write JSONL output (.jsonl) instead")
        return cls(path, format, columns)

    def line(self, item: int, status: str, result: str | None, error: str | None,
             session_id: str | None, usage: dict[str, Any] | None,
             fields: Mapping[str, Any] | None) -> str:
        """One item's output line (with its newline)."""
        if self.format == "jsonl":
            return orjson.dumps({"item": item, "status": status, "result": result,
                                 "error": error, "session_id": session_id, "usage": usage},
                                option=orjson.OPT_APPEND_NEWLINE).decode()
        given = fields or {}
        values = [_cell(given.get(name)) for name in self.columns]
        values += [str(item), status, result or "", error or "", session_id or "",
                   "" if usage is None else orjson.dumps(usage).decode()]
        return _csv_line(values)

    def start(self, previous: Iterable[str] = ()) -> None:
        """Write the file afresh (a CSV's header, then `previous` lines) and keep it open
        for appending."""
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "w", encoding="utf-8", newline="") as file:
                if self.format == "csv":
                    file.write(_csv_line([*self.columns, *OURS]))
                for line in previous:
                    file.write(line)
            os.replace(temporary, self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
                               | os.O_NOFOLLOW)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise BatchError(f"output {self.path} cannot be written: {exc.strerror}") from None

    def append(self, line: str) -> None:
        write_all(self._fd, line.encode())

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
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()
