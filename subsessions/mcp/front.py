"""What `subsessions mcp` serves over stdio before its engine exists: the handshake.

An MCP host sends `initialize` the moment it starts the server, and the Codex CLI sends its
first model request once its servers have answered or its wait ran out: a server that first
imports its model client and builds its engine answers late, and that first turn has none of
its tools. So the process answers from a front `Server` built on the SDK alone: the name,
version, instructions and capabilities of `SubsessionsMcp`'s own (a test holds them equal),
every other method forwarded to the app. `tools/list` is answered from the profiles
(`subsessions.mcp.catalog`, which the engine is then built on), so a host's first turn has
every tool however long the engine takes. The app (the model client, the engine, Ray) is
built once that answer is out: building it beside the answer (its imports hold the GIL) made
the answer miss Codex's one-second grace on a loaded machine. A host that lists no tools
gets it `BUILD_GRACE` after its handshake, or with its first request that needs it.

This module imports the MCP SDK and nothing else of the package but its version: importing
the engine here would be paying for it before the handshake again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from subsessions._version import __version__

Context = ServerRequestContext[Any, Any]
NAME = "subsessions"
BUILD_GRACE = 1.0  # seconds after `notifications/initialized`, for a host that lists no tools
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
INSTRUCTIONS = (
    "Delegate work to sub-sessions: create_session starts one from a profile and returns its "
    "id at once; run_session runs one to its end and run_sessions several (each call a task, "
    "for clients that negotiate MCP Tasks); wait_session / wait_sessions collect answers "
    "(with progress notifications when asked for); cancel_session stops one; list_sessions "
    "shows them all; send_message tells a running one something, or starts an ended one "
    "again. Each connection is one parent session: disconnecting cancels its running "
    "sub-sessions. The transcript of each of this connection's sessions is the resource "
    "rollout://{session_id}."
)
# What `SubsessionsMcp` serves on stdio besides `ping` and `tools/list` (answered here), with
# each method's params type.
FORWARDED: dict[str, type[BaseModel]] = {
    "tools/call": types.CallToolRequestParams,
    "resources/list": types.PaginatedRequestParams,
    "resources/templates/list": types.PaginatedRequestParams,
    "resources/read": types.ReadResourceRequestParams,
    "subscriptions/listen": types.SubscriptionsListenRequestParams,
    "tasks/get": types.GetTaskRequestParams,
    "tasks/cancel": types.CancelTaskRequestParams,
}


class SubsessionsServer(Server[Any]):
    """The SDK's lowlevel `Server`, advertising only the changes it tells of, on either wire:
    the rollout list changes (`subsessions.mcp.resources` tells), the tools never do (the
    profiles they name are read once, at start), and no one resource's content is followed
    (`subscribe`). The SDK would advertise all three wherever `subscriptions/listen` is
    served (ours is for task notifications), and none on the handshake wire."""

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        told = NotificationOptions(resources_changed=True)
        found = super().get_capabilities(told, experimental_capabilities, extensions,
                                         protocol_version=protocol_version)
        update: dict[str, Any] = {}
        if found.tools is not None:
            update["tools"] = types.ToolsCapability(list_changed=False)
        if found.resources is not None:
            update["resources"] = types.ResourcesCapability(subscribe=False, list_changed=True)
        return found.model_copy(update=update)


class Serving(Protocol):
    """The app (`SubsessionsMcp`), as far as forwarding to it goes."""

    @property
    def server(self) -> Server[Any]: ...


App = TypeVar("App", bound=Serving)


class Deferred(Generic[App]):
    """The app, built once, by the first who asks for it; if that fails, every request is
    told why, and `failed` holds the error."""

    def __init__(self, build: Callable[[], Awaitable[App]]) -> None:
        self._build = build
        self._task: asyncio.Task[App] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.app: App | None = None  # once built
        # What kept it from being built, for whoever serves.
        self.failed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    def start_later(self, delay: float) -> None:
        if self._task is None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(delay, self.start)

    def start(self) -> asyncio.Task[App]:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._made(), name="subsessions-mcp-build")
        return self._task

    async def _made(self) -> App:
        try:
            self.app = await self._build()
        except Exception as exc:
            self.failed.set_result(exc)
            raise
        return self.app

    async def get(self) -> App:
        """The app; a request cancelled while it waits does not cancel the build."""
        task = self.start()
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _not_started(exc) from None

    async def stop(self) -> None:
        """A build still under way is cancelled and waited for (its `finally` clauses run)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait((self._task,))
        if self._task is not None and not self._task.cancelled():
            self._task.exception()  # retrieved: its failure is `failed`'s to tell


def front_server(
    deferred: Deferred[Any], tools: Callable[[], types.ListToolsResult]
) -> Server[Any]:
    """The stdio server: answers the handshake and `tools/list` (from `tools()`, which reads
    the profiles, not the engine) at once, and forwards the rest to the app."""
    server = SubsessionsServer(NAME, version=__version__, instructions=INSTRUCTIONS)
    for method, params_type in FORWARDED.items():
        server.add_request_handler(method, params_type, _forward(deferred, method))

    async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        if deferred.failed.done():  # told as every other request is
            raise _not_started(deferred.failed.result())
        try:
            listed = tools()
        except Exception as exc:  # the home or a profile: what the engine would refuse
            raise _not_started(exc) from None
        # Started on the next turn of the loop: the answer is on its way to the host first.
        asyncio.get_running_loop().call_soon(deferred.start)
        return listed

    server.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)

    async def initialized(ctx: Context, params: types.NotificationParams) -> None:
        deferred.start_later(BUILD_GRACE)  # unless `tools/list` comes first

    server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                    initialized)
    server.extensions[TASKS_EXTENSION] = {}
    return server


def _not_started(exc: Exception) -> MCPError:
    return MCPError(code=types.INTERNAL_ERROR, message=f"subsessions could not start: {exc}")


def _forward(deferred: Deferred[Any], method: str) -> Callable[[Context, Any], Awaitable[Any]]:
    async def forward(ctx: Context, params: Any) -> Any:
        app = await deferred.get()
        entry = app.server.get_request_handler(method)
        if entry is None:  # FORWARDED and the app disagree: a test keeps them equal
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found",
                           data=method)
        return await entry.handler(ctx, params)

    return forward
