"""Task status notifications (`notifications/tasks`, SEP-2663) on `subscriptions/listen`.

A client that wants pushes instead of polls opens a listen stream naming task ids
(`notifications.taskIds`). The acknowledgement lists the ids honored: those this
client may ask about (its connection's, or over stateless HTTP any it holds); the
rest are left out, as an unknown id would be. Each notification is the whole
`DetailedTask` `tasks/get` would answer, sent whenever a task's status or status
message (turns, tokens) changes; the stream ends gracefully once every honored task
has ended and been told. An open stream keeps its tasks' leases alive (an open GET
stream keeps an HTTP session alive the same way).

Of the core kinds, `resourcesListChanged` is honored where there is a connection (not over
stateless HTTP): `notifications/resources/list_changed` each time the connection's rollout
list changes, and the stream stays open until the client closes it. The tools never change,
and no resource's content is followed, so those kinds are never honored.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, cast

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from pydantic import BaseModel

from subsessions.mcp.connection import ClientConnection
from subsessions.mcp.progress import PROGRESS_INTERVAL
from subsessions.mcp.resources import list_changes, listed_ids
from subsessions.mcp.task_store import TERMINAL, McpTask, TaskRegistry
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
        watched, told = None, frozenset[str]()
        if params.notifications.resources_list_changed and not self._hosting.stateless(ctx):
            watched = self._hosting.client_for(ctx)
            told = listed_ids(watched)  # what the client lists once acknowledged
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        honored: dict[str, Any] = {"taskIds": [t.task_id for t in tasks]} if tasks else {}
        if watched is not None:
            honored["resourcesListChanged"] = True
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=types.SubscriptionFilter.model_validate(honored),
                    _meta=meta)),
            related_request_id=subscription_id)
        if watched is None:
            await self._tell_tasks(ctx, registry, tasks, meta)
            return types.SubscriptionsListenResult(_meta=meta)
        async with asyncio.TaskGroup() as group:  # until the client closes the stream
            group.create_task(self._tell_tasks(ctx, registry, tasks, meta))
            group.create_task(_tell_list_changes(ctx, watched, told, meta))
        return types.SubscriptionsListenResult(_meta=meta)  # not reached: resources go on

    async def _tell_tasks(self, ctx: Context, registry: TaskRegistry, tasks: list[McpTask],
                          meta: dict[str, Any]) -> None:
        """Each task as `tasks/get` would answer it, whenever it changes, until all ended."""
        subscription_id = meta[SUBSCRIPTION_ID_META_KEY]
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


async def _tell_list_changes(ctx: Context, client: ClientConnection, told: frozenset[str],
                             meta: dict[str, Any]) -> None:
    async for _ in list_changes(client, told):
        await ctx.session.send_notification(
            types.ResourceListChangedNotification(params=types.NotificationParams(_meta=meta)),
            related_request_id=meta[SUBSCRIPTION_ID_META_KEY])


async def _changes(tasks: list[McpTask]) -> None:
    """Until a task's work ends, or a look at turns and tokens is due."""
    running = [t.runner for t in tasks if not t.runner.done()]
    if running:
        await asyncio.wait(running, timeout=PROGRESS_INTERVAL,
                           return_when=asyncio.FIRST_COMPLETED)
