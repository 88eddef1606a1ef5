"""Writing rollouts: a buffer per session, one writer thread per engine.

Sessions append serialised lines to an in-memory buffer and hand it to the
writer at their await points (before a model call, at the end of a task). The
writer thread opens, appends and closes each file, batching everything that
queued up meanwhile, so no descriptor is held per idle session (10,000
children fit under `ulimit -n 1024`), the event loop does not wait on the disk
(but for a small ending while the thread is idle, see `submit`), and a durable
flush resolves once the bytes are in the file.

A parent's line naming a child must never reach the disk before the child's
`session_meta` (a kill in between would leave a mention without a child, where the
other way round only leaves a child without a mention). So the parent's recorder
hands the child's head to the writer before its own next lines (`before_flush`, off
the spawn path), and within a batch the writer puts deeper sessions' files first.
An append that fails half-way is cut back to its last whole line, so a record
written once the disk has room again is never glued onto a fragment.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from subsessions.errors import RolloutError
from subsessions.rollouts.files import make_private_dirs, temporary_name
from subsessions.rollouts.lines import RolloutRecorder as RolloutRecorder
from subsessions.rollouts.lines import Written as Written
from subsessions.rollouts.lines import rollout_path as rollout_path

# Never through a symlink: a planted one would make us append to someone else's file.
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
_REPAIR = _APPEND & ~os.O_WRONLY | os.O_RDWR  # after a failed append: read its last byte
# A new file is written whole before it has a name: an anonymous file (O_TMPFILE) linked into
# place through /proc, where the system has both; else a temporary name, linked then removed.
TMPFILE = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
# O_TMPFILE on this file system, or /proc here (hidden, not mounted): named ones instead
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EACCES}
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

INLINE_BYTES = 16 * 1024  # a durable chunk this small may be written on the loop
INLINE_SECONDS = 0.002  # ... as long as no such write ever took longer

_Waiter = tuple[Written, str]


class RolloutWriter:
    """Appends queued chunks to their files on one background thread."""

    def __init__(self) -> None:
        self._queue: deque[tuple[str, bytes | bytearray, Written | None, int]] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._made_dirs: set[str] = set()
        self._idle = False  # the thread is (about to be) waiting for work
        self._failed: dict[str, str] = {}  # lost writes, reported at the next durable flush
        self._torn: set[str] = set()  # a failed append may have left a line unended here
        self._unborn: dict[str, bytes] = {}  # a new file's first chunk, not written yet
        self._tmpfile = TMPFILE  # off once the file system refuses it
        self._proc_fd: int | None = None  # /proc/self/fd, to link anonymous files through
        self._inline = True  # small durable chunks may be appended on the loop (see submit)
        self._inline_spent = False  # one was, in this turn of the loop

    def __repr__(self) -> str:
        state = "stopping" if self._stopping else "running" if self._thread else "idle"
        return f"<RolloutWriter {state} queued={len(self._queue)}>"

    def submit(
        self, path: str, data: bytes | bytearray, waiter: Written | None, depth: int = 0
    ) -> None:
        """Queue a chunk; in a batch, files of a greater `depth` are written first.

        A small chunk someone waits for (an ending) is appended right here when the thread
        has nothing queued or in hand: the order of every file is then still the order of
        submits, and the waiter (a `cancel_child`) is spared two thread hand-offs. One such
        write per turn of the loop: a burst of endings (`abort_all_children`) goes to the
        thread in one batch. A file system slow enough to make that stall the loop turns
        it off for good."""
        if self._stopping:
            raise RuntimeError("rollout writer is closed")
        if (waiter is not None and self._inline and len(data) <= INLINE_BYTES
                and not self._inline_spent and not self._queue
                and (self._thread is None or self._idle)):
            if data:  # an empty flush only waits for what came before it: written already
                self._inline_spent = True
                asyncio.get_running_loop().call_soon(self._inline_again)
                started = time.perf_counter()
                self._append(path, data)
                if time.perf_counter() - started > INLINE_SECONDS:
                    self._inline = False
            problem = self._failed.pop(path, None)
            waiter(None if problem is None else RolloutError(path, problem))
            return
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="rollout-writer", daemon=True)
            self._thread.start()
        self._queue.append((path, data, waiter, depth))
        if self._idle:  # a busy writer drains the queue before it sleeps again
            self._wake.set()

    def _inline_again(self) -> None:
        self._inline_spent = False

    async def aclose(self) -> None:
        """Write everything queued, then stop the thread."""
        if self._stopping:
            return
        self._stopping = True
        if self._thread is not None:
            # Assigning the future is what tells the thread to stop once the queue is empty.
            self._stopped = asyncio.get_running_loop().create_future()
            self._wake.set()
            await asyncio.shield(self._stopped)
            self._thread.join()
        if self._proc_fd is not None:
            os.close(self._proc_fd)
            self._proc_fd = None

    def _run(self) -> None:
        while True:
            self._idle = True
            if not self._queue and self._stopped is None:  # checked after saying we are idle
                self._wake.wait()
            self._idle = False
            self._wake.clear()
            self._write_round()
            stopped = self._stopped
            if stopped is not None and not self._queue:
                self._call(_set_done, stopped)
                return

    def _write_round(self) -> None:
        """Write what is queued. A method of its own so that the round's chunks are freed
        when it returns, not kept by the thread's locals while it sleeps."""
        batch: dict[str, list[bytes | bytearray]] = {}
        depths: dict[str, int] = {}
        waiters: list[_Waiter] = []
        while self._queue:
            path, data, waiter, depth = self._queue.popleft()
            if data:  # an empty flush only waits for what came before it
                batch.setdefault(path, []).append(data)
                if depth:
                    depths[path] = depth
            if waiter is not None:
                waiters.append((waiter, path))
        paths: Iterable[str] = batch
        if depths:  # children before parents (stable: otherwise in the order queued)
            paths = sorted(batch, key=lambda p: -depths.get(p, 0))
        for path in paths:
            self._append(path, b"".join(batch[path]))
        if waiters:
            reported = {path: self._failed.pop(path) for _, path in waiters
                        if path in self._failed}
            self._call(_resolve, waiters, reported)

    def _call(self, callback: Any, *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is gone; nobody is left to tell
            self._loop.call_soon_threadsafe(callback, *args)

    def _append(self, path: str, data: bytes | bytearray) -> None:
        try:
            folder = os.path.dirname(path)
            if folder not in self._made_dirs:
                make_private_dirs(folder)
                self._made_dirs.add(folder)
            try:
                fd = os.open(path, _REPAIR if path in self._torn else _APPEND)
            except FileNotFoundError:  # a new rollout: it appears with its first chunk whole
                unborn = self._unborn.pop(path, None)
                if unborn is not None:
                    data = unborn + data
                if self._create(path, data):
                    return
                fd = os.open(path, _APPEND)  # made meanwhile by someone else: append
        except OSError as exc:
            self._failed[path] = f"cannot write rollout: {exc.strerror or exc}"
            return
        except Exception as exc:  # e.g. a path the OS rejects: the thread must live on
            self._failed[path] = f"cannot write rollout: {exc}"
            return
        written = 0
        try:
            if path in self._torn and _ends_torn(fd):
                data = b"\n" + data  # end the fragment a failed append could not cut off
            view = memoryview(data)
            while written < len(data):
                written += os.write(fd, view[written:])
            self._torn.discard(path)
        except OSError as exc:
            self._torn.add(path)
            kept = _cut_to_whole_line(fd, data, written)
            self._failed.setdefault(  # the first loss is the one reported
                path, f"cannot write rollout: {exc.strerror or exc} "
                f"({len(data) - kept} bytes of records lost)"
            )
        finally:
            os.close(fd)


    def _create(self, path: str, data: bytes | bytearray) -> bool:
        """Write `data` as the whole of a new file that appears at `path` only once written
        (a kill at any moment leaves the file complete or absent, never empty or head-less);
        False if something is at `path` already. A chunk that cannot be written is kept
        and goes first into the next attempt, so the file still starts with its head."""
        fd, temporary = self._open_temporary(path)
        try:
            view = memoryview(data)
            written = 0
            while written < len(data):
                written += os.write(fd, view[written:])
            if temporary is None:  # linkat(AT_SYMLINK_FOLLOW) through /proc: see open(2)
                os.link(str(fd), path, src_dir_fd=self._proc_fd)
            else:
                os.link(temporary, path)
        except FileExistsError:
            return False
        except OSError:
            self._unborn[path] = bytes(data)
            raise
        finally:
            os.close(fd)
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
        return True

    def _open_temporary(self, path: str) -> tuple[int, str | None]:
        """A file for a new rollout's first chunk: anonymous (None) or under a temporary name."""
        if self._tmpfile:
            try:
                if self._proc_fd is None:
                    self._proc_fd = os.open("/proc/self/fd", _DIRECTORY)
                flags = os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC
                return os.open(os.path.dirname(path), flags, 0o600), None
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise
                self._tmpfile = False  # this file system has no anonymous files
        temporary = temporary_name(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(temporary, flags, 0o600), temporary


def _ends_torn(fd: int) -> bool:
    """Whether the file does not end with a whole line (a failed append's fragment)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _cut_to_whole_line(fd: int, data: bytes | bytearray, written: int) -> int:
    """Drop what a failed append wrote after its last whole line; how much of it stays.

    The file has one writer (this thread), so it ended where this append began."""
    kept = data.rfind(b"\n", 0, written) + 1
    if kept < written:
        with contextlib.suppress(OSError):  # else left torn: the next append starts a line
            os.ftruncate(fd, os.fstat(fd).st_size - written + kept)
    return kept


def _resolve(waiters: list[_Waiter], failed: dict[str, str]) -> None:
    for written, path in waiters:
        problem = failed.get(path)
        written(None if problem is None else RolloutError(path, problem))


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
