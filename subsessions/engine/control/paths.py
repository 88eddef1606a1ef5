"""Where control sockets live and how they are named, bound, reached and cleared.

A socket is `home/control/<pid>-<n>.sock` (the n-th engine of that process to open one),
so a reader can tell whose it is and whether that process still runs. Binding and
connecting go through a descriptor of the folder (`/proc/self/fd/N/name`): the folder is
opened without following links, and a home deeper than a socket address allows (108
bytes) still works.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from subsessions.errors import SubsessionError, UnsafeHome

FOLDER = "control"
_NAME = re.compile(r"^(\d{1,10})-(\d{1,10})\.sock$")
_numbers = itertools.count(1)  # engines of this process that opened a socket


class ControlUnavailable(SubsessionError):
    """A control socket could not be opened or reached."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"control socket {path}: {problem}")


def pid_of(name: str) -> int | None:
    """The pid a socket's name gives; None for a name that is not a socket's."""
    found = _NAME.match(name)
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def _folder(path: Path, create: bool) -> Iterator[int]:
    """A descriptor of a control folder, made 0700 (and checked to be ours) when `create`."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if create:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid():
                raise UnsafeHome(str(path.parent), f"{path} is owned by uid {info.st_uid}, not by "
                                 f"you (uid {os.geteuid()})")
            if stat.S_IMODE(info.st_mode) != 0o700:
                os.fchmod(fd, 0o700)
        yield fd
    finally:
        os.close(fd)


def bind(home: Path) -> tuple[socket.socket, Path]:
    """A listening socket of this engine, 0600 in a 0700 folder, after clearing the stale
    sockets of engines that died."""
    clear_stale(home)
    try:
        with _folder(home / FOLDER, create=True) as fd:
            name = f"{os.getpid()}-{next(_numbers)}.sock"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)  # our pid's: an earlier process's that died
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listener.bind(f"/proc/self/fd/{fd}/{name}")
                os.chmod(name, 0o600, dir_fd=fd)  # in our 0700 folder: nobody could race it
                listener.listen(64)
                listener.setblocking(False)
            except BaseException:
                listener.close()
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
                raise
    except OSError as exc:
        raise ControlUnavailable(str(home / FOLDER), exc.strerror or str(exc)) from None
    return listener, home / FOLDER / name


def unlink(path: Path) -> None:
    """Remove a socket file (ours, or a stale one); gone already, or not ours to remove
    (a link for a folder, another user's file), is left as it is."""
    with contextlib.suppress(OSError), \
            _folder(path.parent, create=False) as fd:
        info = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISSOCK(info.st_mode):
            os.unlink(path.name, dir_fd=fd)


def connect(path: Path) -> socket.socket:
    """A connected, non-blocking socket to `path`; `ConnectionRefusedError` when nobody
    listens there any more (its engine died), `FileNotFoundError` when it is gone."""
    with _folder(path.parent, create=False) as fd:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            client.connect(f"/proc/self/fd/{fd}/{path.name}")
        except BlockingIOError:
            pass  # its backlog is full: it lives, and will accept us in turn
        except BaseException:
            client.close()
            raise
        return client


def sockets(home: Path) -> list[Path]:
    """Every socket-named file under `home/control`, stale ones too (oldest pid first)."""
    try:
        names = os.listdir(home / FOLDER)
    except OSError:
        return []
    found = [(pid, name) for name in names if (pid := pid_of(name)) is not None]
    return [home / FOLDER / name for _, name in sorted(found)]


def stale(path: Path) -> bool:
    """Whether the engine behind `path` is gone: its process does not run, or nothing
    listens on the socket (its pid was reused)."""
    pid = pid_of(path.name)
    if pid is not None and not _running(pid):
        return True
    try:
        connect(path).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # gone already, or not ours to judge
    return False


def clear_stale(home: Path) -> list[Path]:
    """Remove the sockets of engines that died (SIGKILL leaves them); what was removed."""
    cleared = [path for path in sockets(home) if stale(path)]
    for path in cleared:
        unlink(path)
    return cleared


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:  # EPERM: it runs, as someone else
        return exc.errno == errno.EPERM
    return True
