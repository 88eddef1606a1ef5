"""Run one process group with a timeout, keeping the head and tail of its combined output.

The process starts in a new session (so its own process group); stdout and stderr share
one pipe, so the output is interleaved as produced. When the process exits, times out or
the caller is cancelled, the whole group gets SIGKILL (background children included) and
the process is awaited before returning or re-raising. Output is collected by a protocol
callback: no reader task, memory bounded by the budget however much is written.

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
import time
from collections.abc import Mapping, Sequence

from attrs import frozen

DRAIN_SECONDS = 1.0  # reading goes on this long after the exit, for what is still in the pipe
REAP_SECONDS = 5.0  # a SIGKILLed process is gone well before this


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


class _Collector(asyncio.SubprocessProtocol):
    def __init__(self, budget: int) -> None:
        self.head_cap = budget // 2
        self.tail_cap = budget - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.exited = asyncio.Event()
        self.drained = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
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

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.drained.set()

    def process_exited(self) -> None:
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
    loop = asyncio.get_running_loop()
    collector = _Collector(budget)
    started = time.monotonic()
    spawning = loop.create_task(loop.subprocess_exec(
        lambda: collector,
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    ))
    try:
        transport, _ = await asyncio.shield(spawning)
    except asyncio.CancelledError:
        # Cancelled while the process was being set up: it may already have started
        # children of its own. Let the set-up finish, then kill the whole group.
        await asyncio.wait((spawning,))
        if not spawning.cancelled() and spawning.exception() is None:
            started_transport = spawning.result()[0]
            kill_group(started_transport.get_pid())
            try:  # reaped by the child watcher first: closing would reap it behind its back
                await _wait(collector.exited, REAP_SECONDS)
            finally:
                started_transport.close()
        raise
    pgid = transport.get_pid()
    timed_out = False
    try:
        timed_out = not await _wait(collector.exited, timeout)
        duration = time.monotonic() - started
        # Kill the group even after a normal exit: background children must not outlive
        # the call. (The group id stays valid while any member lives.)
        kill_group(pgid)
        await _wait(collector.exited, REAP_SECONDS)  # SIGKILL: at once, unless stuck in the kernel
        held_open = not await _wait(collector.drained, DRAIN_SECONDS)
    except BaseException:  # cancelled (or worse): kill, await the process, re-raise
        kill_group(pgid)
        # Awaited before the transport closes: `close()` would poll (reap) it first and
        # the child watcher would warn of an unknown pid.
        await _wait(collector.exited, REAP_SECONDS)
        raise
    finally:
        transport.close()
    returncode = transport.get_returncode()
    return ProcessResult(
        returncode=-signal.SIGKILL if returncode is None else returncode,
        duration=duration,
        timed_out=timed_out,
        head=bytes(collector.head),
        tail=bytes(collector.tail),
        total_bytes=collector.total,
        pipe_held_open=held_open,
    )
