"""The MCP server behind `subsessions mcp`: the sub-session tools and rollout resources.

Each client connection is one top-level session (`source: "mcp"`), created on the
connection's first tool call; its children are what `list_sessions` lists and what
the wait and cancel tools reach. When the connection ends, its session is destroyed:
every child still running is aborted (their rollouts end with `turn_aborted`).

On stdio one process serves one client, so the connection is the process's. On
streamable HTTP it is the MCP session (`Mcp-Session-Id`): it ends on DELETE, on the
idle timeout, or when the server stops. Stateless 2026-07-28 HTTP requests have no
connection to keep children in: there only `run_session` and `run_sessions` are served,
each call in a parent session of its own (ended with the call, or with its task:
`subsessions.mcp.task_store` says how long a task lives there), and every other tool
is refused with a clear error. `server/discover` is not offered over HTTP, so
`mode="auto"` clients take the handshake (stateful, every tool); a client pins
`2026-07-28` for tasks over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.extension import compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from subsessions._core.session import Session
from subsessions._core.tool_calls import subsessions as subsession_tools
from subsessions._version import __version__
from subsessions.children import ChildInfo
from subsessions.engine.facade import Engine
from subsessions.errors import SubsessionError, error_text
from subsessions.mcp import run, runs
from subsessions.mcp.catalog import LIST_SCHEMA, TOOL_NAMES, definitions
from subsessions.mcp.connection import ClientConnection
from subsessions.mcp.front import INSTRUCTIONS, NAME, SubsessionsServer
from subsessions.mcp.progress import progress_line as progress_line  # re-exported
from subsessions.mcp.progress import report_progress, wants_progress
from subsessions.mcp.resources import SCHEME, RolloutResources, push_list_changes
from subsessions.mcp.task_listen import TaskListener
from subsessions.mcp.task_store import Outcome, TaskRegistry
from subsessions.mcp.tasks import TASK_TOOLS, TasksExtension, version_gated
from subsessions.settings import Settings
from subsessions.tools.schema import check_arguments

log = logging.getLogger("subsessions.mcp")

Context = ServerRequestContext[Any, Any]

_STATE_KEY = "subsessions.client"
_T = TypeVar("_T")


def _text_result(text: str, *, error: bool = False) -> types.CallToolResult:
    structured: Any = None
    if not error:
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            parsed = None
        structured = parsed if isinstance(parsed, dict) else None
    return types.CallToolResult(content=[types.TextContent(text=text)],
                                structured_content=structured, is_error=error)


def _child_entry(info: ChildInfo) -> dict[str, Any]:
    """`list_sessions`' entry, with the model, a failure's error and the
    transcript's URI."""
    entry = {**info.listing(), "model": info.model, "rollout": f"{SCHEME}{info.session_id}"}
    if info.error is not None:
        entry["error"] = info.error
    return entry


def _awaited_ids(name: str, arguments: dict[str, Any]) -> list[str]:
    if name == "wait_session":
        value = arguments.get("session_id")
        return [value] if isinstance(value, str) else []
    values = arguments.get("session_ids")
    if not isinstance(values, list):
        return []
    return list(dict.fromkeys(v for v in values if isinstance(v, str)))


