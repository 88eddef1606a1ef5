"""MCP servers as tool sources: their tools offered to sessions as `mcp__{server}__{tool}`.

    servers = McpServers(settings.mcp_servers, source=settings.source)  # validates only
    tools = await servers.tools()      # starts every server once, concurrently
    ...                                # sessions call the tools' handlers
    await servers.aclose()             # stops every server; no process is left

Failures stay with the server that has them, and each is one clear error:

- A server that fails to start (bad command, exits, no answer within
  `startup_timeout_ms`) is skipped: its tools are not offered, the reason is in
  `errors` and in the log, with the last lines it wrote on stderr.
- A call with no answer within `tool_timeout_ms` fails; the request is cancelled on
  the server, which keeps running.
- A tool that reports an error (`isError`) fails with the tool's text.
- A server that exits (crashes) fails the calls in flight; it is not restarted
  silently under them. The next call of one of its tools starts it again (once; a
  server that then fails to start stays down and its calls fail with the reason).

Each server runs in a task of its own that holds the SDK's connection (see
`subsessions.tools.mcp.link`); a stdio server's stderr is read through a pipe, logged at
DEBUG, and its last lines are quoted in errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import mcp_types as types
import orjson
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from subsessions.config import Invocation, Tool
from subsessions.errors import McpToolError, SubsessionError
from subsessions.tools.mcp.config import McpServerConfig, parse_mcp_servers
from subsessions.tools.mcp.link import Link, describe

log = logging.getLogger("subsessions.mcp")

MAX_NAME = 64  # what the OpenAI APIs accept for a function name
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """`mcp__{server}__{tool}`, made safe for a function name (at most 64 characters)."""
    name = f"mcp__{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - 9]}_{digest}"


def render_content(result: types.CallToolResult) -> str:
    """A tool result as text: text parts joined, other parts described."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            size = len(block.data) * 3 // 4 - block.data[-2:].count("=")  # base64 to bytes
            parts.append(f"[{block.type}: {block.mime_type}, about {size} bytes, not shown]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.uri}" + (f" ({block.name})]" if block.name
                                                           else "]"))
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                parts.append(f"[resource {res.uri}: {res.mime_type or 'binary'}, not shown]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content, not shown]")
    if not parts and result.structured_content is not None:
        return orjson.dumps(result.structured_content).decode()
    return "\n".join(parts)


class _Server:
    """One configured server: starts it, calls its tools, restarts it after a crash."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.name = config.name
        self.failure: str | None = None  # why it is not running (start failures only)
        self.tools: list[types.Tool] = []
        self._link: Link | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> None:
        """Start the server; on failure remember (and log) why, and stop what was started."""
        link = Link(self.config)
        timeout = self.config.startup_timeout_ms / 1000
        problem: str | None = None
        try:
            await asyncio.wait_for(asyncio.shield(link.ready), timeout)
        except TimeoutError:
            problem = f"did not start within {self.config.startup_timeout_ms}ms"
        except BaseException:  # cancelled (closing): stop what was started
            await link.aclose(cancel=True)
            raise
        else:
            failure = link.failure
            problem = None if failure is None else f"failed to start: {describe(failure)}"
        if problem is not None:
            await link.stop(cancel=True)
            self.failure = problem + await link.stderr_tail()
            await link.aclose()
            log.warning("MCP server %s %s", self.name, self.failure)
            return
        self._link, self.tools, self.failure = link, link.tools, None

    async def _live(self, tool: str) -> tuple[Link, ClientSession]:
        async with self._lock:
            if self._closed:
                raise McpToolError(self.name, tool, "the MCP servers are closed")
            link = self._link
            if link is not None and link.alive and link.session is not None:
                return link, link.session
            if link is not None:  # it exited since the last call: start it again
                log.warning("MCP server %s had exited; starting it again", self.name)
                self._link = None
                await link.aclose()
                await self.start()
            link = self._link
            if link is None or link.session is None:
                raise McpToolError(self.name, tool, f"the server is not running: {self.failure}")
            return link, link.session

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        link, session = await self._live(tool)
        ms = self.config.tool_timeout_ms
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=ms / 1000)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise McpToolError(self.name, tool, f"no answer within {ms}ms (the call was "
                                   "cancelled; the server keeps running)") from None
            if exc.code == types.CONNECTION_CLOSED or link.lost.is_set():
                raise McpToolError(self.name, tool, await self._lost(link)) from None
            raise McpToolError(self.name, tool, f"error {exc.code}: {exc.message}") from None
        except Exception as exc:
            if link.lost.is_set():
                raise McpToolError(self.name, tool, await self._lost(link)) from None
            raise McpToolError(self.name, tool, describe(exc)) from None
        text = render_content(result)
        if result.is_error:
            raise McpToolError(self.name, tool, text or "the tool reported an error")
        return text

    async def _lost(self, link: Link) -> str:
        if self._closed:
            return "the MCP servers were closed during the call"
        await link.stop()
        return ("the server exited during the call" + await link.stderr_tail()
                + "; it will be started again on the next call")

    async def aclose(self) -> None:
        self._closed = True
        async with self._lock:
            link, self._link = self._link, None
        if link is not None:
            await link.aclose()


class McpServers:
    """The configured MCP servers of one engine, started on first use."""

    def __init__(self, servers: Mapping[str, Any], source: str = "config.toml") -> None:
        self.configs = parse_mcp_servers(servers, source)
        self._servers = [_Server(config) for config in self.configs]
        self._started: asyncio.Task[tuple[Tool, ...]] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<McpServers {[c.name for c in self.configs]} errors={self.errors}>"

    @property
    def errors(self) -> dict[str, str]:
        """Why each server that is not running failed to start, by server name."""
        return {s.name: s.failure for s in self._servers if s.failure is not None}

    async def tools(self) -> tuple[Tool, ...]:
        """Every running server's tools; the first call starts the servers (concurrently)."""
        if self._closed:
            raise SubsessionError("the MCP servers are closed")
        started = self._started
        if started is None:
            started = self._started = asyncio.get_running_loop().create_task(
                self._start_all(), name="mcp-servers-start")
        try:  # shielded: a caller that gives up leaves the start to the others (and aclose)
            return await asyncio.shield(started)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._closed and started.cancelled() and not (current and current.cancelling()):
                raise SubsessionError("the MCP servers are closed") from None
            raise

    async def _start_all(self) -> tuple[Tool, ...]:
        await asyncio.gather(*(server.start() for server in self._servers))
        tools: dict[str, Tool] = {}
        for server in self._servers:
            for spec in server.tools:
                name = tool_name(server.name, spec.name)
                if name in tools:
                    log.warning("MCP server %s: tool %s skipped: %s is taken", server.name,
                                spec.name, name)
                    continue
                tools[name] = Tool(
                    name=name,
                    description=spec.description or spec.title or
                    f"{spec.name} (from MCP server {server.name})",
                    parameters=dict(spec.input_schema),
                    handler=partial(_call, server, spec.name),
                )
        return tuple(tools.values())

    async def aclose(self) -> None:
        """Stop every server (their processes too); idempotent."""
        self._closed = True
        started = self._started
        if started is not None and not started.done():
            started.cancel()
            await asyncio.wait((started,))
        await asyncio.gather(*(server.aclose() for server in self._servers))


async def _call(server: _Server, tool: str, arguments: dict[str, Any],
                invocation: Invocation) -> str:
    return await server.call(tool, arguments)
