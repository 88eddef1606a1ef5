"""The requester side of MCP Tasks (SEP-2663) for the tests, on the official SDK client's
extension interface (`ClientExtension`: a `resultType: "task"` claim and a
`notifications/tasks` binding), plus the raw task requests (with the `Mcp-Name` header
SEP-2663 asks for over HTTP) and a `subscriptions/listen` naming task ids."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result, SubscriptionsListenResult
from pydantic import BaseModel, ConfigDict, Field

from subsessions.rollouts import list_rollouts

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class TaskHandle(Result):
    """What a task-augmented `tools/call` returns (SEP-2663 `CreateTaskResult`)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTask(Result):
    """A `tasks/get` answer: the task, and its result or error once it has one."""

    task_id: str
    status: str
    status_message: str | None = None
    ttl_ms: int | None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskNote(BaseModel):
    """A `notifications/tasks` notification's params: a whole `DetailedTask`, stamped."""

    model_config = ConfigDict(extra="allow")
    taskId: str  # the wire names
    status: str
    statusMessage: str | None = None
    result: dict[str, Any] | None = None
    meta: dict[str, Any] = Field(alias="_meta")


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


class ListenParams(RequestParams):
    notifications: dict[str, Any]


class Listen(Request[ListenParams, Literal["subscriptions/listen"]]):
    method: Literal["subscriptions/listen"] = "subscriptions/listen"
    params: ListenParams


class Tasks(ClientExtension):
    """Declares the extension, resolves task handles by polling, collects notifications."""

    identifier = TASKS

    def __init__(self) -> None:
        self.notes: asyncio.Queue[TaskNote] = asyncio.Queue()

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=self._resolve),)

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return (NotificationBinding(method="notifications/tasks", params_type=TaskNote,
                                    handler=self._note),)

    async def _note(self, note: TaskNote) -> None:
        await self.notes.put(note)

    async def _resolve(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        while True:
            task = await ctx.session.send_request(
                GetTask(params=TaskIdParams(task_id=handle.task_id)), DetailedTask)
            if task.status in TERMINAL:
                assert task.result is not None, task
                return CallToolResult.model_validate(task.result)
            await asyncio.sleep(0.05)


async def get(client: Client, task_id: str) -> DetailedTask:
    return await client.session.send_request(GetTask(params=TaskIdParams(task_id=task_id)),
                                             DetailedTask)


async def cancel(client: Client, task_id: str) -> None:
    await client.session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), Result)


async def settled(client: Client, task_id: str, timeout: float = 10.0) -> DetailedTask:
    async with asyncio.timeout(timeout):
        while (task := await get(client, task_id)).status not in TERMINAL:  # noqa: ASYNC110 (polling is the protocol)
            await asyncio.sleep(0.05)
    return task


async def start(client: Client, prompt: str, **extra: Any) -> TaskHandle:
    """`run_session` of the default profile, as a task."""
    return await start_tool(client, "run_session",
                            {"session_type": "default", "prompt": prompt, **extra})


async def start_tool(client: Client, name: str, arguments: dict[str, Any]) -> TaskHandle:
    handle = await client.session.call_tool(name, arguments, allow_claimed=True)
    assert isinstance(handle, TaskHandle), handle
    return handle


async def listen(client: Client, task_ids: list[str]) -> SubscriptionsListenResult:
    """A listen stream for `task_ids`, to its graceful end (notes go to the extension)."""
    return await client.session.send_request(
        Listen(params=ListenParams(notifications={"taskIds": task_ids})),
        SubscriptionsListenResult)


def child_ids(home: Path) -> list[str]:
    """Every sub-session recorded in the home, oldest first."""
    return [row.session_id for row in reversed(list_rollouts(home, source="subsession"))]
