"""Which rollouts a watch follows, and keeping their stats current by reading only appends.

A home may hold 100,000 rollouts, so a watch follows a window: the newest
`limit` top-level sessions with everything newer than the oldest of them (uuid7
names sort by creation, and a child is always newer than its parent), or one
session's tree. The window only grows backwards when a session in it names a
parent older than it, so every followed session's parent is followed too (or has
no rollout) and a parent's subtree totals are whole.

Each poll costs one `stat` per followed file and a `pread` of the bytes a file
gained; new files are found by the mtime of the day folders (`sessions/Y/M/D`),
which changes only when a name is added there. Bytes are read a chunk at a time
and folded as they come, so memory stays bounded whatever a file's size; the live
view reads at most `per_poll` bytes of a file a poll (a huge rollout shows `loading`
and catches up over polls), `--once` reads every file to its end.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from attrs import define, field

from subsessions.errors import RolloutError
from subsessions.rollouts.files import (
    RolloutEntry,
    day_folders,
    find_rollout,
    folder_entries,
    rollout_entries,
)
from subsessions.rollouts.index import SummaryIndex
from subsessions.rollouts.status import writer_alive
from subsessions.watch.stats import SessionStats

PER_POLL = 8 << 20  # the live view reads at most this much of one file per poll
_CHUNK = 1 << 20  # bytes read and folded at a time...
_LONG_CHUNK = 8 << 20  # ...or this many while a partial line longer than a chunk is held
_PENDING = 2.0  # seconds a new file may lack its first line before it shows as damaged
_FOLDERS = 2.0  # seconds between looks for new day folders (today's is looked at every poll)
_LIVENESS = 1.0  # seconds a writer's liveness is trusted before /proc is read again
_SETTLED = 4  # a session whose task has ended is looked at every this many polls


@define
class Follower:
    """The followed sessions of a home, by key; `poll()` brings them up to date."""

    home: str
    root: str | None = None  # a session id or unique prefix: follow only its tree
    limit: int | None = 50  # top-level sessions in the window; None: every one
    per_poll: int | None = PER_POLL  # bytes of one file read per poll; None: to its end
    sessions: dict[str, SessionStats] = field(factory=dict)
    hidden: int = 0  # rollouts in the home that are not followed
    bytes_read: int = 0
    _known: set[str] = field(factory=set)  # every key seen in the home
    _older: list[RolloutEntry] = field(factory=list)  # not followed yet: older than the window
    _ids: set[str] = field(factory=set)  # session ids of the tree (root mode)
    _pending: dict[str, tuple[str, float]] = field(factory=dict)  # new, no first line yet
    _folders: dict[str, int] = field(factory=dict)  # day folder -> mtime_ns
    _folders_at: float = 0.0
    _alive: dict[tuple[Any, Any], bool] = field(factory=dict)
    _alive_at: float = 0.0
    _polls: int = 0

    def open(self) -> None:
        """Find the window and read it (up to `per_poll` bytes of each file)."""
        self._folders_at = time.monotonic()
        for folder in day_folders(self.home):  # before the names: a later file shows at a poll
            with contextlib.suppress(OSError):
                self._folders[folder] = os.stat(folder).st_mtime_ns
        entries = rollout_entries(self.home)
        self._known = {key for key, _ in entries}
        if self.root is not None:
            self._open_tree(entries)
        else:
            self._open_newest(entries)

    def _open_newest(self, entries: list[RolloutEntry]) -> None:
        self._older = entries
        roots = 0
        wanted: set[str] = set()  # parents of followed sessions, not followed yet
        while self._older and (self.limit is None or roots < self.limit or wanted):
            key, path = self._older.pop()
            wanted.discard(key)
            stats = self._follow(key, path)
            parent = self._parent_key(stats)
            if parent is None:
                roots += 1
            elif parent not in self.sessions:
                wanted.add(parent)
        self.hidden = len(self._older)

    def _open_tree(self, entries: list[RolloutEntry]) -> None:
        assert self.root is not None
        root_key = Path(find_rollout(self.home, self.root)).name[-42:-6]
        index = SummaryIndex(self.home)
        start = bisect.bisect_left(entries, (root_key,))
        newer = entries[start:]
        parents: dict[str, str | None] = {}
        for key, path in reversed(newer):  # newest first, as the index is best filled
            try:
                parents[key] = index.summary(path, key).parent_id
            except RolloutError:
                parents[key] = None
        index.save(entries)
        self._follow(root_key, newer[0][1])
        for key, path in newer[1:]:
            parent = parents[key]
            if parent is not None and parent.lower() in self._ids:
                self._follow(key, path)
        self.hidden = len(entries) - len(self.sessions)

    def _follow(self, key: str, path: str) -> SessionStats:
        stats = SessionStats(key, path)
        self.sessions[key] = stats
        self._catch_up(stats)
        if stats.session_id is not None:
            self._ids.add(stats.session_id.lower())
        return stats

    def _parent_key(self, stats: SessionStats) -> str | None:
        """The parent's key if it has a rollout in the home (else the session is a root)."""
        parent = stats.parent_id.lower() if stats.parent_id is not None else None
        return parent if parent in self._known and parent != stats.key else None

    def poll(self) -> bool:
        """Read what was appended and admit new files; whether anything may have changed."""
        now = time.monotonic()
        if now - self._alive_at >= _LIVENESS:
            self._alive.clear()
            self._alive_at = now
        changed = self._admit(self._scan_folders(now), now)
        self._polls += 1
        turn = self._polls % _SETTLED
        for at, stats in enumerate(list(self.sessions.values())):
            if at % _SETTLED != turn and _settled(stats):
                continue  # an ended session grows again only if resumed: looked at less often
            changed = self._catch_up(stats) or changed
        return changed

    def alive(self, claim: dict[str, Any]) -> bool:
        """`writer_alive`, asked of /proc once per writer per second at most."""
        key = (claim.get("pid"), claim.get("timestamp"))
        found = self._alive.get(key)
        if found is None:
            found = self._alive[key] = writer_alive(claim)
        return found

    def _catch_up(self, stats: SessionStats) -> bool:
        try:
            info = os.stat(stats.path, follow_symlinks=False)
        except OSError as exc:
            return _fail(stats, f"cannot read: {exc.strerror or exc}")
        consumed = stats.offset + len(stats.torn)
        if stats.inode and (info.st_ino != stats.inode or info.st_size < consumed):
            fresh = SessionStats(stats.key, stats.path)  # replaced or cut: read it anew
            self.sessions[stats.key] = fresh
            fresh.version = stats.version + 1
            return self._catch_up(fresh) or True
        stats.inode = info.st_ino
        stats.size = info.st_size
        if info.st_size <= consumed:
            return False
        end = info.st_size if self.per_poll is None else min(info.st_size,
                                                              consumed + self.per_poll)
        try:
            self._read(stats, consumed, end)
        except OSError as exc:
            return _fail(stats, f"cannot read: {exc.strerror or exc}")
        return True

    def _read(self, stats: SessionStats, start: int, end: int) -> None:
        """Fold the bytes from `start` to `end` into `stats`, a chunk at a time."""
        fd = os.open(stats.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            while start < end:
                chunk = _CHUNK if len(stats.torn) < _CHUNK else _LONG_CHUNK  # fewer joins
                data = os.pread(fd, min(end - start, chunk), start)
                if not data:
                    return  # cut meanwhile: the next look reads it anew
                start += len(data)
                self.bytes_read += len(data)
                stats.feed(data)
        finally:
            os.close(fd)

    def _scan_folders(self, now: float) -> list[RolloutEntry]:
        """Names added to day folders since the last look."""
        if now - self._folders_at >= _FOLDERS:
            self._folders_at = now
            folders = day_folders(self.home)
        else:  # the newest two (yesterday's until midnight has passed) and today's, if new
            folders = sorted(self._folders)[-2:]
            today = os.path.join(self.home, "sessions", time.strftime("%Y/%m/%d"))
            if today not in self._folders:
                folders.append(today)
        found: list[RolloutEntry] = []
        for folder in folders:
            try:
                mtime = os.stat(folder).st_mtime_ns
            except OSError:
                self._folders.pop(folder, None)
                continue
            if self._folders.get(folder) == mtime:
                continue
            self._folders[folder] = mtime
            found.extend(e for e in folder_entries(folder) if e[0] not in self._known)
        return found

    def _admit(self, new: list[RolloutEntry], now: float) -> bool:
        for key, path in new:
            self._known.add(key)
            self._pending[key] = (path, now)
        admitted = False
        for key, (path, seen) in sorted(self._pending.items()):
            stats = SessionStats(key, path)
            self._catch_up(stats)
            if stats.session_id is None and stats.problem is None and now - seen < _PENDING:
                continue  # its writer has made it but not written line 1 yet
            del self._pending[key]
            parent = self._parent_key(stats)
            if self.root is not None:
                if parent is None or parent not in self._ids:
                    self.hidden += 1
                    continue
            elif parent is not None and parent not in self.sessions:
                self._reach_back(parent)
            self.sessions[key] = stats
            if stats.session_id is not None:
                self._ids.add(stats.session_id.lower())
            admitted = True
        return admitted

    def _reach_back(self, key: str) -> None:
        """Follow every older session down to `key`, so its subtree is whole."""
        while self._older and self._older[-1][0] >= key:
            self._follow(*self._older.pop())
        self.hidden = len(self._older)


def _settled(stats: SessionStats) -> bool:
    event = stats.task_event
    return (event is not None and event.get("type") != "task_started" and not stats.torn
            and not stats.loading)


def read_appended(path: str, start: int, size: int) -> bytes:
    """The bytes from `start` up to `size` (at most a few MB at a time), never via a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        return os.pread(fd, min(size - start, PER_POLL), start)
    finally:
        os.close(fd)


def _fail(stats: SessionStats, problem: str) -> bool:
    if stats.problem == problem:
        return False
    stats.problem = problem
    stats.version += 1
    return True
