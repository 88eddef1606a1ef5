"""`subsessions mcp` advertises only the changes it tells of, and tells them: a child's rollout
appearing sends `notifications/resources/list_changed` (pushed on the handshake wire, on a
`subscriptions/listen` stream that asks for it on 2026-07-28), after which the new
`rollout://` resource is listed; tools never change and no one resource is followed, so
neither is advertised. Checked with the official `mcp` SDK client on both wires."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")

from fake_openai import FakeOpenAI, fake_openai
from mcp import Client, ClientSession, stdio_client
from mcp.client.subscriptions import ResourcesListChanged
from mcp_support import Children, create, server_params

__all__ = ["fake_openai"]


def _uris(listed: Any) -> set[str]:
    return {str(resource.uri) for resource in listed.resources}


def _advertised(capabilities: Any) -> tuple[Any, Any, Any]:
    return (capabilities.tools.list_changed, capabilities.resources.list_changed,
            capabilities.resources.subscribe)


async def test_a_handshake_client_is_told_when_a_childs_rollout_appears(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Children()
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if getattr(getattr(message, "root", message), "method", "") == (
                "notifications/resources/list_changed"):
            changed.set()

    with tempfile.TemporaryFile("w+") as errlog:
        async with (
            stdio_client(server_params(home, fake_openai, tmp_path), errlog=errlog) as streams,
            ClientSession(*streams, message_handler=on_message) as session,
        ):
            started = await session.initialize()
            assert _advertised(started.capabilities) == (False, True, False)
            assert _uris(await session.list_resources()) == set()
            child = await create(session, "first")
            await asyncio.wait_for(changed.wait(), 30)
            assert f"rollout://{child}" in _uris(await session.list_resources())


async def test_a_listening_client_is_told_when_a_childs_rollout_appears(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """2026-07-28 over stdio (the SDK's `mode="auto"` finds it with `server/discover`)."""
    fake_openai.script = Children()
    async with Client(server_params(home, fake_openai, tmp_path)) as client:
        assert _advertised(client.server_capabilities) == (False, True, False)
        async with client.listen(tools_list_changed=True, resources_list_changed=True) as sub:
            assert sub.honored.resources_list_changed is True
            assert sub.honored.tools_list_changed is None  # they never change
            assert _uris(await client.list_resources()) == set()
            result = await client.call_tool("create_session", {"session_type": "default",
                                                               "prompt": "first"})
            child = (result.structured_content or {})["session_id"]
            async with asyncio.timeout(30):
                event = await anext(aiter(sub))
            assert isinstance(event, ResourcesListChanged)
            assert f"rollout://{child}" in _uris(await client.list_resources())
