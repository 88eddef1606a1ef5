"""What a listing needs from a rollout, read from its first line and its last few KB.

A rollout only grows at the end, and everything a list row shows is either in
`session_meta` (line 1) or near the end: the last task record decides the
status and the last `token_count` carries the session's running total. So a
summary costs one open, one read of the head and, for files longer than that,
one read of the tail; the window doubles only when the tail holds neither.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from attrs import field, frozen

from subsessions.errors import RolloutError
from subsessions.rollouts.status import TASK_EVENTS, outcome, status_of, writer_claim
from subsessions.rollouts.values import optional_stamp, optional_text, parse_stamp, text

RECORD_TYPES = ("session_meta", "turn_context", "response_item", "event_msg")
NOT_OURS = "not a subsessions rollout (no session_meta first line)"

_CHUNK = 8192


def spawn_of(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A child's spawn: `parent` and `depth` (and `call_id` where known), from Codex's
    sub-agent `source` (`subagent.thread_spawn`, ours and Codex's own) or from ours before
    it (`subsession.parent_session_id`); None for a top-level session."""
    source = meta.get("source")
    if not isinstance(source, dict):
        return None
    agent = source.get("subagent")
    spawn = agent.get("thread_spawn") if isinstance(agent, dict) else None
    if isinstance(spawn, dict):
        ours = meta.get("subsession")
        return {"parent": optional_text(spawn.get("parent_thread_id")),
                "depth": spawn.get("depth"),
                "call_id": ours.get("call_id") if isinstance(ours, dict) else None}
    old = source.get("subsession")
    if isinstance(old, dict):
        return {"parent": optional_text(old.get("parent_session_id")), "depth": old.get("depth"),
                "call_id": old.get("call_id")}
    return None


def parent_of(meta: dict[str, Any]) -> str | None:
    spawn = spawn_of(meta)
    return spawn["parent"] if spawn is not None else None


def source_kind_of(meta: dict[str, Any]) -> str:
    """`cli`, `exec`, `mcp` or `subsession` (a sub-agent's `source`, in any of its shapes)."""
    source = meta.get("source")
    if isinstance(source, dict):
        kind = str(next(iter(source), "unknown"))
        return "subsession" if kind == "subagent" else kind
    return text(source) or "unknown"


def instructions_of(meta: dict[str, Any]) -> str:
    """`base_instructions.text` (Codex's field), or `instructions` (ours before it)."""
    base = meta.get("base_instructions")
    if isinstance(base, dict) and isinstance(base.get("text"), str):
        return str(base["text"])
    old = meta.get("instructions")
    return old if isinstance(old, str) else ""


class MetaView:
    """What the `session_meta` payload says, read from it on demand (for whole rollouts)."""

    __slots__ = ()
    meta: dict[str, Any]

    @property
    def session_id(self) -> str:
        return text(self.meta.get("id"))

    @property
    def parent_id(self) -> str | None:
        return parent_of(self.meta)

    @property
    def source_kind(self) -> str:
        return source_kind_of(self.meta)

    @property
    def profile(self) -> str | None:
        return optional_text(self.meta.get("session_type"))

    @property
    def model(self) -> str | None:
        return optional_text(self.meta.get("model"))


def as_record(line: bytes) -> dict[str, Any] | None:
    """The record a line holds, or None if it is not JSON or not a known record shape."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if (
        isinstance(record, dict)
        and record.get("type") in RECORD_TYPES
        and isinstance(record.get("payload"), dict)
    ):
        return record
    return None


def meta_record(line: bytes, path: str) -> dict[str, Any]:
    """The `session_meta` record on line 1, or `RolloutError` naming the file."""
    record = as_record(line)
    if (
        record is None
        or record["type"] != "session_meta"
        or not isinstance(record["payload"].get("id"), str)
    ):
        raise RolloutError(path, NOT_OURS)
    return record


def duration(first: str | None, last: str | None) -> float | None:
    start, end = parse_stamp(first), parse_stamp(last)
    if start is None or end is None:
        return None
    return max(0.0, end - start)


@frozen
class RolloutSummary:
    """One list row: who the session is (from its session_meta) and how it stands.

    Only what a row shows is kept, so 10,000 rows stay small; `read_rollout`
    has the whole meta. `status` is as of reading: it does not change later.
    What a row shows is made text here, whatever the file (or the index) held.
    """

    key: str  # the id in the file name: the sort key and the pagination cursor
    path: str
    session_id: str = field(converter=text)
    started: str | None = field(converter=optional_stamp)  # the session_meta's timestamp
    source_kind: str = field(converter=text)  # cli, exec, mcp or subsession
    parent_id: str | None = field(converter=optional_text)
    profile: str | None = field(converter=optional_text)  # the session_type a child was spawned as
    model: str | None = field(converter=optional_text)
    pid: int | None  # of the process that created the session
    status: str
    tokens: int | None  # None when no model call was counted
    first_stamp: str | None = field(converter=optional_stamp)  # of the session_meta line
    last_stamp: str | None = field(converter=optional_stamp)  # of the last whole line
    size: int  # bytes of whole lines this summary reflects; a follower reads on from here
    task_event: dict[str, Any] | None = None  # the last task event's type (and reason, writer)

    @property
    def duration(self) -> float | None:
        """Seconds from the session's first record to its last."""
        return duration(self.first_stamp, self.last_stamp)

    @property
    def creator(self) -> dict[str, Any]:
        """The writer session_meta names, as `status_of` and `writer_alive` take it."""
        return {"pid": self.pid, "timestamp": self.started}


