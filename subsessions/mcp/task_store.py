"""The store behind MCP Tasks: a task per `run_session` child or `run_sessions` run.

A task id is random (192 bits) and is the only handle on its task. Over stdio each
connection has its own store, so every other connection gets `unknown task {id}`,
whether or not the id exists elsewhere. Over stateless HTTP there is no
connection: one store for the server, where the id is the capability and nothing
lists it. Such a task lives on a lease (`lease` seconds since the client last asked
about it), the stateless wire's stand-in for an HTTP session's idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal

import mcp_types as types
from attrs import define, field
from mcp.shared.exceptions import MCPError

from subsessions._core.session import Session
from subsessions.errors import SubsessionError
from subsessions.mcp import run

Status = Literal["working", "completed", "failed", "cancelled"]
TERMINAL: frozenset[Status] = frozenset({"completed", "failed", "cancelled"})
Outcome = tuple[run.Outcome, types.CallToolResult]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@define
class McpTask:
    """One task: the work behind a task-augmented call, and the children it started."""

    task_id: str
    session: Session  # the parent of its children
    runner: asyncio.Task[Outcome]
    children: Callable[[], list[str]]  # the ids of the children it started so far
    status_line: Callable[[], str]  # `running, 2 turns, 340 tokens`
    created_at: str
    updated_at: str
    born: float = field(factory=time.monotonic)
    seen: float = field(factory=time.monotonic)  # when its client last asked about it
    # Ends what exists only for this task (a stateless HTTP call's own connection).
    release: Callable[[], Awaitable[None]] | None = None

    def status(self) -> Status:
        if not self.runner.done():
            return "working"
        if self.runner.cancelled():
            return "cancelled"  # tasks/cancel, or its connection ended
        if self.runner.exception() is not None:
            return "failed"
        return self.runner.result()[0]

    def status_message(self) -> str | None:
        with contextlib.suppress(SubsessionError):  # its session is gone
            return self.status_line()
        return None

    async def cancel(self) -> None:
        """Stop the work, then cancel every child it started that still runs (each with
        its subtree). Nothing changes for a task that has ended."""
        if not self.runner.done():
            self.runner.cancel()
            await asyncio.wait((self.runner,))
        for child_id in self.children():
            with contextlib.suppress(SubsessionError):  # ended, or the session is gone
                await self.session.subsessions.cancel_child(child_id)


class TaskRegistry:
    """The tasks of one connection (or, over stateless HTTP, of the server)."""

    def __init__(self, lease: float | None = None) -> None:
        self.lease = lease  # seconds a task lives unasked-about; None: as long as the store
        # In whole ms now, so a lease no task can be given fails here, before any task or
        # child exists, and describing a task later is integer arithmetic that cannot.
        self._lease_ms = None if lease is None else round(lease * 1000)
        self._tasks: dict[str, McpTask] = {}

    def start(self, session: Session, work: Coroutine[Any, Any, Outcome],
              children: Callable[[], list[str]], status_line: Callable[[], str],
              release: Callable[[], Awaitable[None]] | None = None) -> McpTask:
        runner = asyncio.get_running_loop().create_task(work, name="subsessions-mcp-task")
        now = _now()
        task = McpTask(secrets.token_urlsafe(24), session, runner, children, status_line,
                       now, now, release=release)
        runner.add_done_callback(lambda _: setattr(task, "updated_at", _now()))
        self._tasks[task.task_id] = task
        return task

    def find(self, task_id: str) -> McpTask:
        """The task, its lease renewed; `unknown task` for any id not in this store."""
        task = self._tasks.get(task_id)
        if task is None:  # another connection's, expired, or none: the same answer
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown task {task_id}")
        task.seen = time.monotonic()
        return task

    def lookup(self, task_id: str) -> McpTask | None:
        return self._tasks.get(task_id)

    def ttl_ms(self, task: McpTask) -> int | None:
        """`ttlMs`: null while the store keeps it; with a lease, creation to expiry."""
        if self._lease_ms is None:
            return None
        return round((task.seen - task.born) * 1000) + self._lease_ms

    async def expire(self) -> int:
        """End and forget the tasks nobody asked about for `lease` seconds; how many."""
        if self.lease is None:
            return 0
        deadline = time.monotonic() - self.lease
        stale = [t for t in self._tasks.values() if t.seen < deadline]
        for task in stale:  # each forgotten once ended: an interrupted sweep loses none
            await _end(task)
            self._tasks.pop(task.task_id, None)
        return len(stale)

    async def close(self) -> None:
        """The store's owner ended: every task's work and children end with it."""
        while self._tasks:
            task = next(iter(self._tasks.values()))
            await _end(task)
            self._tasks.pop(task.task_id, None)


async def _end(task: McpTask) -> None:
    await task.cancel()
    if task.release is not None:
        await task.release()
