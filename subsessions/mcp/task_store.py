"""The store behind MCP Tasks: one per connection, one task per `run_session` child.

A task id is random and known only to the connection that made it (DESIGN 4): every
other connection gets `unknown task {id}`, whether or not it exists elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from datetime import UTC, datetime
from typing import Literal

import mcp_types as types
from attrs import define
from mcp.shared.exceptions import MCPError

from subsessions.mcp import run
from subsessions.session import Session

Status = Literal["working", "completed", "failed", "cancelled"]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@define
class ChildTask:
    """One `run_session` child behind a task id nobody can guess."""

    task_id: str
    child_id: str
    runner: asyncio.Task[tuple[run.Outcome, types.CallToolResult]]
    created_at: str
    updated_at: str

    def status(self) -> Status:
        if not self.runner.done():
            return "working"
        if self.runner.cancelled() or self.runner.exception() is not None:
            return "failed"
        return self.runner.result()[0]


class TaskRegistry:
    """The tasks of one connection."""

    def __init__(self) -> None:
        self._tasks: dict[str, ChildTask] = {}

    def start(self, session: Session, child_id: str) -> ChildTask:
        runner = asyncio.get_running_loop().create_task(
            run.outcome(session, child_id), name=f"subsessions-mcp-task-{child_id}")
        now = _now()
        task = ChildTask(secrets.token_urlsafe(24), child_id, runner, now, now)
        runner.add_done_callback(lambda _: setattr(task, "updated_at", _now()))
        self._tasks[task.task_id] = task
        return task

    def find(self, task_id: str) -> ChildTask:
        task = self._tasks.get(task_id)
        if task is None:  # another connection's, or none: the same answer either way
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown task {task_id}")
        return task

    async def close(self) -> None:
        """The connection ended: stop waiting (its children are aborted by the caller)."""
        runners = [t.runner for t in self._tasks.values()]
        for runner in runners:
            runner.cancel()
        for runner in runners:
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        self._tasks.clear()
