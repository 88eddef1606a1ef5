"""Running a batch: items pulled from the input as slots free, one child each, endings journaled.

A `Batch` (made by `planning.plan` or `planning.reopen`) keeps at most `max_concurrency`
children running, journals each ending before its output line, and forgets each ended child
so memory follows the concurrency, not the item count. Cancelled, it cancels its running
children and journals their endings before the cancel goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from attrs import define, field, frozen

from subsessions.batch.journal import COMPLETED, Journal
from subsessions.batch.output import Output
from subsessions.batch.source import Item, Scan, items
from subsessions.batch.template import MissingField, Template
from subsessions.budget import Budget
from subsessions.children import ChildInfo
from subsessions.errors import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    DepthLimitReached,
    EngineClosed,
    SessionBusy,
    SubsessionError,
    UnknownSession,
    UnknownSessionType,
)
from subsessions.profiles import Profile

FAILED_SHOWN = 20  # failed items a result lists
_FATAL = (DepthLimitReached, EngineClosed, SessionBusy, UnknownSessionType)


class BatchHost(Protocol):
    """What a batch needs of the manager whose children its items become."""

    async def spawn_child(self, profile: str, prompt: str, *, call_id: str | None = None,
                          budget: Budget | None = None,
                          output_schema: dict[str, Any] | None = None,
                          fork_turns: int | str | None = None) -> str: ...
    def wait_child(self, session_id: str,
                   timeout: float | None = None) -> Coroutine[Any, Any, Any]: ...
    def info(self, session_id: str) -> ChildInfo: ...
    def forget(self, session_id: str) -> None: ...
    async def cancel_child(self, session_id: str) -> bool: ...
    def profiles(self) -> Mapping[str, Profile]: ...


@frozen
class BatchResult:
    """What `run_batch` gives back (the `run_batch` tool answers `as_dict()`).

    Attributes:
        batch_id: the id to resume it with (`run_batch(..., resume=batch_id)`).
        total: items in the input.
        completed: items completed, those of earlier runs of the batch included.
        failed: items that failed.
        cancelled: items cancelled.
        output_path: where the output lines are.
        failed_items: the first 20 failures, as (the item's line, the error).
        journal_path: the batch's journal under the home's `batches/`.
    """

    batch_id: str
    total: int
    completed: int  # completed items, those of earlier runs of the batch included
    failed: int
    cancelled: int
    output_path: str
    failed_items: tuple[tuple[int, str], ...]  # the first 20: (item's line, error)
    journal_path: str

    def as_dict(self) -> dict[str, Any]:
        """The `run_batch` tool's answer."""
        return {"batch_id": self.batch_id, "total": self.total, "completed": self.completed,
                "failed": self.failed, "cancelled": self.cancelled,
                "output_path": self.output_path,
                "failed_items": [{"item": i, "error": e} for i, e in self.failed_items]}


@define
class Counters:
    """What a progress display reads (it polls; the run never calls it)."""

    total: int
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    running: int = 0
    tokens: int = 0
    skipped: int = 0  # completed in an earlier run: not run again
    started_at: float = field(factory=time.monotonic)

    @property
    def ended(self) -> int:
        return self.completed + self.failed + self.cancelled


@define(eq=False)
class Batch:
    journal: Journal
    scan: Scan
    template: Template
    output: Output
    session_type: str
    max_concurrency: int
    budget: Budget | None
    resuming: bool = False
    output_schema: dict[str, Any] | None = None  # its items' children are typed (3.13)
    fork_turns: int | str | None = None  # and forked from the batch's parent
    counters: Counters = field(init=False)
    _failed_items: list[tuple[int, str]] = field(factory=list, init=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False)
    _freed: asyncio.Event = field(factory=asyncio.Event, init=False)
    _running: dict[str, asyncio.Task[None]] = field(factory=dict, init=False)
    _error: Exception | None = field(default=None, init=False)  # recording an ending failed

    def __attrs_post_init__(self) -> None:
        self.counters = Counters(self.scan.total)

    @property
    def batch_id(self) -> str:
        return str(self.journal.header["batch_id"])

    async def run(self, host: BatchHost, call_id: str | None = None) -> BatchResult:
        """Run every item without a completed ending; the journal and output are closed
        at the end, whatever ends it."""
        try:
            if self.resuming:
                self.journal.resumed({"max_concurrency": self.max_concurrency, "budget": None
                                      if self.budget is None else self.budget.as_dict()})
            self.output.start(self.journal.completed_outputs() if self.resuming else ())
            self.counters.skipped = self.counters.completed = self.journal.completed
            self._slots = asyncio.Semaphore(self.max_concurrency)
            try:
                await self._feed(host, call_id)
            finally:
                await self._drain(host)
            if self._error is not None:
                raise self._error
        finally:
            self.close()
        return self.result()

    def close(self) -> None:
        """Close the output and the journal (which frees its lock); closing twice is fine."""
        self.output.close()
        self.journal.close()

    def result(self) -> BatchResult:
        c = self.counters
        return BatchResult(self.batch_id, c.total, c.completed, c.failed, c.cancelled,
                           str(self.output.path), tuple(self._failed_items),
                           str(self.journal.path))

    async def _feed(self, host: BatchHost, call_id: str | None) -> None:
        slots = self._slots
        assert slots is not None
        journal = self.journal
        for item in items(self.scan):
            if journal.is_completed(item.line):
                continue
            await slots.acquire()
            if self._error is not None:
                slots.release()
                return
            try:
                started = await self._start(host, item, call_id)
            except BaseException:
                slots.release()
                raise
            if not started:
                slots.release()

    async def _start(self, host: BatchHost, item: Item, call_id: str | None) -> bool:
        """Spawn the item's child (True), or record why it cannot run (False)."""
        if item.problem is not None:
            self._ended(item, "failed", None, item.problem, None)
            return False
        assert item.fields is not None
        try:
            prompt = self.template.render(item.fields)
        except MissingField as missing:
            self._ended(item, "failed", None,
                        f"line {item.line} has no field {missing.name!r} (the prompt names it)",
                        None)
            return False
        if not prompt.strip():
            self._ended(item, "failed", None, f"line {item.line}: the prompt is empty", None)
            return False
        while True:
            try:
                child = await host.spawn_child(
                    self.session_type, prompt, budget=self.budget,
                    call_id=None if call_id is None else f"{call_id}:{item.line}",
                    **self._spawn_options())
                break
            except ChildLimitReached:  # the tree's other children hold the slots
                if not self._running:
                    raise
                self._freed.clear()
                await self._freed.wait()
            except _FATAL:
                raise  # every item would fail the same way: the batch stops
            except SubsessionError as exc:
                self._ended(item, "failed", None, str(exc), None)
                return False
        self.counters.running += 1
        task = asyncio.get_running_loop().create_task(self._finish(host, item, child),
                                                      name=f"batch-item-{item.line}")
        self._running[child] = task
        return True

    async def _finish(self, host: BatchHost, item: Item, child: str) -> None:
        """Wait for one child and record its ending; an error writing it stops the batch."""
        try:
            error: str | None = None
            try:
                await host.wait_child(child)
                status = COMPLETED
            except ChildFailed as failed:
                status, error = "failed", failed.error
            except ChildCancelled:
                status, error = "cancelled", "cancelled"
            info = host.info(child)
            host.forget(child)
            self.counters.tokens += info.usage.total_tokens
            self._ended(item, status, info.session_id, error,
                        info.result if error is None else None, info.usage.as_dict())
        except Exception as exc:  # the journal or the output cannot be written
            if self._error is None:
                self._error = exc
        finally:
            self.counters.running -= 1
            del self._running[child]
            assert self._slots is not None
            self._slots.release()
            self._freed.set()

    def _spawn_options(self) -> dict[str, Any]:
        """What every item's child is spawned with besides its prompt."""
        options: dict[str, Any] = {}
        if self.output_schema is not None:
            options["output_schema"] = self.output_schema
        if self.fork_turns is not None:
            options["fork_turns"] = self.fork_turns
        return options

    def _ended(self, item: Item, status: str, session_id: str | None, error: str | None,
               result: str | None, usage: dict[str, Any] | None = None) -> None:
        line = self.output.line(item.line, status, result, error, session_id, usage,
                                item.fields)
        self.journal.ended(item.line, status, session_id, error, line)
        self.output.append(line)
        counters = self.counters
        if status == COMPLETED:
            counters.completed += 1
        elif status == "cancelled":
            counters.cancelled += 1
        else:
            counters.failed += 1
            if len(self._failed_items) < FAILED_SHOWN:
                self._failed_items.append((item.line, error or status))

    async def _drain(self, host: BatchHost) -> None:
        """Wait for the running children; when the batch itself is cancelled, they are
        cancelled first (a second cancel changes nothing). Their endings are journaled
        either way, and the cancel goes on afterwards."""
        current = asyncio.current_task()
        interrupted = current is not None and current.cancelling() > 0
        stopping: list[asyncio.Task[None]] = []
        stopped = False
        while self._running or stopping:
            if interrupted and not stopped:
                stopped = True
                stopping = [asyncio.get_running_loop().create_task(_stop(host, child))
                            for child in self._running]
            try:
                await asyncio.wait([*self._running.values(), *stopping])
            except asyncio.CancelledError:
                interrupted = True
            for task in stopping:
                if task.done():
                    self._retrieve(task)
            stopping = [task for task in stopping if not task.done()]
        if interrupted:
            raise asyncio.CancelledError

    def _retrieve(self, task: asyncio.Task[None]) -> None:
        """A finished task's outcome, taken (asyncio logs one never taken): an error stops
        the batch, as one recording an ending does."""
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Exception) and self._error is None:
            self._error = error


async def _stop(host: BatchHost, child: str) -> None:
    with contextlib.suppress(UnknownSession):  # it ended and was forgotten meanwhile
        await host.cancel_child(child)
