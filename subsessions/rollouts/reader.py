"""Reading rollouts back: tolerant of torn and malformed lines, which it skips and reports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from attrs import frozen

from subsessions.errors import RolloutError, UnknownSession, echo
from subsessions.ids import id_problem

RECORD_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg"})
TERMINAL = {"task_complete": "completed", "turn_aborted": "cancelled", "error": "failed"}


@frozen
class SkippedLine:
    line: int
    reason: str


@frozen
class Rollout:
    path: str
    meta: dict[str, Any]
    records: tuple[dict[str, Any], ...]  # every whole record after session_meta, in order
    skipped: tuple[SkippedLine, ...]

    @property
    def session_id(self) -> str:
        return str(self.meta.get("id", ""))

    @property
    def parent_id(self) -> str | None:
        source = self.meta.get("source")
        if isinstance(source, dict) and isinstance(source.get("subsession"), dict):
            parent = source["subsession"].get("parent_session_id")
            return str(parent) if parent else None
        return None

    @property
    def source_kind(self) -> str:
        source = self.meta.get("source")
        return "subsession" if isinstance(source, dict) else str(source)

    @property
    def status(self) -> str:
        """`completed`, `failed`, `cancelled` from the last task's ending; `running` if the last
        task has none yet; `idle` for a session that never ran a task."""
        status = "idle"
        for record in self.records:
            if record["type"] == "event_msg":
                kind = record["payload"].get("type")
                if kind == "task_started":
                    status = "running"
                elif kind in TERMINAL:
                    status = TERMINAL[kind]
        return status

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
        return done[-1].get("last_agent_message") if done else None

    @property
    def total_tokens(self) -> int:
        counts = self.events("token_count")
        if not counts:
            return 0
        return int(counts[-1].get("info", {}).get("total_token_usage", {}).get("total_tokens", 0))


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
    meta: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    skipped: list[SkippedLine] = []
    for number, text, whole in _lines(data):
        if not text.strip():
            continue
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            skipped.append(SkippedLine(number, "invalid JSON" if whole else "torn last line"))
            continue
        if (
            not isinstance(record, dict)
            or record.get("type") not in RECORD_TYPES
            or not isinstance(record.get("payload"), dict)
        ):
            skipped.append(SkippedLine(number, "unknown record type"))
            continue
        if meta is None:
            if record["type"] != "session_meta":
                break
            meta = record["payload"]
            continue
        records.append(record)
    if meta is None or not isinstance(meta.get("id"), str):
        raise RolloutError(path, "not a subsessions rollout (no session_meta first line)")
    return Rollout(path, meta, tuple(records), tuple(skipped))


def rollout_files(home: str | os.PathLike[str]) -> list[Path]:
    """Every rollout file under the home, oldest first (uuid7 ids sort by time)."""
    root = Path(home) / "sessions"
    found = root.glob("*/*/*/rollout-*.jsonl")
    return sorted(found, key=lambda p: p.name[-42:])


def find_rollout(home: str | os.PathLike[str], id_or_prefix: str) -> Path:
    """The rollout whose session id is or starts with `id_or_prefix`."""
    problem = id_problem(id_or_prefix)
    if problem is not None or not id_or_prefix:
        raise UnknownSession(id_or_prefix, f"not a session id: {echo(id_or_prefix)!r}")
    matches = [p for p in rollout_files(home) if p.name[-42:-6].startswith(id_or_prefix)]
    if not matches:
        raise UnknownSession(id_or_prefix)
    if len(matches) > 1:
        names = ", ".join(p.name[-42:-6] for p in matches[:10])
        raise UnknownSession(id_or_prefix, f"ambiguous id {id_or_prefix}; candidates: {names}")
    return matches[0]


def list_rollouts(
    home: str | os.PathLike[str],
    *,
    parent: str | None = None,
    source: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[Rollout]:
    """Rollouts newest first, filtered; unreadable files are left out."""
    found: list[Rollout] = []
    for path in reversed(rollout_files(home)):
        if since is not None and path.stat().st_mtime < since.timestamp():
            continue
        try:
            rollout = read_rollout(path)
        except RolloutError:
            continue
        if parent is not None and rollout.parent_id != parent:
            continue
        if source is not None and rollout.source_kind != source:
            continue
        if status is not None and rollout.status != status:
            continue
        found.append(rollout)
        if limit is not None and len(found) >= limit:
            break
    return found


@frozen
class RolloutNode:
    rollout: Rollout
    children: tuple[RolloutNode, ...]


def rollout_tree(home: str | os.PathLike[str], root_id: str | None = None) -> list[RolloutNode]:
    """Top-level sessions (or the one named) with their descendants, oldest first."""
    everything = list(reversed(list_rollouts(home)))
    by_parent: dict[str | None, list[Rollout]] = {}
    ids = {r.session_id for r in everything}
    for rollout in everything:
        parent = rollout.parent_id if rollout.parent_id in ids else None
        by_parent.setdefault(parent, []).append(rollout)

    def build(rollout: Rollout) -> RolloutNode:
        kids = by_parent.get(rollout.session_id, [])
        return RolloutNode(rollout, tuple(build(k) for k in kids))

    if root_id is None:
        return [build(r) for r in by_parent.get(None, [])]
    path = find_rollout(home, root_id)
    chosen = next(r for r in everything if r.path == str(path))
    return [build(chosen)]
