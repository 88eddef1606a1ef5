"""A cache of list rows beside the rollouts, `sessions/index.jsonl`, kept by readers.

Listing thousands of rollouts costs an open and two reads each; with the
index it costs a `stat` each. An entry is used only while its file has the
same size, mtime and inode as when it was summarised (rollouts only grow, so
any write shows), and a session with a task still open has its status derived
afresh, since only the writer's liveness can have changed. Nothing depends on
the index being there or right: a missing, foreign or corrupt index is
rebuilt, lines that do not parse are ignored, paths never come from it, and
an index that cannot be written (a read-only home) is simply not kept.

Readers append the entries they add and rewrite the file (atomically, by
rename) once most of its lines are superseded; two readers appending at once
only cost a duplicate line. The index is written only into a `sessions/` folder
nobody else can write, never through a symlink, and rewritten through a fresh
temporary file (`mkstemp`), so a name planted there cannot redirect the write.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import orjson

from subsessions.errors import RolloutError
from subsessions.rollouts.files import RolloutEntry, folder_problem
from subsessions.rollouts.status import status_of
from subsessions.rollouts.summary import RolloutSummary, summarise

INDEX_NAME = "index.jsonl"
_HEADER = {"index": "subsessions-rollouts", "version": 1}
_DIRECT = 128  # up to this many files, reading them beats loading the index


Entry = list[Any]  # a list row: see _to_entry


class SummaryIndex:
    """Summaries for one listing: read directly at first, from the index once it pays."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.folder = os.path.join(home, "sessions")
        self.path = os.path.join(self.folder, INDEX_NAME)
        self._asked = 0
        self._entries: dict[str, Entry] | None = None
        self._lines = 0
        self._fresh: list[Entry] = []

    def __repr__(self) -> str:
        loaded = "unloaded" if self._entries is None else f"{len(self._entries)} entries"
        return f"<SummaryIndex {self.path} {loaded}, {len(self._fresh)} new>"

    def summary(self, path: str, key: str) -> RolloutSummary:
        """The summary of one rollout file; `RolloutError` if it is not one."""
        self._asked += 1
        entries = self._entries
        if entries is None:
            if self._asked <= _DIRECT:
                return summarise(path, key)
            entries = self._load()
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise RolloutError(path, f"cannot read: {exc.strerror or exc}") from None
        entry = entries.get(key)
        if (
            entry is not None
            and entry[1] == stat.st_size
            and entry[2] == stat.st_mtime_ns
            and entry[3] == stat.st_ino
        ):
            cached = _from_entry(entry, path)
            if cached is not None:
                return cached
        found = summarise(path, key)  # the stat was taken first: a later write shows next time
        entry = _to_entry(found, stat)
        entries[key] = entry
        self._fresh.append(entry)
        return found

    def save(self, live: list[RolloutEntry]) -> None:
        """Write what this listing learnt; `live` is every rollout there is now."""
        if not self._fresh or self._entries is None:
            return
        if folder_problem(self.folder) is not None:  # someone else's or shared: no cache
            self._fresh = []
            return
        with contextlib.suppress(OSError):  # a cache that cannot be written is not kept
            if self._lines == 0 or self._lines > 2 * len(live):
                self._rewrite({key for key, _ in live})
            else:
                self._append(self._fresh)
        self._fresh = []

    def _load(self) -> dict[str, Entry]:
        self._entries = {}
        try:
            with open(os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
                lines = f.read().split(b"\n")
        except OSError:
            return self._entries
        if _parse(lines[0]) != _HEADER:
            return self._entries  # not ours, or another version: rebuilt on save
        self._lines = len(lines)
        for line in lines[1:]:
            entry = _parse(line)
            if isinstance(entry, list) and len(entry) == _FIELDS and isinstance(entry[0], str):
                self._entries[entry[0]] = entry
        return self._entries

    def _append(self, entries: list[Entry]) -> None:
        data = b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def _rewrite(self, live: set[str]) -> None:
        assert self._entries is not None
        lines = [_HEADER, *(e for k, e in self._entries.items() if k in live)]
        data = b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in lines)
        fd, scratch = tempfile.mkstemp(prefix=f"{INDEX_NAME}.", suffix=".tmp", dir=self.folder)
        try:
            with open(fd, "wb") as f:
                f.write(data)
            os.replace(scratch, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(scratch)
            raise
        self._lines = len(lines)


_FIELDS = 19


def _parse(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _to_entry(summary: RolloutSummary, stat: os.stat_result) -> Entry:
    event = summary.task_event or {}
    writer = event.get("writer") or {}
    return [
        summary.key, stat.st_size, stat.st_mtime_ns, stat.st_ino, summary.size,
        event.get("type"), event.get("reason"), writer.get("pid"), writer.get("timestamp"),
        summary.tokens, summary.first_stamp, summary.last_stamp, summary.session_id,
        summary.started, summary.source_kind, summary.parent_id, summary.profile,
        summary.model, summary.pid,
    ]


def _from_entry(entry: Entry, path: str) -> RolloutSummary | None:
    """The summary an entry holds, its status derived now; None if the entry is malformed."""
    (key, _, _, _, size, kind, reason, writer, since, tokens, first, last, session_id,
     started, source, parent, profile, model, pid) = entry
    # Only what could break a reader is checked: the rest is only ever shown or compared.
    if not (
        type(size) is int
        and (tokens is None or type(tokens) is int)
        and type(session_id) is str
        and type(source) is str
        and (kind is None or type(kind) is str)
    ):
        return None
    event: dict[str, Any] | None = None
    if kind is not None:
        event = {"type": kind}
        if reason is not None:
            event["reason"] = reason
        if writer is not None:
            event["writer"] = {"pid": writer, "timestamp": since}
    creator = {"pid": pid, "timestamp": started}
    return RolloutSummary(
        key=key, path=path, session_id=session_id, started=started, source_kind=source,
        parent_id=parent, profile=profile, model=model, pid=pid,
        status=status_of(event, creator), tokens=tokens, first_stamp=first, last_stamp=last,
        size=size, task_event=event,
    )
