"""Task status notifications (`notifications/tasks`, SEP-2663) on `subscriptions/listen`.

A client that wants pushes instead of polls opens a listen stream naming task ids
(`notifications.taskIds`). The acknowledgement lists the ids honored: those this
client may ask about (its connection's, or over stateless HTTP any it holds); the
rest are left out, as an unknown id would be. Each notification is the whole
`DetailedTask` `tasks/get` would answer, sent whenever a task's status or status
message (turns, tokens) changes; the stream ends gracefully once every honored task
has ended and been told. An open stream keeps its tasks' leases alive (an open GET
stream keeps an HTTP session alive the same way). We publish no list changes, so the
core kinds are never honored.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, cast

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from pydantic import BaseModel

from subsessions.mcp.progress import PROGRESS_INTERVAL
from subsessions.mcp.task_store import TERMINAL, McpTask
from subsessions.mcp.tasks import Context, Hosting, describe, require_tasks


class TaskNotification(BaseModel):
    """`notifications/tasks`: the task as `tasks/get` would return it (nulls kept)."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: dict[str, Any]


def _wanted(notifications: types.SubscriptionFilter) -> list[str]:
    raw = (notifications.model_extra or {}).get("taskIds")
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(i, str) for i in raw):
        raise MCPError(code=types.INVALID_PARAMS,
                       message="notifications.taskIds must be a list of task ids")
    return list(dict.fromkeys(raw))


class TaskListener:
    """The `subscriptions/listen` handler: one call, one stream of task notifications."""

    def __init__(self, hosting: Hosting) -> None:
        self._hosting = hosting

    async def __call__(
        self, ctx: Context, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(code=types.INVALID_REQUEST,
                           message="subscriptions/listen requires a request id")
        wanted = _wanted(params.notifications)
        if wanted:
            require_tasks(ctx)
        registry = self._hosting.registry(ctx)
        tasks = [t for t in map(registry.lookup, wanted) if t is not None]
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        honored = types.SubscriptionFilter.model_validate(
            {"taskIds": [t.task_id for t in tasks]} if tasks else {})
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=honored, _meta=meta)),
            related_request_id=subscription_id)
        told: dict[str, tuple[str, str | None]] = {}
        while tasks:
            for task in tasks:
                registry.find(task.task_id)  # the lease, renewed while someone listens
                now = (task.status(), task.status_message())
                if told.get(task.task_id) != now:
                    body = {**describe(registry, task, detailed=True), "_meta": meta}
                    await ctx.session.send_notification(
                        cast(types.ServerNotification, TaskNotification(params=body)),
                        related_request_id=subscription_id)
                    told[task.task_id] = now
            tasks = [t for t in tasks if told[t.task_id][0] not in TERMINAL]
            await _changes(tasks)
        return types.SubscriptionsListenResult(_meta=meta)


async def _changes(tasks: list[McpTask]) -> None:
    """Until a task's work ends, or a look at turns and tokens is due."""
    running = [t.runner for t in tasks if not t.runner.done()]
    if running:
        await asyncio.wait(running, timeout=PROGRESS_INTERVAL,
                           return_when=asyncio.FIRST_COMPLETED)
