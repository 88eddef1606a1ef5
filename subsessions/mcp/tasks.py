"""MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) for `run_session`: one task per child.

The SDK (2.3) brings the extension interface (SEP-2133: an `Extension` advertised under
the server's capabilities, additive methods, a `tools/call` interceptor, the wire's open
`resultType`) but no task store: this module is that store, one per connection, so a
task id is known only to the connection that made it (DESIGN 4) and every other
connection gets `unknown task`. Tasks exist on the 2026-07-28 wire only (the SDK sieves
a task handle out of a 2025-11-25 `tools/call`); older clients get the blocking tool.

The store is `subsessions.mcp.task_store`. A task's status is its child's: `working`
while it runs, `completed` when it ended (a failed child too: its result has
`isError`, as SEP-2663 says), `cancelled`, and `failed` only for a fault of ours
(a JSON-RPC error). Tasks live as long as their connection (`ttlMs: null`); when it
ends they are cancelled with its children.
Not yet: `notifications/tasks` (the SDK's `subscriptions/listen` carries a closed set of
events) and `tasks/update` (children never ask their host for input).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from subsessions.errors import SubsessionError, error_text
from subsessions.mcp import run
from subsessions.mcp.connection import ClientConnection
from subsessions.mcp.task_store import ChildTask

log = logging.getLogger("subsessions.mcp")

Context = ServerRequestContext[Any, Any]
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 500


def client_wants_task(ctx: Context) -> bool:
    """The request declared the tasks extension (2026-07-28 per-request capabilities)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities else None
    return bool(extensions) and TASKS_EXTENSION in (extensions or {})


def describe(connection: ClientConnection, task: ChildTask, *, detailed: bool) -> dict[str, Any]:
    """The wire `Task` (camelCase); `detailed` adds the result or error (`DetailedTask`)."""
    status = task.status()
    body: dict[str, Any] = {
        "taskId": task.task_id, "status": status, "createdAt": task.created_at,
        "lastUpdatedAt": task.updated_at, "ttlMs": None, "pollIntervalMs": POLL_INTERVAL_MS,
    }
    session = connection.session_or_none
    if session is not None:
        with contextlib.suppress(SubsessionError):
            body["statusMessage"] = run.status_message(session, task.child_id)
    if not detailed:
        return body
    if status == "completed":
        result = task.runner.result()[1]
        body["result"] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    elif status == "failed":
        fault = None if task.runner.cancelled() else task.runner.exception()
        why = "stopped" if fault is None else error_text(fault)
        body["error"] = {"code": types.INTERNAL_ERROR,
                         "message": f"internal error in run_session: {why}"}
    return body


class TasksExtension(Extension):
    """Serves `run_session` as a task to clients that declare the extension."""

    identifier = TASKS_EXTENSION

    def __init__(self, connection_for: Callable[[Context], ClientConnection],
                 call_id_for: Callable[[Context], str]) -> None:
        self._connection_for = connection_for
        self._call_id_for = call_id_for

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", types.GetTaskRequestParams, self._get, modern),
            MethodBinding("tasks/cancel", types.CancelTaskRequestParams, self._cancel, modern),
        )

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        if params.name != run.NAME or not client_wants_task(ctx):
            return await call_next(ctx)
        connection = self._connection_for(ctx)
        try:
            session = await connection.session()
            child_id = await run.start(session, params.arguments or {}, self._call_id_for(ctx))
        except SubsessionError as exc:  # bad arguments, limits: a plain error result
            return run.text_result(str(exc), error=True)
        task = connection.tasks.start(session, child_id)
        return {"resultType": "task", **describe(connection, task, detailed=False)}

    async def _get(self, ctx: Context, params: types.GetTaskRequestParams) -> HandlerResult:
        connection = self._connection_for(ctx)
        return describe(connection, connection.tasks.find(params.task_id), detailed=True)

    async def _cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> HandlerResult:
        connection = self._connection_for(ctx)
        task = connection.tasks.find(params.task_id)
        session = connection.session_or_none
        if session is not None and not task.runner.done():
            await session.subsessions.cancel_child(task.child_id)  # and its subtree
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
