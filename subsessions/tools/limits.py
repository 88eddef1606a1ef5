"""How many processes one sandboxed command may run.

A fork bomb in a sandbox still exhausts the machine's process table. For a normal user the
bound is `RLIMIT_NPROC`, set inside the command's user namespace (`prlimit`, run by bwrap before
the command): the kernel counts a namespace's processes apart from the user's others. Root is
exempt from `RLIMIT_NPROC` (the kernel never enforces it for global uid 0, user namespace or
not), so for root the bound is a `pids` cgroup per command, made by the engine where the machine
offers one it may write (cgroup v1 `pids`, or v2 with the `pids` controller delegated); bwrap is
started through `sh`, which moves itself into that cgroup and then becomes bwrap. Without either
the command runs unbounded, as before: the output caps and timeouts still hold.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from attrs import Factory, define

_V1 = Path("/sys/fs/cgroup/pids")
_V2 = Path("/sys/fs/cgroup")
_numbers = itertools.count(1)
_ENTER = 'echo $$ > "$1" && shift && exec "$@"'  # sh: join the cgroup, then become the command


@functools.cache
def pids_root() -> Path | None:
    """A pids cgroup directory this process may make children in, or None; the cgroups a
    killed engine left there are removed on the way."""
    if os.geteuid() != 0:
        return None
    found: Path | None = None
    if (_V1 / "pids.max").exists() or (_V1 / "cgroup.procs").exists():
        found = _V1
    with contextlib.suppress(OSError):
        if found is None and "pids" in (_V2 / "cgroup.subtree_control").read_text().split():
            found = _V2
    if found is not None:
        _remove_orphans(found / "subsessions")
    return found


def _remove_orphans(folder: Path) -> None:
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            owner = entry.name.partition("-")[0]
            if entry.is_dir() and owner.isdigit() and not _alive(int(owner)):
                with contextlib.suppress(OSError):  # still emptying: the next engine's
                    os.rmdir(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@define
class _CgroupPool:
    """This process's pids cgroups: one per running command, reused once empty (making and
    removing one per command costs more than the rest of the tool, and the kernel keeps an
    ended command's cgroup busy for a few ms), removed at exit."""

    _made: list[Path] = Factory(list)
    _free: list[Path] = Factory(list)  # made, not in use (perhaps still emptying)

    def take(self, root: Path, max_processes: int) -> Path | None:
        folder = next((f for f in self._free if not _members(f)), None)
        if folder is not None:
            self._free.remove(folder)
        else:
            folder = root / "subsessions" / f"{os.getpid()}-{next(_numbers)}"
            try:
                folder.mkdir(parents=True)
            except OSError:
                return None
            self._made.append(folder)
        try:
            (folder / "pids.max").write_text(str(max_processes))
        except OSError:
            self._free.append(folder)
            return None
        return folder

    def give_back(self, folder: Path) -> None:
        _kill_members(folder)
        self._free.append(folder)

    def remove_all(self) -> None:
        deadline = time.monotonic() + 1.0
        left = list(self._made)
        while left and time.monotonic() < deadline:
            for folder in list(left):
                with contextlib.suppress(FileNotFoundError):
                    try:
                        os.rmdir(folder)
                    except OSError:
                        continue
                left.remove(folder)
            if left:
                time.sleep(0.005)
        self._made, self._free = left, []


def _kill_members(folder: Path) -> None:
    """Whatever of a command is left in its cgroup dies with it. Killing bwrap's process group
    misses its namespace init once that has called setsid (`--new-session`), and the init's
    `--die-with-parent` is set after bwrap forks it: a bwrap killed in between leaves an
    orphan that only the cgroup still holds (`cgroup.kill`, Linux 5.14; else each pid)."""
    try:
        (folder / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass
    try:
        pids = (folder / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _members(folder: Path) -> bool:
    try:
        return bool((folder / "cgroup.procs").read_bytes().strip())
    except OSError:
        return True


_POOL = _CgroupPool()
atexit.register(_POOL.remove_all)


@contextlib.contextmanager
def process_cgroup(max_processes: int) -> Iterator[Path | None]:
    """A pids cgroup bounded to `max_processes` for one command (its `cgroup.procs` path)."""
    root = pids_root()
    folder = None if root is None else _POOL.take(root, max_processes)
    if folder is None:
        yield None
        return
    try:
        yield folder / "cgroup.procs"
    finally:
        _POOL.give_back(folder)  # what is left of the command is killed there


def limited(argv: list[str], procs: Path | None) -> list[str]:
    """`argv` (a bwrap command line) started inside the cgroup whose `cgroup.procs` is given."""
    if procs is None:
        return argv
    return [shutil.which("sh") or "/bin/sh", "-c", _ENTER, "sandbox", str(procs), *argv]


def inside(max_processes: int) -> list[str]:
    """The prefix bwrap runs the command with: `RLIMIT_NPROC` in its user namespace."""
    if os.geteuid() == 0:
        return []  # not enforced for root: the cgroup bounds it instead
    prlimit = shutil.which("prlimit")
    return [prlimit, f"--nproc={max_processes}", "--"] if prlimit else []