def summarise(path: str, key: str | None = None) -> RolloutSummary:
    """Summarise one rollout file; `RolloutError` naming it if it is not one of ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise RolloutError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        return _summarise(fd, path, key)
    except OSError as exc:
        raise RolloutError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _summarise(fd: int, path: str, key: str | None) -> RolloutSummary:
    head = os.read(fd, _CHUNK)
    end = head.find(b"\n")
    while end < 0 and head:  # the first line whole, however long (instructions can be MBs)
        more = os.read(fd, len(head))
        if not more:
            break
        searched = len(head)
        head += more
        end = head.find(b"\n", searched)
    if end < 0:
        raise RolloutError(path, NOT_OURS)
    record = meta_record(head[:end], path)
    meta: dict[str, Any] = record["payload"]
    size = os.fstat(fd).st_size
    tail = _Tail(record.get("timestamp"))
    floor = end + 1
    window = _CHUNK
    while True:
        low = max(floor, size - window)
        chunk = head[low:size] if size <= len(head) else os.pread(fd, size - low, low)
        if tail.scan(chunk, starts_mid_line=low > floor) or low <= floor:
            break
        window *= 4
    pid = meta.get("pid")
    started = optional_stamp(meta.get("timestamp")) or optional_stamp(record.get("timestamp"))
    return RolloutSummary(
        key=key or meta["id"],
        path=path,
        session_id=meta["id"],
        started=started,
        source_kind=source_kind_of(meta),
        parent_id=parent_of(meta),
        profile=meta.get("session_type"),
        model=meta.get("model"),
        pid=pid if type(pid) is int else None,
        status=status_of(tail.task_event, {"pid": pid, "timestamp": started}),
        tokens=tail.tokens,
        first_stamp=record.get("timestamp"),
        last_stamp=tail.last_stamp,
        size=low + tail.whole,
        task_event=_trimmed(tail.task_event),
    )


def _trimmed(event: dict[str, Any] | None) -> dict[str, Any] | None:
    """What status derivation needs of a task event, without its (possibly long) message."""
    if event is None:
        return None
    event = outcome(event)
    return {k: event[k] for k in ("type", "reason", "writer") if k in event}


class _Tail:
    """Reads lines newest first until it has the last task event and the token total."""

    __slots__ = ("context_pending", "last_stamp", "meta_stamp", "task_event", "tokens", "whole")

    def __init__(self, meta_stamp: object) -> None:
        self.meta_stamp = optional_stamp(meta_stamp)
        self.last_stamp = self.meta_stamp
        self.task_event: dict[str, Any] | None = None
        self.tokens: int | None = None
        self.context_pending = False  # an open task: look for the turn_context that opened it
        self.whole = 0  # bytes of the chunk up to the end of its last whole line

    def scan(self, chunk: bytes, starts_mid_line: bool) -> bool:
        """True once nothing older than this chunk can change the summary.

        Each call starts afresh, on a larger chunk ending at the same place.
        """
        self.last_stamp = self.meta_stamp
        self.task_event = None
        self.tokens = None
        self.context_pending = False
        end = chunk.rfind(b"\n")  # what follows it is a torn line, or nothing
        self.whole = end + 1
        stamped = False
        while end >= 0:
            start = chunk.rfind(b"\n", 0, end) + 1
            if start == 0 and starts_mid_line:
                return False
            line = chunk[start:end]
            end = start - 1
            if not stamped:
                record = as_record(line)
                if record is None:
                    continue
                stamped = True
                self.last_stamp = optional_stamp(record.get("timestamp")) or self.last_stamp
                self._take(record)
            elif (b"event_msg" in line and (self.task_event is None or b"token_count" in line)) or (
                self.context_pending and b"turn_context" in line
            ):
                record = as_record(line)
                if record is not None:
                    self._take(record)
            if self.task_event is not None and self.tokens is not None and not self.context_pending:
                return True
        return False

    def _take(self, record: dict[str, Any]) -> None:
        if record["type"] == "turn_context" and self.context_pending:
            self.context_pending = False  # the one that opened the task: does it name a writer?
            claim = writer_claim(record)
            if claim is not None and self.task_event is not None:
                self.task_event = {**self.task_event, "writer": claim}
            return
        if record["type"] != "event_msg":
            return
        payload = record["payload"]
        kind = payload.get("type")
        if self.task_event is None and kind in TASK_EVENTS:
            self.task_event = payload
            self.context_pending = kind == "task_started"
        elif self.tokens is None and kind == "token_count":
            self.tokens = token_total(payload)


def token_total(payload: dict[str, Any]) -> int | None:
    info = payload.get("info")
    if not isinstance(info, dict):
        return None
    total = info.get("total_token_usage")
    if isinstance(total, dict) and isinstance(total.get("total_tokens"), int):
        return int(total["total_tokens"])
    return None
