"""stdin and stdout as asyncio streams, whatever they are.

asyncio's pipe transports take pipes, sockets and terminals only: a regular file is refused
(`serve --stdio > out.txt`), and `/dev/null` is accepted but cannot be polled, so reading
it fails later in a callback (`serve --stdio < /dev/null`). When either end is such a file,
both go through a socket pair, copied by two daemon threads (a file never makes them wait
long; a terminal they wait on holds up no exit), and the runtime sees one socket as on TCP,
with the same backpressure. What a host launches (two pipes) is used directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import threading
from collections.abc import AsyncIterator

from subsessions.serve.framing import READ_AHEAD

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
log = logging.getLogger("subsessions.serve")


@contextlib.asynccontextmanager
async def stdio_streams(stdin: int, stdout: int) -> AsyncIterator[Streams]:
    """A reader of `stdin` and a writer to `stdout` (closed after; stdin is left open)."""
    if _pollable(stdin) and _pollable(stdout):
        yield await _pipes(stdin, stdout)
        return
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    written: asyncio.Future[None] = loop.create_future()
    threading.Thread(target=_copy_in, args=(stdin, theirs), name="subsessions-stdin",
                     daemon=True).start()
    threading.Thread(target=_copy_out, args=(theirs, stdout, loop, written),
                     name="subsessions-stdout", daemon=True).start()
    reader, writer = await asyncio.open_unix_connection(sock=ours, limit=READ_AHEAD)
    try:
        yield reader, writer
    finally:
        try:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            await written  # every byte written is in stdout before the process may exit
        finally:
            theirs.close()  # a stdin thread still reading a terminal stops at its next line


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


async def _pipes(stdin: int, stdout: int) -> Streams:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_AHEAD)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(stdin, "rb", buffering=0, closefd=False))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(stdout, "wb", buffering=0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _copy_in(stdin: int, sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the runtime closed its end first
        while chunk := os.read(stdin, READ_AHEAD):
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)  # end of input: the runtime reads EOF


def _copy_out(sock: socket.socket, stdout: int, loop: asyncio.AbstractEventLoop,
              written: asyncio.Future[None]) -> None:
    try:
        while chunk := sock.recv(READ_AHEAD):
            view = memoryview(chunk)
            while view:
                view = view[os.write(stdout, view):]
    except OSError as exc:  # a full disk, say: nobody reads what follows
        log.warning("cannot write to stdout (%s): the connection ends", exc.strerror or exc)
    finally:
        with contextlib.suppress(OSError):  # and the runtime's connection, as a host gone would
            sock.shutdown(socket.SHUT_RDWR)
        os.close(stdout)
        loop.call_soon_threadsafe(_settle, written)


def _settle(written: asyncio.Future[None]) -> None:
    if not written.done():
        written.set_result(None)
