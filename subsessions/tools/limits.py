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

import asyncio
import contextlib
import functools
import itertools
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/pids")
_V2 = Path("/sys/fs/cgroup")
_numbers = itertools.count(1)
_ENTER = 'echo $$ > "$1" && shift && exec "$@"'  # sh: join the cgroup, then become the command


@functools.cache
def pids_root() -> Path | None:
    """A pids cgroup directory this process may make children in, or None."""
    if os.geteuid() != 0:
        return None
    if (_V1 / "pids.max").exists() or (_V1 / "cgroup.procs").exists():
        return _V1
    controllers = _V2 / "cgroup.subtree_control"
    with contextlib.suppress(OSError):
        if "pids" in controllers.read_text().split():
            return _V2
    return None


@contextlib.asynccontextmanager
async def process_cgroup(max_processes: int) -> AsyncIterator[Path | None]:
    """A fresh pids cgroup bounded to `max_processes` (its `cgroup.procs` path), removed after."""
    root = pids_root()
    if root is None:
        yield None
        return
    folder = root / "subsessions" / f"{os.getpid()}-{next(_numbers)}"
    try:
        folder.mkdir(parents=True)
        (folder / "pids.max").write_text(str(max_processes))
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        yield None
        return
    try:
        yield folder / "cgroup.procs"
    finally:
        await _remove(folder)


async def _remove(folder: Path) -> None:
    """The pid namespace's processes die with bwrap, a moment after it: retry briefly."""
    for _ in range(50):
        try:
            os.rmdir(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.002)


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
