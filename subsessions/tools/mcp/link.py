"""One live connection to an MCP server, held by a task of its own.

The SDK's client contexts (anyio task groups) must be entered and left in one task,
while tool calls come from the sessions' tasks: so `Link` runs the connection in its
own task and hands out the `ClientSession`. A relay between the transport and the
session notices when the server closes the connection (exits), so a crash is known
before the next call is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from subsessions._version import __version__
from subsessions.errors import error_text
from subsessions.tools.mcp.config import McpServerConfig

log = logging.getLogger("subsessions.mcp")

_STDERR_LINES = 20
_STDERR_SETTLE = 1.0  # seconds to let a dead server's last stderr lines arrive
_MAX_PAGES = 100


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside the SDK's (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "it closed the connection"
    if isinstance(exc, FileNotFoundError | PermissionError):
        return f"cannot run it: {exc.strerror or exc}: {exc.filename}"
    return error_text(exc)


class Stderr:
    """A stdio server's stderr: a pipe whose lines are logged and whose tail is kept."""

    def __init__(self, server: str) -> None:
        self._server = server
        read_fd, write_fd = os.pipe()
        self.file: TextIO | None = os.fdopen(write_fd, "w")
        self._read = os.fdopen(read_fd, "rb")
        self.lines: deque[str] = deque(maxlen=_STDERR_LINES)
        self._task = asyncio.get_running_loop().create_task(
            self._pump(), name=f"mcp-stderr-{server}")

    def spawned(self) -> None:
        """The child has its copy of the write end: ours is closed so EOF can come."""
        if self.file is not None:
            self.file.close()
            self.file = None

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._read)
        try:
            while line := await reader.readline():
                text = line.decode(errors="replace").rstrip()
                self.lines.append(text)
                log.debug("MCP server %s: %s", self._server, text)
        finally:
            transport.close()

    def tail(self) -> str:
        return " | ".join(line for line in self.lines if line.strip())

    async def settle(self) -> None:
        """Give the last lines of a server that ended a moment to arrive."""
        self.spawned()
        await asyncio.wait((self._task,), timeout=_STDERR_SETTLE)

    async def aclose(self) -> None:
        self.spawned()
        self._task.cancel()
        await asyncio.wait((self._task,))
        if not self._task.cancelled() and self._task.exception() is not None:
            log.debug("MCP server %s: stderr reader failed", self._server)
        self._read.close()


class Link:
    """One live connection to a server (one process, for `command`), in a task of its own."""

    def __init__(self, config: McpServerConfig) -> None:
        loop = asyncio.get_running_loop()
        self.config = config
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self.failure: BaseException | None = None
        self.ready: asyncio.Future[None] = loop.create_future()
        self.lost = asyncio.Event()  # the server closed the connection (exited)
        self._stop = asyncio.Event()
        self.stderr = Stderr(config.name) if config.command else None
        self._task = loop.create_task(self._run(), name=f"mcp-server-{config.name}")

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.lost.is_set()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        if config.url is not None:
            async with streamable_http_client(config.url) as (read, write):
                yield read, write
            return
        assert config.command is not None and self.stderr is not None
        assert self.stderr.file is not None
        params = StdioServerParameters(command=config.command, args=list(config.args),
                                       env=dict(config.env) or None, cwd=config.cwd)
        try:
            async with stdio_client(params, errlog=self.stderr.file) as (read, write):
                self.stderr.spawned()
                yield read, write
        finally:
            self.stderr.spawned()

    async def _relay(self, source: Any, sink: Any) -> None:
        """Server -> session, noticing the end of the connection."""
        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self.lost.set()
            self._stop.set()

    async def _run(self) -> None:
        relay: asyncio.Task[None] | None = None
        try:
            async with self._transport() as (read, write):
                sink, source = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                relay = asyncio.get_running_loop().create_task(self._relay(read, sink))
                info = types.Implementation(name="subsessions", version=__version__)
                async with source, ClientSession(source, write, client_info=info) as session:
                    await session.initialize()
                    self.tools = await _list_tools(session)
                    self.session = session
                    self.ready.set_result(None)
                    await self._stop.wait()
        except Exception as exc:
            if not self.ready.done():
                self.failure = exc
            elif not self._stop.is_set():
                log.warning("MCP server %s: connection failed: %s", self.config.name,
                            describe(exc))
        finally:
            self.session = None
            self.lost.set()
            if not self.ready.done():
                self.ready.set_result(None)
            if relay is not None:
                relay.cancel()
                await asyncio.wait((relay,))

    async def stop(self, *, cancel: bool = False) -> None:
        """Close the connection (stopping the process) and wait until that is done;
        `cancel` also interrupts a start that is still waiting on the server."""
        self._stop.set()
        if cancel:
            self._task.cancel()
        await asyncio.wait((self._task,))
        if not self._task.cancelled() and self._task.exception() is not None:
            log.debug("MCP server %s: %s", self.config.name, self._task.exception())

    async def stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        await self.stderr.settle()
        tail = self.stderr.tail()
        return f"; its stderr: {tail}" if tail else ""

    async def aclose(self, *, cancel: bool = False) -> None:
        await self.stop(cancel=cancel)
        if self.stderr is not None:
            await self.stderr.aclose()


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools
