"""Progress notifications for the MCP tools that wait on children (`wait_*`, `run_session*`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.context import ServerRequestContext

from subsessions._core.session import Session
from subsessions.children import ChildInfo
from subsessions.errors import UnknownSession, error_text

log = logging.getLogger("subsessions.mcp")

Context = ServerRequestContext[Any, Any]
PROGRESS_INTERVAL = 0.1  # seconds between looks at the awaited children


def progress_line(infos: list[ChildInfo]) -> str:
    """`{id}: {status}, {turns} turns` for each awaited child, `; `-separated."""
    return "; ".join(f"{i.session_id}: {i.status.word}, {i.usage.turns} turns" for i in infos)


def wants_progress(ctx: Context) -> bool:
    meta = (ctx.params or {}).get("_meta")
    return isinstance(meta, dict) and meta.get("progressToken") is not None


async def report_progress(ctx: Context, session: Session, ids: Callable[[], list[str]]) -> None:
    """Until cancelled: a progress notification whenever an awaited child's status or
    turn count changes. `progress` (turns so far plus children ended) only grows."""
    sent = -1.0
    manager = session.subsessions
    while True:
        infos = []
        for child_id in ids():
            try:
                infos.append(manager.info(child_id))
            except UnknownSession:
                continue
        ended = sum(1 for i in infos if not i.status.running)
        progress = float(sum(i.usage.turns for i in infos) + ended)
        if infos and progress > sent:
            sent = progress
            try:
                await ctx.session.report_progress(progress, None, progress_line(infos))
            except Exception as exc:  # the request's channel is gone: nobody to tell
                log.debug("progress not sent: %s", error_text(exc))
                return
        await asyncio.sleep(PROGRESS_INTERVAL)
