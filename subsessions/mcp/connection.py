"""One MCP client connection: its top-level session, and the only sessions it may reach.

A connection (stdio: the process's one client; HTTP: one MCP session) sees, waits for,
cancels and reads only its own parent session and that session's descendants (isolation
between hosts). When it ends, its running children are aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from subsessions._core.conversation import Conversation
from subsessions._core.session import Session
from subsessions.config import SessionConfig
from subsessions.engine import access
from subsessions.engine.command_hooks import hooks_from_settings
from subsessions.engine.facade import Engine
from subsessions.engine.instructions import with_base_instructions
from subsessions.errors import EngineClosed, UnknownSession
from subsessions.mcp.task_store import TaskRegistry
from subsessions.settings import Settings

log = logging.getLogger("subsessions.mcp")


class ClientConnection:
    """One MCP client connection: its top-level session, made on first use."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self._engine = engine
        self._settings = settings
        self._session: Session | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._beside: asyncio.Task[None] | None = None
        self.tasks = TaskRegistry()  # its MCP Tasks (run_session), known to it only

    def __repr__(self) -> str:
        sid = self._session.session_id if self._session else None
        return f"<ClientConnection session={sid} closed={self._closed}>"

    @property
    def session_or_none(self) -> Session | None:
        return self._session

    async def session(self) -> Session:
        async with self._lock:
            if self._closed:
                raise EngineClosed()
            if self._session is None:
                config = with_base_instructions(SessionConfig(
                    max_depth=self._settings.max_depth,
                    max_children=self._settings.max_children,
                    max_queued=self._settings.max_queued,
                    env_policy=self._settings.env_policy,
                    hooks=hooks_from_settings(self._settings.command_hooks)))
                session = await self._engine.create_session(config, source="mcp")
                self._session = session
            return self._session

    def run_beside(self, work: Coroutine[Any, Any, None]) -> None:
        """`work` runs while the connection lives, ended when it closes; only the first one
        given (later ones are dropped unstarted)."""
        if self._beside is not None or self._closed:
            work.close()
            return
        self._beside = asyncio.get_running_loop().create_task(
            work, name="subsessions-mcp-connection")

    async def close(self) -> None:
        """The client went away: end its tasks, abort its children, forget its session."""
        async with self._lock:  # a session being made now is made, then destroyed here
            self._closed = True
            session, self._session = self._session, None
        if self._beside is not None:
            self._beside.cancel()
            await asyncio.wait((self._beside,))
            if not self._beside.cancelled() and self._beside.exception() is not None:
                log.error("MCP connection work failed", exc_info=self._beside.exception())
        await self.tasks.close()
        if session is None:
            return
        running = len(session.subsessions.running())
        log.info("MCP client of session %s gone; aborting %d running sub-session(s)",
                 session.session_id, running)
        # UnknownSession: the engine closed first and has already aborted everything
        with contextlib.suppress(UnknownSession):
            await self._engine.destroy_session(session.session_id)


def own_session(client: ClientConnection, session_id: object) -> Conversation:
    """The connection's parent session or one of its descendants, by its full id; nothing
    else in the home is reachable (`access`: another client's id is `unknown session`)."""
    parent = client.session_or_none
    tree: dict[str, Conversation] = {}
    if parent is not None:
        tree = {s.session_id: s for s in (parent, *parent.subsessions.tree())}
    return tree[access.named(session_id, tree)]
