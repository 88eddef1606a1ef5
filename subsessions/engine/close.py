"""An engine's shutdown, run in a task of its own (`Engine.close`): every descendant is
aborted, the hosts' `on_session_end` hooks run (never for long), every task is drained, and
every rollout is written before the runtime and the MCP servers go."""

from __future__ import annotations

import asyncio

from subsessions._core.dispatch import Dispatcher
from subsessions._core.runtime import Runtime
from subsessions._core.session import Session
from subsessions.engine.control.server import ControlServer
from subsessions.engine.mcp_servers import McpSources

HOOK_SECONDS = 5.0  # how long close waits for the hosts' on_session_end hooks


async def shut_down(runtime: Runtime, registered: dict[str, Session],
                    dispatcher: Dispatcher[Session], control: ControlServer | None,
                    mcp: McpSources, open_here: set[str]) -> None:
    """End the engine's top-level sessions (`registered`, emptied here) and all it runs;
    `open_here`: the ids open in this process, which theirs leave."""
    sessions = list(registered.values())
    runtime.cancel_top_tasks()  # a top-level task aborts its own children first
    await asyncio.gather(
        *(s.subsessions.abort_all_children() for s in sessions), return_exceptions=True
    )
    if control is not None:  # its requests in flight are answered, then it goes
        await control.aclose()
    await _end_hooks(dispatcher, sessions)
    await runtime.drain()
    try:
        await runtime.backend.aclose()  # every task has ended: its workers (if any) go
        await runtime.stop_flusher()
        flushed = [s.recorder.flush_durable() for s in sessions]
        if flushed:
            await asyncio.wait(flushed)
        for future in flushed:
            future.exception()  # retrieved: a failed last write must not warn at exit
        await mcp.aclose()
    finally:
        await runtime.aclose()
        for session in sessions:
            session.close_events()
            open_here.discard(session.session_id)
        registered.clear()
        dispatcher.clear()


async def _end_hooks(dispatcher: Dispatcher[Session], sessions: list[Session]) -> None:
    """Top-level `on_session_end` hooks, after the cancelling, never for long."""
    loop = asyncio.get_running_loop()
    hooks = [
        loop.create_task(dispatcher.invoke_hook(s, "on_session_end", {"reason": "close"}))
        for s in sessions if s.config.hooks is not None
    ]
    if hooks:
        _, late = await asyncio.wait(hooks, timeout=HOOK_SECONDS)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
