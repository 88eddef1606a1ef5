"""What a host sees when the engine closes under running children."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from subsessions import Engine, Hooks, ModelRequest, ScriptedModel, SessionConfig, SessionEvent


async def test_children_start_visibly_and_their_end_hooks_run_at_close(home: Path) -> None:
    gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    running = asyncio.Event()

    async def model(request: ModelRequest) -> Any:
        running.set()
        return await gate  # never answered: the close cancels it

    ended: list[dict[str, Any]] = []
    events: list[SessionEvent] = []
    hooks = Hooks(on_session_end=ended.append)
    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        parent = await engine.create_session(SessionConfig(hooks=hooks))
        parent.on(events.append)
        child = await parent.subsessions.spawn_child("default", "work", call_id="call_7")
        await running.wait()
    starts = [e for e in events if e.type == "session.start"]
    assert [(e.session_id, e.data["parent_tool_call_id"]) for e in starts] == [(child, "call_7")]
    reasons = {e["session_id"]: e["reason"] for e in ended}
    assert reasons == {child: "abort", parent.session_id: "close"}
