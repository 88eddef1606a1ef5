"""MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) for `run_session` and `run_sessions`.

The SDK (2.3) brings the extension interface (SEP-2133: an `Extension` advertised under
the server's capabilities, additive methods, a `tools/call` interceptor, the wire's open
`resultType`) but no task store: `subsessions.mcp.task_store` is that store. Tasks exist
on the 2026-07-28 wire only (the SDK sieves a task handle out of a 2025-11-25
`tools/call`); older clients, and 2026 clients that do not declare the extension on the
request, get the blocking tool.

A task's status is its work's: `working` while it runs, `completed` when it ended (a
failed child too: its result has `isError`, as SEP-2663 says), `cancelled`, and `failed`
only for a fault of ours (a JSON-RPC error). `run_session` is one task per child,
`run_sessions` one task per run (`subsessions.mcp.runs` says why). Status notifications
(`notifications/tasks`) ride `subscriptions/listen` (`subsessions.mcp.task_listen`).
Not served: `tasks/update` (children never ask their host for input).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from subsessions._core.session import Session
from subsessions.errors import SubsessionError, error_text
from subsessions.mcp import run, runs
from subsessions.mcp.connection import ClientConnection
from subsessions.mcp.front import TASKS_EXTENSION
from subsessions.mcp.task_store import McpTask, TaskRegistry

log = logging.getLogger("subsessions.mcp")

Context = ServerRequestContext[Any, Any]
POLL_INTERVAL_MS = 500
TASK_TOOLS = frozenset({run.NAME, runs.NAME})


class Hosting(Protocol):
    """Where a request's tasks live and whose session its children join (the app)."""

    def registry(self, ctx: Context) -> TaskRegistry: ...

    def caller(self, ctx: Context) -> tuple[ClientConnection, bool]:
        """The connection the call runs in; True when it exists for this call alone."""
        ...

    def call_id(self, ctx: Context) -> str: ...

    def stateless(self, ctx: Context) -> bool:
        """A 2026-07-28 HTTP request: no connection behind it."""
        ...

    def client_for(self, ctx: Context) -> ClientConnection: ...

    def settle(self, work: Coroutine[Any, Any, None]) -> Awaitable[None]:
        """`work` run to its end even if the request awaiting it is cancelled."""
        ...


def client_wants_task(ctx: Context) -> bool:
    """The request declared the tasks extension (2026-07-28 per-request capabilities)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities else None
    return bool(extensions) and TASKS_EXTENSION in (extensions or {})


def require_tasks(ctx: Context) -> None:
    """SEP-2663: task methods from a request that did not declare the extension: -32021."""
    if not client_wants_task(ctx):
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Missing required client capability",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


def describe(registry: TaskRegistry, task: McpTask, *, detailed: bool) -> dict[str, Any]:
    """The wire `Task` (camelCase); `detailed` adds the result or error (`DetailedTask`)."""
    status = task.status()
    body: dict[str, Any] = {
        "taskId": task.task_id, "status": status, "createdAt": task.created_at,
        "lastUpdatedAt": task.updated_at, "ttlMs": registry.ttl_ms(task),
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    message = task.status_message()
    if message is not None:
        body["statusMessage"] = message
    if not detailed:
        return body
    if status == "completed":
        result = task.runner.result()[1]
        body["result"] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    elif status == "failed":
        fault = task.runner.exception()
        body["error"] = {"code": types.INTERNAL_ERROR,
                         "message": f"internal error: {error_text(fault) if fault else 'stopped'}"}
    return body


async def start(registry: TaskRegistry, session: Session, name: str, arguments: dict[str, Any],
                call_id: str, release: Callable[[], Awaitable[None]] | None) -> McpTask:
    """Check the call and start its work as a task; the tools' errors raised."""
    if name == run.NAME:
        child_id = await run.start(session, arguments, call_id)
        return registry.start(session, run.outcome(session, child_id), lambda: [child_id],
                              lambda: run.status_message(session, child_id), release)
    checked = runs.plan(session, arguments)
    tracked = runs.Tracked(session.subsessions)
    return registry.start(session, runs.outcome(session, checked, tracked, call_id),
                          lambda: list(tracked.ids),
                          lambda: runs.status_message(session, checked, tracked), release)


class TasksExtension(Extension):
    """Serves `run_session` / `run_sessions` as tasks to requests that declare the extension."""

    identifier = TASKS_EXTENSION

    def __init__(self, hosting: Hosting) -> None:
        self._hosting = hosting

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", types.GetTaskRequestParams, self._get, modern),
            MethodBinding("tasks/cancel", types.CancelTaskRequestParams, self._cancel, modern),
        )

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not client_wants_task(ctx):
            return await call_next(ctx)
        registry = self._hosting.registry(ctx)
        connection, own = self._hosting.caller(ctx)
        made = False
        try:
            session = await connection.session()
            task = await start(registry, session, params.name, params.arguments or {},
                               self._hosting.call_id(ctx), connection.close if own else None)
            made = True
        except SubsessionError as exc:  # bad arguments, limits: a plain error result
            return run.text_result(str(exc), error=True)
        finally:
            if own and not made:  # nothing started in the call's own connection
                await self._hosting.settle(connection.close())
        return {"resultType": "task", **describe(registry, task, detailed=False)}

    async def _get(self, ctx: Context, params: types.GetTaskRequestParams) -> HandlerResult:
        require_tasks(ctx)
        registry = self._hosting.registry(ctx)
        return describe(registry, registry.find(params.task_id), detailed=True)

    async def _cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> HandlerResult:
        require_tasks(ctx)
        task = self._hosting.registry(ctx).find(params.task_id)
        await self._hosting.settle(task.cancel())  # a dropped request still cancels it
        return {}


def version_gated(binding: MethodBinding) -> Callable[[Context, Any], Awaitable[HandlerResult]]:
    """The binding's handler, `Method not found` on wire revisions it does not serve."""
    versions = binding.protocol_versions

    async def handler(ctx: Context, params: Any) -> HandlerResult:
        if versions is not None and ctx.protocol_version not in versions:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found",
                           data=binding.method)
        return await binding.handler(ctx, params)

    return handler
