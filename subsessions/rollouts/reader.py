"""Reading a whole rollout back: tolerant of torn and malformed lines, which it skips and reports.

A crash can leave a torn last line and hands can leave junk anywhere, but a
transcript is still worth reading up to and around them, so only a file whose
first line is not a `session_meta` is refused (it is not one of ours).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from attrs import frozen

from subsessions.errors import RolloutError
from subsessions.rollouts.files import find_rollout, rollout_files
from subsessions.rollouts.listing import (
    RolloutNode,
    RolloutPage,
    list_rollouts,
    rollout_tree,
)
from subsessions.rollouts.status import TASK_EVENTS, status_of, writer_claim
from subsessions.rollouts.summary import (
    NOT_OURS,
    MetaView,
    RolloutSummary,
    as_record,
    duration,
    meta_record,
    token_total,
)
from subsessions.rollouts.values import optional_stamp, text

__all__ = [
    "Rollout",
    "RolloutNode",
    "RolloutPage",
    "RolloutSummary",
    "SkippedLine",
    "find_rollout",
    "list_rollouts",
    "read_rollout",
    "rollout_files",
    "rollout_tree",
]

TORN = "torn last line"
INVALID = "invalid JSON"
UNKNOWN = "unknown record type"


@frozen
class SkippedLine:
    line: int  # 1-based, counting blank lines too, as an editor would
    reason: str  # TORN, INVALID or UNKNOWN


@frozen
class Rollout(MetaView):
    path: str
    meta: dict[str, Any]
    records: tuple[dict[str, Any], ...]  # every whole record after session_meta, in order
    skipped: tuple[SkippedLine, ...]
    meta_stamp: str | None = None  # the timestamp of the session_meta line itself

    @property
    def status(self) -> str:
        """completed, failed or cancelled from how the last task ended; running or interrupted
        when it has no ending yet (is the writer alive?); idle if no task ever started."""
        last: dict[str, Any] | None = None
        records = self.records
        for at in range(len(records) - 1, -1, -1):
            record = records[at]
            if record["type"] == "event_msg" and record["payload"].get("type") in TASK_EVENTS:
                last = record["payload"]
                if last.get("type") == "task_started":
                    context = next((r for r in reversed(records[:at])
                                    if r["type"] == "turn_context"), None)
                    claim = writer_claim(context) if context is not None else None
                    if claim is not None:
                        last = {**last, "writer": claim}
                break
        return status_of(last, self.meta)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [
            r["payload"]
            for r in self.records
            if r["type"] == "event_msg" and r["payload"].get("type") == kind
        ]

    def response_items(self) -> list[dict[str, Any]]:
        return [r["payload"] for r in self.records if r["type"] == "response_item"]

    @property
    def last_agent_message(self) -> str | None:
        done = self.events("task_complete")
        answer = done[-1].get("last_agent_message") if done else None
        return None if answer is None else text(answer)

    @property
    def total_tokens(self) -> int:
        counts = self.events("token_count")
        return (token_total(counts[-1]) or 0) if counts else 0

    @property
    def duration(self) -> float | None:
        """Seconds from the session's first record to its last."""
        last = self.records[-1].get("timestamp") if self.records else self.meta_stamp
        return duration(self.meta_stamp, optional_stamp(last))


def _lines(data: bytes) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, text, whether it ended with a newline)."""
    start = 0
    number = 0
    while start < len(data):
        number += 1
        end = data.find(b"\n", start)
        if end < 0:
            yield number, data[start:], False
            return
        yield number, data[start:end], True
        start = end + 1


def read_rollout(path: str | os.PathLike[str]) -> Rollout:
    """Parse a rollout; raises `RolloutError` naming the file when it is not one of ours."""
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RolloutError(path, f"cannot read: {exc.strerror or exc}") from None
    lines = _lines(data)
    first = next(lines, None)
    if first is None or not first[2]:
        raise RolloutError(path, NOT_OURS)
    head = meta_record(first[1], path)
    records: list[dict[str, Any]] = []
    skipped: list[SkippedLine] = []
    for number, line, whole in lines:
        if not line.strip():
            continue
        record = as_record(line)
        if record is not None:
            records.append(record)
        elif not whole:
            skipped.append(SkippedLine(number, TORN))
        else:
            skipped.append(SkippedLine(number, _why(line)))
    return Rollout(
        path, head["payload"], tuple(records), tuple(skipped), optional_stamp(head.get("timestamp"))
    )


def _why(text: bytes) -> str:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return INVALID
    return UNKNOWN
