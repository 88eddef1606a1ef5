"""Writing a planned patch all or nothing, every change relative to a directory handle.

Phase 1 writes each new content to a temporary file beside its target (`O_EXCL |
O_NOFOLLOW`, creating missing directories); phase 2 renames them into place and removes
deleted files. A failure in phase 1 removes the temporary files and the directories it
made: no file changed. A failure in phase 2 also puts back what was already changed. The
directories are reached through `DirHandles`, so a path that a concurrent process turned
into a symlink fails the patch instead of redirecting it. A stop request (the tool call
was cancelled) is honoured until phase 2 begins; after that the renames finish.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable

from attrs import frozen

from subsessions.tools.beneath import DirHandles, PathChanged
from subsessions.tools.errors import FileToolError, ToolError

Check = Callable[[str], None]  # raises unless the resolved path may be written


class Stopped(Exception):
    """The tool call was cancelled before anything was renamed into place."""


@frozen
class Original:
    data: bytes | None  # None: no regular file there
    mode: int | None  # its permission bits
    link: str | None = None  # the target, when the entry (to be removed) is a symlink


@frozen
class Change:
    path: str  # resolved: absolute, normalised, no symlink
    shown: str  # as written in the patch
    new: bytes | None  # None: delete
    original: Original
    mode: int | None  # for the new file


def commit(
    changes: list[Change], handles: DirHandles, check: Check, stop: threading.Event
) -> None:
    """Write every change or none (restoring what was already changed on a failure)."""
    changes = sorted(changes, key=lambda change: change.path)  # a directory's files together
    temps: dict[str, tuple[str, tuple[int, int]]] = {}  # path -> temp name, its directory
    current: Change | None = None
    try:
        for current in changes:
            if stop.is_set():
                raise Stopped
            check(current.path)
            if current.new is not None:
                temps[current.path] = _write_temp(handles, current, check)
    except (OSError, ToolError, Stopped) as exc:
        _discard(handles, temps)
        if isinstance(exc, Stopped):
            raise
        raise _failure("write", current, exc, "no file was changed") from None
    done: list[Change] = []
    try:
        for current in changes:
            parent, name = os.path.split(current.path)
            fd = handles.directory(parent)
            if current.new is None:
                os.unlink(name, dir_fd=fd)
            else:
                temp, directory = temps[current.path]
                if _identity(fd) != directory:
                    raise PathChanged(parent, "was replaced by another directory")
                os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
                del temps[current.path]
            done.append(current)
    except (OSError, ToolError) as exc:
        for change in reversed(done):
            _restore(handles, change)
        _discard(handles, temps)
        raise _failure(
            "change", current, exc, "the files changed before it were restored"
        ) from None


def _failure(verb: str, change: Change | None, exc: Exception, outcome: str) -> FileToolError:
    what = change.shown if change is not None else "a file"
    reason = exc.strerror if isinstance(exc, OSError) else str(exc)
    return FileToolError(f"apply_patch: cannot {verb} {what}: {reason}; {outcome}")


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _write_temp(handles: DirHandles, change: Change, check: Check) -> tuple[str, tuple[int, int]]:
    assert change.new is not None
    parent, name = os.path.split(change.path)
    fd = handles.directory(parent, make=check)
    return _write_beside(fd, name, change.new, change.mode), _identity(fd)


def _write_beside(fd: int, name: str, data: bytes, mode: int | None) -> str:
    """A new temporary file holding `data` in directory `fd`; its name."""
    temp = f".{name}.{secrets.token_hex(4)}.apply_patch"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    handle = os.open(temp, flags, 0o666, dir_fd=fd)  # the umask applies
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            if mode is not None:
                os.fchmod(stream.fileno(), mode)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise
    return temp


def _discard(handles: DirHandles, temps: dict[str, tuple[str, tuple[int, int]]]) -> None:
    for path, (temp, _) in temps.items():
        with contextlib.suppress(OSError, ToolError):
            os.unlink(temp, dir_fd=handles.directory(os.path.dirname(path)))
    for made in reversed(handles.made):
        handles.forget(made)
        with contextlib.suppress(OSError, ToolError):
            os.rmdir(os.path.basename(made), dir_fd=handles.directory(os.path.dirname(made)))
    handles.made.clear()


def _restore(handles: DirHandles, change: Change) -> None:
    parent, name = os.path.split(change.path)
    original = change.original
    with contextlib.suppress(OSError, ToolError):
        fd = handles.directory(parent)
        if original.link is not None:
            os.symlink(original.link, name, dir_fd=fd)
        elif original.data is None:
            os.unlink(name, dir_fd=fd)
        else:
            temp = _write_beside(fd, name, original.data, original.mode)
            os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