class SubsessionsMcp:
    """Builds the lowlevel MCP `Server` and answers its requests from one `Engine`."""

    def __init__(self, engine: Engine, settings: Settings, *, http: bool,
                 idle_timeout: float | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.http = http
        # stdio: the one client of this process; HTTP: one per MCP session, kept on it
        self.stdio_client = None if http else ClientConnection(engine, settings)
        # stateless HTTP tasks: the server's, each on a lease of the session idle timeout
        self.stateless_tasks = TaskRegistry(lease=idle_timeout if http else None)
        self._settling: set[asyncio.Task[None]] = set()
        rollouts = RolloutResources(self.client_for)  # each session's transcript
        self.server: Server[Any] = SubsessionsServer(
            NAME,
            version=__version__,
            instructions=INSTRUCTIONS,
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=rollouts.list_resources,
            on_list_resource_templates=rollouts.list_templates,
            on_read_resource=rollouts.read_resource,
            on_subscriptions_listen=TaskListener(self),
        )
        if http:
            self.server.add_request_handler("server/discover", types.RequestParams,
                                            _no_discover)
        # MCP Tasks for run_session(s), applied as MCPServer applies an SDK extension
        tasks = TasksExtension(self)
        for binding in tasks.methods():
            self.server.add_request_handler(binding.method, binding.params_type,
                                            version_gated(binding))
        self.server.extensions[tasks.identifier] = tasks.settings()
        self.server.add_request_handler("tools/call", types.CallToolRequestParams,
                                        compose_tool_call_handler([tasks], self._call_tool))

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """While serving: stateless tasks past their lease are ended; after: all of them."""
        reaper = None
        if self.stateless_tasks.lease is not None:
            reaper = asyncio.get_running_loop().create_task(
                self._reap(self.stateless_tasks.lease), name="subsessions-mcp-task-leases")
        try:
            yield {}
        finally:
            if reaper is not None:
                reaper.cancel()
                await asyncio.wait((reaper,))
            await self.drain()

    async def drain(self) -> None:
        """Serving is over: end the stateless tasks, and wait for what `settle` started."""
        await self.stateless_tasks.close()
        if self._settling:
            await asyncio.wait(self._settling)

    async def _reap(self, lease: float) -> None:
        while True:
            await asyncio.sleep(min(lease / 4, 1.0))
            if ended := await self.stateless_tasks.expire():
                log.info("%d MCP task(s) unasked-about for %ss ended", ended, lease)

    def settle(self, work: Coroutine[Any, Any, None]) -> Awaitable[None]:
        """`work` runs to its end even when the request awaiting it is cancelled (drained
        when the server stops)."""
        task = asyncio.get_running_loop().create_task(work, name="subsessions-mcp-settle")
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return asyncio.shield(task)

    # -- connections ------------------------------------------------------------------------
    def stateless(self, ctx: Context) -> bool:
        """A 2026-07-28 HTTP request: self-contained, no connection behind it."""
        return self.http and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    def registry(self, ctx: Context) -> TaskRegistry:
        """Where the request's tasks live: its connection's, or the stateless store."""
        return self.stateless_tasks if self.stateless(ctx) else self.client_for(ctx).tasks

    def caller(self, ctx: Context) -> tuple[ClientConnection, bool]:
        """The connection a call runs in; over stateless HTTP, one made for the call."""
        if self.stateless(ctx):
            return ClientConnection(self.engine, self.settings), True
        return self.client_for(ctx), False

    def call_id(self, ctx: Context) -> str:
        return f"mcp_{ctx.request_id}"

    def client_for(self, ctx: Context) -> ClientConnection:
        if self.stdio_client is not None:
            return self.stdio_client
        # The SDK (2.3) gives lowlevel handlers no public handle on the connection yet
        # (see TODO(L54) in mcp.server.context); its per-connection `state` and
        # `exit_stack` are the documented place for what we keep and how it ends.
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(
                code=types.INVALID_REQUEST,
                message="subsessions keeps sub-sessions per connection: over HTTP, connect "
                "with the initialize handshake (a stateful MCP session), not stateless "
                f"{ctx.protocol_version} requests (which are served run_session and "
                "run_sessions only)",
            )
        client: ClientConnection | None = connection.state.get(_STATE_KEY)
        if client is None:
            client = ClientConnection(self.engine, self.settings)
            connection.state[_STATE_KEY] = client
            connection.exit_stack.push_async_callback(client.close)
        return client

    # -- tools ------------------------------------------------------------------------------
    def tool_definitions(self) -> list[types.Tool]:
        return definitions({name: loaded.profile
                            for name, loaded in self.engine.profiles.items()})

    async def _list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tool_definitions())

    async def _call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        if name not in TOOL_NAMES:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
        arguments = params.arguments or {}
        client, own = self.caller(ctx) if name in TASK_TOOLS else (self.client_for(ctx), False)
        if not own and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # a handshake client is told of new rollouts unasked (2026-07-28: on listen)
            client.run_beside(push_list_changes(client, ctx.session))
        try:
            return await self._tool(ctx, client, name, arguments)
        finally:
            if own:  # the call's own parent session ends with it (its children too)
                await self.settle(client.close())

    async def _tool(self, ctx: Context, client: ClientConnection, name: str,
                    arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            session = await client.session()
            if name == "list_sessions":
                check_arguments(name, LIST_SCHEMA, arguments)
                entries = [_child_entry(info) for info in session.subsessions.children()]
                return _text_result(orjson.dumps({"sessions": entries}).decode())
            if name == run.NAME:
                child_id = await run.start(session, arguments, self.call_id(ctx))
                return await self._until_done(ctx, session, run.outcome(session, child_id),
                                              lambda: [child_id])
            if name == runs.NAME:
                checked = runs.plan(session, arguments)
                tracked = runs.Tracked(session.subsessions)
                return await self._until_done(
                    ctx, session, runs.outcome(session, checked, tracked, self.call_id(ctx)),
                    lambda: list(tracked.ids))
            raw = orjson.dumps(arguments).decode()
            work = subsession_tools.call(session.subsessions, name, raw, self.call_id(ctx))
            try:
                if name in ("wait_session", "wait_sessions") and wants_progress(ctx):
                    ids = _awaited_ids(name, arguments)
                    text = await self._with_progress(ctx, session, lambda: ids, work)
                else:
                    text = await work
            finally:
                session.flush()  # the parent's background events reach the file
        except SubsessionError as exc:
            return _text_result(str(exc), error=True)
        except Exception as exc:  # a bug, not the caller's fault: still one clear result
            log.exception("tool %s failed", name)
            return _text_result(f"internal error in {name}: {error_text(exc)}", error=True)
        return _text_result(text)

    async def _until_done(
        self, ctx: Context, session: Session, work: Awaitable[Outcome],
        children: Callable[[], list[str]],
    ) -> types.CallToolResult:
        """Without a task: the answer when the children end, progress meanwhile. A call
        the client gives up on cancels the children it started."""
        try:
            if wants_progress(ctx):
                _, result = await self._with_progress(ctx, session, children, work)
            else:
                _, result = await work
        except asyncio.CancelledError:
            await self.settle(_cancel_all(session, children()))
            raise
        return result

    async def _with_progress(
        self, ctx: Context, session: Session, ids: Callable[[], list[str]], work: Awaitable[_T]
    ) -> _T:
        reporter = asyncio.get_running_loop().create_task(
            report_progress(ctx, session, ids), name="subsessions-mcp-progress"
        )
        try:
            return await work
        finally:
            reporter.cancel()


async def _cancel_all(session: Session, child_ids: list[str]) -> None:
    for child_id in child_ids:
        with contextlib.suppress(SubsessionError):
            await session.subsessions.cancel_child(child_id)


async def _no_discover(ctx: Context, params: types.RequestParams) -> None:
    raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="server/discover")
