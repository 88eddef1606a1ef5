"""Session: a top-level conversation as hosts hold it: its named constructors, its tasks
(run in `task.py`), waking when its children end, and what applications ask of it. What it
shares with children is `Conversation`'s; its state is `SessionState`'s."""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from attrs import evolve

from subsessions._core.conversation import Conversation
from subsessions._core.origin import NEW, Origin, Phase
from subsessions._core.runtime import Runtime
from subsessions._core.tree import TreeLedger
from subsessions.config import SessionConfig
from subsessions.errors import InvalidArguments, SubsessionError, UnknownSession
from subsessions.profiles import Profile

log = logging.getLogger("subsessions")


class Session(Conversation):
    """One conversation. Create top-level ones with `Engine.create_session`."""

    __slots__ = ()

    # -- the named constructors ---------------------------------------------------------------
    @classmethod
    def new(cls, runtime: Runtime, config: SessionConfig, *, profile: Profile | None = None,
            source: str | dict[str, Any] = "exec", session_id: str | None = None,
            origin: Origin = NEW) -> Session:
        """A new top-level session (`session_id`: a host's own id for it; a fork's `origin`
        names what it starts from)."""
        if session_id is not None:
            origin = evolve(origin, session_id=session_id)
        return cls(runtime, config, profile=profile, source=source, origin=origin)

    @classmethod
    def resumed(cls, runtime: Runtime, config: SessionConfig, origin: Origin, *,
                source: str | dict[str, Any] = "exec") -> Session:
        """A top-level session whose rollout exists (`origin.rollout_path`)."""
        return cls(runtime, config, source=source, origin=origin)

    @classmethod
    def stand_in(cls, runtime: Runtime, config: SessionConfig, session_id: str,
                 ledger: TreeLedger) -> Session:
        """A top-level session of another process, standing in for it where some of its
        children run (a Ray shard): it writes nothing and never runs a task; its tree is
        counted by that process through `ledger`."""
        return cls(runtime, config, origin=Origin(session_id, os.devnull, ledger=ledger))

    # -- listeners and host answers ---------------------------------------------------------
    def handle_pending_tool_call(
        self, request_id: str, result: Any = None, error: str | None = None
    ) -> bool:
        """Answer a deferred tool's call (an `external_tool.requested` event).

        Safe to call from another thread than the engine's event loop.

        Args:
            request_id: the event's `request_id`.
            result: the tool's output: a string as is, another value as JSON, None as
                empty output. Ignored when `error` is given.
            error: the call failed with this text, which the model is shown.

        Returns:
            False if no call of this session waits on `request_id` (answered already, or
            another session's).

        Raises:
            TypeError: `result` is not a string and cannot be encoded as JSON.
        """
        return self.runtime.dispatcher.answer(self, request_id, result, error)

    # -- what applications ask of it -------------------------------------------------------
    def abort(self) -> bool:
        """Cancel its running task (which cancels its children first).

        A `send_and_wait` waiting on that task raises `asyncio.CancelledError`. The session
        stays open and can run another task.

        Returns:
            Whether a task was running.
        """
        return bool(self.runtime.cancel_top_tasks(self.session_id))

    # -- the task loop ----------------------------------------------------------------------
    async def send_and_wait(self, prompt: str, timeout: float | None = None) -> str | None:
        """Run one task to its end and return its last assistant message.

        The task runs in a task the engine owns: cancelling the caller cancels it (and its
        children), and closing the engine ends it.

        Args:
            prompt: the user message that starts the task.
            timeout: seconds to wait. After it the caller gets `StillRunning` and the task
                goes on, as with the Copilot SDKs' `send_and_wait(timeout=)`: its end is the
                `session.idle` event, its answer is in the events and the rollout. None:
                wait until it ends.

        Returns:
            The task's last assistant message (None if it wrote none).

        Raises:
            InvalidArguments: `prompt` is empty, or `timeout` is not a positive number.
            SessionBusy: a task is already running in this session.
            UnknownSession: the engine destroyed this session (`destroy_session`).
            StillRunning: `timeout` passed first; the task goes on. Also a `TimeoutError`.
            EngineClosed: the engine is closed, or was closed (or this session destroyed)
                while the task ran.
            MaxTurnsExceeded: the task made `max_turns` model calls without a final answer.
            BudgetExhausted: a limit of the config's `budget` (which counts the whole
                tree) was reached.
            ModelError: the model client failed.
            asyncio.CancelledError: `abort()` cancelled the task.
        """
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, int | float)
                                    or not 0 < timeout < math.inf):
            raise InvalidArguments("send_and_wait", "timeout must be a positive number of "
                                   "seconds, or None")
        if not self.runtime.registered(self.session_id):  # destroyed: its rollout is free
            raise UnknownSession(self.session_id)  # for a resume, never two writers
        return await self.runtime.run_owned(self.run_task(prompt), self.session_id, timeout)

    async def run_task(self, prompt: str, first: bool | None = None) -> str | None:
        """One task, claimed here unless the caller claimed it (`first` known: a woken
        task)."""
        if first is None:
            if not isinstance(prompt, str) or not prompt.strip():
                raise InvalidArguments("send_and_wait", "prompt must be a non-empty string")
            first = self.claim()
        try:
            return await self.runtime.backend.run_task(self, prompt, first)
        finally:
            if self._phase is Phase.RUNNING:
                self._phase = Phase.IDLE
            self.wake()
            await self.recorder.flush_durable()

    def claim(self) -> bool:
        """It runs a task from now on (refused if it is); whether it is its first. An earlier
        task's stop (a budget's) is not this one's."""
        if self._phase is not Phase.RUNNING:
            self.stop = None
        return super().claim()

    def wake(self) -> None:
        """`wake_on_child_end`: children ended unseen while this top-level session is idle,
        so a task starts whose input is their completion notices (a host never polls)."""
        if (not self._wakes(self.config.wake_on_child_end)
                or self.spawned is None or not self.subsessions.has_notices):
            return
        notices = "\n".join(info.notice() for info in self.subsessions.take_notices())
        if notices:  # else every one of them was seen meanwhile
            self._start_woken(notices)

    def _wakes(self, asked: bool) -> bool:
        return (asked and self._phase is not Phase.RUNNING
                and not self.runtime.closed and self.runtime.registered(self.session_id))

    def _start_woken(self, prompt: str) -> None:
        first = self.claim()
        self.runtime.spawn_task(self._woken(first, prompt), f"subsessions-wake-{self.session_id}")

    def hear(self, text: str) -> str:
        """A child's message: read before this session's next model call ("queued"), or,
        idle and top-level with `wake_on_child_end` or `wake_on_message`, the prompt of a
        task started now ("started")."""
        config = self.config
        if self._wakes(config.wake_on_child_end or config.wake_on_message):
            self._start_woken(text)
            return "started"
        return super().hear(text)

    async def _woken(self, first: bool, notices: str) -> None:
        try:
            await self.run_task(notices, first)
        except SubsessionError as exc:  # its ending is in the rollout and the events
            log.info("task woken by a child's ending failed: %s", exc)
