"""The rollout resources of `subsessions mcp`: each session of a connection (its parent
session and every sub-session under it) is a `rollout://<session id>` resource, read as the
readable transcript of its rollout; only the connection's own sessions are served."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from subsessions.errors import SubsessionError
from subsessions.mcp.connection import ClientConnection, own_session
from subsessions.mcp.transcript import render_transcript
from subsessions.rollouts import read_rollout

Context = ServerRequestContext[Any, Any]

RESOURCE_NOT_FOUND = -32002
SCHEME = "rollout://"


class RolloutResources:
    """The resource handlers of the MCP server; `client_for` is the connection a request
    comes on (its sessions are the ones listed and read)."""

    def __init__(self, client_for: Callable[[Context], ClientConnection]) -> None:
        self.client_for = client_for

    async def list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        session = self.client_for(ctx).session_or_none
        if session is None or not session.wrote_meta:  # no rollout before its first child
            return types.ListResourcesResult(resources=[])
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
        return types.ListResourcesResult(resources=resources)

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
