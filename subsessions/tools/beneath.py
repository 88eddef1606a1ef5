"""Directory handles opened one component at a time, never through a symlink.

`apply_patch` checks a resolved path (every symlink and `..` already resolved) against
the sandbox, then writes it. Writing by path would let a concurrent process (a parallel
`shell` call) swap a directory on that path for a symlink between the check and the
write, and the write would land wherever the symlink points. So the checked path is
opened from `/` component by component, each with `O_NOFOLLOW | O_DIRECTORY` relative to
the handle of its parent, and every write, create, rename and remove is then made
relative to the final directory handle (`dir_fd=`). A component that is a symlink at
that moment fails with `PathChanged`: the directory reached is always the one checked.

A handle stays bound to its directory if that directory is renamed afterwards; only a
process that may write both places can rename it, so a write still lands where that
process could have written itself.

Handles are `O_PATH` (no read permission needed to pass through a directory) and kept in
a small LRU, so a patch of many files in few directories walks each directory once and
a patch spread over thousands of directories never holds more than `KEEP` descriptors.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType

from subsessions.tools.errors import FileToolError

KEEP = 128
_PATH = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK)
_DIRECTORY = _PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC


class PathChanged(FileToolError):
    """A component of a checked path is no longer the directory it was (a symlink now)."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        super().__init__(f"{path} {what}")


class DirHandles:
    """Handles of symlink-free absolute directory paths; `directory()`'s fd is borrowed
    until the next call. Use as a context manager (every handle is closed on exit)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = max(keep, 2)
        self._open: OrderedDict[str, int] = OrderedDict()
        self.made: list[str] = []  # directories `directory(make=...)` created, in order

    def __enter__(self) -> DirHandles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])

    def directory(self, path: str, make: Callable[[str], None] | None = None) -> int:
        """The handle of directory `path` (absolute, normalised, symlinks already resolved).

        A missing component raises `FileNotFoundError`, or with `make` is created after
        `make(component_path)` approved it (by returning; it raises to refuse).
        """
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            raise ValueError(f"not an absolute normalised path: {path!r}")
        here = path
        while here not in self._open and here != "/":
            here = os.path.dirname(here)
        if here not in self._open:
            self._open["/"] = os.open("/", _DIRECTORY)
        fd = self._open[here]
        self._open.move_to_end(here)
        rest = [] if here == path else path[len(here):].strip("/").split("/")
        for name in rest:
            child = os.path.join(here, name)
            fd = self._child(fd, name, child, make)
            self._open[child] = fd
            here = child
        while len(self._open) > self.keep:
            os.close(self._open.popitem(last=False)[1])
        return fd

    def _child(self, fd: int, name: str, path: str, make: Callable[[str], None] | None) -> int:
        try:
            return os.open(name, _DIRECTORY, dir_fd=fd)
        except FileNotFoundError:
            if make is None:
                raise
        except NotADirectoryError:
            raise _changed(fd, name, path) from None
        make(path)
        with contextlib.suppress(FileExistsError):  # made meanwhile: opened as any other
            os.mkdir(name, 0o777, dir_fd=fd)
            self.made.append(path)
        try:
            return os.open(name, _DIRECTORY, dir_fd=fd)
        except NotADirectoryError:
            raise _changed(fd, name, path) from None

    def forget(self, path: str) -> None:
        """Close the handles of `path` and everything below it (it was removed)."""
        for held in [p for p in self._open if p == path or p.startswith(path + "/")]:
            os.close(self._open.pop(held))


def _changed(fd: int, name: str, path: str) -> OSError | PathChanged:
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except OSError as exc:
        return exc
    if stat.S_ISLNK(mode):
        return PathChanged(path, "is a symbolic link")
    return PathChanged(path, "is not a directory")


def lstat_at(fd: int, name: str) -> os.stat_result | None:
    """`name`'s own status in directory `fd` (a symlink is not followed), or None if absent."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_regular(
    path: str, *, dir_fd: int | None = None, follow: bool = True
) -> tuple[int | None, os.stat_result]:
    """A read descriptor of the regular file `path` and its status, or None and the status
    of what is there instead. The file is looked at first through an `O_PATH` handle (no
    open side effect, no blocking) and only that very file is then opened, so a FIFO or
    device swapped in meanwhile is reported, never opened. `follow=False`: a symlink is
    reported as one."""
    flags = _PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    probe = os.open(path, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(probe)
        if not stat.S_ISREG(info.st_mode):
            return None, info
        try:
            return os.open(f"/proc/self/fd/{probe}", _READ), info
        except FileNotFoundError:  # no /proc: open by name, then make sure it is that file
            handle = os.open(path, _READ | os.O_NONBLOCK | flags & os.O_NOFOLLOW, dir_fd=dir_fd)
            if not os.path.samestat(os.fstat(handle), info):
                os.close(handle)
                raise PathChanged(path, "changed while it was opened") from None
            return handle, info
    finally:
        os.close(probe)


def read_at(fd: int, name: str) -> tuple[bytes, os.stat_result]:
    """The content and status of regular file `name` in directory `fd` (not a symlink)."""
    handle, info = open_regular(name, dir_fd=fd, follow=False)
    if handle is None:
        raise PathChanged(name, "is no longer a regular file")
    with os.fdopen(handle, "rb") as stream:
        return stream.read(), info
