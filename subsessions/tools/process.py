"""Run one process group with a timeout, keeping the head and tail of its combined output.

The process starts in a new session (so its own process group); stdout and stderr share
one pipe, so the output is interleaved as produced. When the process exits, times out or
the caller is cancelled, the whole group gets SIGKILL (background children included) and
the process is awaited before returning or re-raising.

No asyncio child watcher is involved: its default one (Python 3.11) starts a thread per
process and reaps with a blocking `waitpid` there, which made aborting 1,000 commands take
most of a second, and a process reaped by anyone else first (`Popen.poll()` in a transport's
close) made it warn of an unknown pid. Here the loop itself is told: the pipe by a reader
callback (no reader task, memory bounded by the budget however much is written), the exit
by a pidfd (Linux >= 5.3; a thread per process elsewhere), and the pid is reaped here with
`waitpid(WNOHANG)` once it has exited, by the one owner that started it.

A process that left the group (`setsid`) and still holds the pipe cannot be killed here;
reading stops `DRAIN_SECONDS` after the main process exited. (Under the bubblewrap sandbox
the pid namespace takes such processes down with the command.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from attrs import define, field, frozen

DRAIN_SECONDS = 1.0  # reading goes on this long after the exit, for what is still in the pipe
REAP_SECONDS = 5.0  # a SIGKILLed process is gone well before this
_CHUNK = 65536


@frozen
class ProcessResult:
    returncode: int  # negative: killed by that signal (the Popen convention)
    duration: float  # seconds from start to exit
    timed_out: bool
    head: bytes
    tail: bytes
    total_bytes: int  # everything the process wrote
    pipe_held_open: bool  # a process outside the group kept the output pipe open

    @property
    def cut_bytes(self) -> int:
        return self.total_bytes - len(self.head) - len(self.tail)


@define(eq=False)
class _Child:
    """One started process: its output read and its exit seen by callbacks of the loop."""

    loop: asyncio.AbstractEventLoop
    popen: subprocess.Popen[bytes]
    out_fd: int  # the read end of the output pipe; -1 once closed
    head_cap: int
    tail_cap: int
    head: bytearray = field(factory=bytearray)
    tail: bytearray = field(factory=bytearray)
    total: int = 0
    exited: asyncio.Event = field(factory=asyncio.Event)
    drained: asyncio.Event = field(factory=asyncio.Event)
    pidfd: int = -1  # while the exit is being watched through one

    def watch(self) -> None:
        """Start reading the output and watching for the exit (both before any await)."""
        os.set_blocking(self.out_fd, False)
        self.loop.add_reader(self.out_fd, self._read)
        try:
            self.pidfd = os.pidfd_open(self.popen.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: a thread waits instead
            threading.Thread(target=self._wait_blocking, name=f"waitpid-{self.popen.pid}",
                             daemon=True).start()
            return
        self.loop.add_reader(self.pidfd, self._reap)

    def _read(self) -> None:
        try:
            data = os.read(self.out_fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.stop_reading()
            return
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    def stop_reading(self) -> None:
        if self.out_fd >= 0:
            self.loop.remove_reader(self.out_fd)
            os.close(self.out_fd)
            self.out_fd = -1
        self.drained.set()

    def _reap(self) -> None:
        """The pidfd is readable: the process has exited and is reaped now."""
        self.loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        try:
            pid, status = os.waitpid(self.popen.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by a host's process-wide watcher: status unknown
            pid, status = self.popen.pid, -1
        if pid == 0:  # cannot be after the pidfd said so; watch again rather than guess
            self.pidfd = os.pidfd_open(self.popen.pid)
            self.loop.add_reader(self.pidfd, self._reap)
            return
        self._exited(status)

    def _wait_blocking(self) -> None:
        try:
            status = os.waitpid(self.popen.pid, 0)[1]
        except ChildProcessError:
            status = -1
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self.loop.call_soon_threadsafe(self._exited, status)

    def _exited(self, status: int) -> None:
        # Popen learns it too: it must never poll (reap) this pid again, nor warn at exit
        self.popen.returncode = -signal.SIGKILL if status < 0 else os.waitstatus_to_exitcode(
            status)
        self.exited.set()


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    if event.is_set():  # the usual case after an exit: no timer to arm and disarm
        return True
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


def _start(
    argv: Sequence[str], cwd: str, env: Mapping[str, str] | None, budget: int,
    pass_fds: Sequence[int],
) -> _Child:
    read_fd, write_fd = os.pipe()  # neither is inherited but as the child's stdout/stderr
    try:
        popen = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
            cwd=cwd, env=env, start_new_session=True, pass_fds=tuple(pass_fds),
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    head_cap = budget // 2
    child = _Child(asyncio.get_running_loop(), popen, read_fd, head_cap, budget - head_cap)
    child.watch()
    return child


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str] | None,
    timeout: float,
    budget: int,
    pass_fds: Sequence[int] = (),
) -> ProcessResult:
    """Run `argv` to its end or `timeout` seconds; OSError if it cannot be started."""
    started = time.monotonic()
    child = _start(argv, cwd, env, budget, pass_fds)  # no await: no cancel before the watch
    pgid = child.popen.pid
    timed_out = False
    try:
        timed_out = not await _wait(child.exited, timeout)
        duration = time.monotonic() - started
        # Kill the group even after a normal exit: background children must not outlive
        # the call. (The group id stays valid while any member lives.)
        kill_group(pgid)
        await _wait(child.exited, REAP_SECONDS)  # SIGKILL: at once, unless stuck in the kernel
        held_open = not await _wait(child.drained, DRAIN_SECONDS)
    except BaseException:  # cancelled (or worse): kill, await the process, re-raise
        kill_group(pgid)
        await _wait(child.exited, REAP_SECONDS)
        raise
    finally:
        # Stop reading; an exit not seen yet (stuck, or a second cancel) stays watched and
        # is reaped when it comes.
        child.stop_reading()
    returncode = child.popen.returncode
    return ProcessResult(
        returncode=-signal.SIGKILL if returncode is None else returncode,
        duration=duration,
        timed_out=timed_out,
        head=bytes(child.head),
        tail=bytes(child.tail),
        total_bytes=child.total,
        pipe_held_open=held_open,
    )
