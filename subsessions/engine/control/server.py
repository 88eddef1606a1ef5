"""The engine's control server: a unix socket answering JSON-RPC lines from its own user.

Each connection is served in a task the server owns; requests on one connection are
answered in order (a client that does not read its answers stops being read). Whatever a
peer sends (bad JSON, unknown methods, bad params, a line past `MAX_LINE`) is answered with
a JSON-RPC error and the connection goes on; one connection's failure ends only that
connection. `aclose` stops listening, ends every connection, waits for their tasks and
removes the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Any

from attrs import define, field

from subsessions.engine.control import paths, rpc
from subsessions.engine.control.methods import METHODS, Host, call
from subsessions.engine.control.rpc import METHOD_NOT_FOUND, REFUSED, RpcError

log = logging.getLogger("subsessions.engine.control")
MAX_CONNECTIONS = 64
IDLE_SECONDS = 600.0  # a connection that sends nothing this long is closed
CLOSE_GRACE = 2.0  # seconds a request being answered may take to finish once closing began
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


@define(eq=False)
class ControlServer:
    """Use `await ControlServer.open(home, engine)`, then `await server.aclose()`."""

    path: Path
    _host: Host
    _server: asyncio.AbstractServer | None = field(default=None, init=False)
    _connections: set[asyncio.Task[None]] = field(factory=set, init=False)  # owned, drained
    _answering: set[asyncio.Task[Any] | None] = field(factory=set, init=False)  # mid-request
    _closed: bool = field(default=False, init=False)

    @classmethod
    async def open(cls, home: Path, host: Host) -> ControlServer:
        listener, path = paths.bind(home)
        server = cls(path, host)
        try:
            server._server = await asyncio.start_unix_server(
                server.accept, sock=listener, limit=rpc.MAX_LINE)
        except BaseException:
            listener.close()
            paths.unlink(path)
            raise
        return server

    def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed:
            writer.close()
            return
        task = asyncio.get_running_loop().create_task(
            self._connection(reader, writer), name="subsessions-control-connection")
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        task.add_done_callback(lambda _: writer.close())  # cancelled before it ever ran, too

    async def aclose(self) -> None:
        """Stop listening and remove the socket; let requests being answered finish (for
        `CLOSE_GRACE` seconds at most), end every other connection, wait for every task of
        the server; idempotent."""
        if not self._closed:
            self._closed = True
            if self._server is not None:
                self._server.close()
            paths.unlink(self.path)
        answering = [t for t in self._connections if t in self._answering]
        for task in self._connections.difference(answering):
            task.cancel()  # waiting for a line: nothing is lost
        if answering:  # each ends after its answer (nothing more is read once closing)
            await asyncio.wait(answering, timeout=CLOSE_GRACE)
        while self._connections:
            tasks = list(self._connections)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        if self._server is not None:
            await self._server.wait_closed()

    # -- one connection ------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        try:
            refusal = self._refusal(writer)
            if refusal is not None:
                writer.write(rpc.failure(RpcError(REFUSED, refusal)))
                await writer.drain()
                return
            while not self._closed and (line := await _read_line(reader, writer)) is not None:
                self._answering.add(me)
                try:
                    answer = await self._answer(line)
                    if answer:
                        writer.write(answer)
                        await writer.drain()  # a peer that does not read is not read either
                finally:
                    self._answering.discard(me)
        except (ConnectionError, TimeoutError):
            pass  # the peer went away or went quiet: only this connection ends
        except Exception:
            log.exception("a control connection failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _refusal(self, writer: asyncio.StreamWriter) -> str | None:
        """Why this peer may not talk to the engine (SO_PEERCRED), or None."""
        sock = writer.get_extra_info("socket")
        if sock is None:
            return "refused: the peer's credentials cannot be read"
        pid, uid, _ = _CREDENTIALS.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
        if uid != os.geteuid():
            log.warning("control socket: refused pid %d of uid %d", pid, uid)
            return f"refused: this engine answers uid {os.geteuid()} only"
        if len(self._connections) > MAX_CONNECTIONS:
            return f"refused: {MAX_CONNECTIONS} connections are open already"
        return None

    async def _answer(self, line: bytes) -> bytes:
        """The answer line to one request line (empty for a notification or a blank line)."""
        if not line.strip():
            return b""
        request = rpc.parse(line)
        if isinstance(request, tuple):
            return rpc.failure(*request)
        try:
            if request.method not in METHODS:
                raise RpcError(METHOD_NOT_FOUND, f"unknown method {request.method[:80]!r}; "
                               f"have: {', '.join(METHODS)}")
            result = await call(self._host, request.method, request.params)
        except RpcError as exc:
            return b"" if request.notification else rpc.failure(exc, request.id)
        except Exception as exc:  # a fault of ours: this request fails, the engine goes on
            log.exception("control method %s failed", request.method)
            error = RpcError(rpc.INTERNAL_ERROR, f"{request.method} failed: {exc}")
            return b"" if request.notification else rpc.failure(error, request.id)
        return b"" if request.notification else rpc.answer(request.id, result)


async def _read_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """The next line (without its newline), None at the end of the stream; a line longer
    than `MAX_LINE` is answered with an error and skipped, never held whole."""
    while True:
        try:
            async with asyncio.timeout(IDLE_SECONDS):
                line = await reader.readuntil(b"\n")
            return line[:-1]
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None  # a last line without its newline is still read
        except asyncio.LimitOverrunError as exc:
            writer.write(rpc.failure(RpcError(
                rpc.INVALID_REQUEST, f"a request line is longer than {rpc.MAX_LINE} bytes")))
            await writer.drain()
            await _skip_line(reader, exc.consumed)


async def _skip_line(reader: asyncio.StreamReader, consumed: int) -> None:
    """Drop the rest of an overlong line, a buffer at a time."""
    while True:
        try:
            await reader.readexactly(consumed)  # up to the newline, or all that is buffered
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed
        except asyncio.IncompleteReadError:
            return  # the stream ended inside it: the next read sees the end
