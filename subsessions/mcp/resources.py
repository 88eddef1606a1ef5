"""The rollout resources of `subsessions mcp`: each session of a connection (its parent
session and every sub-session under it) is a `rollout://<session id>` resource, read as the
readable transcript of its rollout; only the connection's own sessions are served.

The list grows as sessions start, in the background too (a child's own children), so a
client is told: `notifications/resources/list_changed` whenever the list differs from the
one last told (`list_changes`), pushed over a handshake connection and over a 2026-07-28
`subscriptions/listen` stream that asks for it. Nothing is pushed for one resource's
content (no `subscribe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from subsessions.errors import SubsessionError, error_text
from subsessions.mcp.connection import ClientConnection, own_session
from subsessions.mcp.transcript import render_transcript
from subsessions.rollouts import read_rollout

Context = ServerRequestContext[Any, Any]
log = logging.getLogger("subsessions.mcp")

RESOURCE_NOT_FOUND = -32002
SCHEME = "rollout://"
LIST_INTERVAL = 0.25  # seconds between looks at a connection's sessions, while told of them


def _listed(client: ClientConnection) -> list[types.Resource]:
    """The connection's sessions that have a rollout: none before its first child."""
    session = client.session_or_none
    if session is None or not session.wrote_meta:
        return []
    resources = [types.Resource(
        uri=f"{SCHEME}{session.session_id}", name=f"session {session.session_id}",
        description="This connection's parent session", mime_type="text/plain",
    )]
    for child in session.subsessions.tree():
        resources.append(types.Resource(
            uri=f"{SCHEME}{child.session_id}",
            name=f"{child.agent_name or 'sub-session'} {child.session_id}",
            description=f"A sub-session (depth {child.depth})", mime_type="text/plain",
        ))
    return resources


def listed_ids(client: ClientConnection) -> frozenset[str]:
    """The ids `_listed` would list (without making its entries)."""
    session = client.session_or_none
    if session is None or not session.wrote_meta:
        return frozenset()
    return frozenset((session.session_id, *(c.session_id for c in session.subsessions.tree())))


async def list_changes(client: ClientConnection, told: frozenset[str]) -> AsyncIterator[None]:
    """Once each time the connection's resource list differs from the one before, the first
    time from `told` (`listed_ids`: what the client has seen)."""
    while True:
        await asyncio.sleep(LIST_INTERVAL)
        now = listed_ids(client)
        if now != told:
            told = now
            yield None


async def push_list_changes(client: ClientConnection, session: ServerSession) -> None:
    """`notifications/resources/list_changed` over a handshake connection, until it ends;
    started before its first tool call makes its session (the list is empty until then)."""
    async for _ in list_changes(client, frozenset()):
        try:
            await session.send_resource_list_changed()
        except Exception as exc:  # the client went away: nobody left to tell
            log.debug("resource list change not told: %s", error_text(exc))
            return


class RolloutResources:
    """The resource handlers of the MCP server; `client_for` is the connection a request
    comes on (its sessions are the ones listed and read)."""

    def __init__(self, client_for: Callable[[Context], ClientConnection]) -> None:
        self.client_for = client_for

    async def list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=_listed(self.client_for(ctx)))

    async def list_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template=f"{SCHEME}{{session_id}}", name="rollout",
            description="The readable transcript of a session's rollout (this "
            "connection's own sessions only)", mime_type="text/plain",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith(SCHEME):
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"not a rollout:// URI: {uri}")
        try:
            session = own_session(self.client_for(ctx), uri[len(SCHEME):].rstrip("/"))
            if session.wrote_meta:  # what it has recorded reaches the disk first
                with contextlib.suppress(RuntimeError):  # the writer is closed already
                    await session.flush_durable()
            rollout = read_rollout(session.rollout_path)
        except SubsessionError as exc:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=str(exc), data={"uri": uri}) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="text/plain", text=render_transcript(rollout),
        )])
