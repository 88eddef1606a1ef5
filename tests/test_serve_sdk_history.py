"""What the official Copilot Python SDK asks of a runtime beyond a conversation (issue 25,
item 9): `session.get_events()` (`session.getMessages`) after a turn and after a resume, the
`session.lifecycle` notifications its `on_lifecycle` handlers receive, and a `send_and_wait`
whose `timeout` gives up waiting while the runtime's turn goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import Held, tool_outputs
from serve_support import copilot, python_client

__all__ = ["fake_openai"]
TIMEOUT = 20.0


def kinds(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


async def test_get_events_and_lifecycle_through_a_resume(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    def script(request: Recorded) -> Reply:
        if not tool_outputs(request):
            return calls(call("list_profiles", {}))
        return text("kiwi noted")

    fake_openai.script = script
    approve = copilot.PermissionHandler.approve_all
    told: list[tuple[str, str]] = []
    async with python_client(home, fake_openai, tmp_path) as client:
        client.on_lifecycle(lambda event: told.append((event.type, event.session_id)))
        session = await client.create_session(on_permission_request=approve)
        sid = session.session_id
        answer = await session.send_and_wait("remember the word kiwi", timeout=TIMEOUT)
        assert answer is not None and answer.data.content == "kiwi noted"
        events = await session.get_events()
        conversation = ["session.start", "user.message", "tool.execution_start",
                        "tool.execution_complete", "assistant.message"]
        assert kinds(events) == conversation
        assert events[1].data.content == "remember the word kiwi"
        assert events[2].data.tool_name == "list_profiles"
        assert events[3].data.tool_call_id == events[2].data.tool_call_id
        assert events[3].data.success is True
        assert events[4].data.content == "kiwi noted"
        assert [e.parent_id for e in events[1:]] == [e.id for e in events[:-1]]

        await session.disconnect()
        again = await client.resume_session(sid, on_permission_request=approve)
        replayed = await again.get_events()  # the history came back from the rollout
        assert kinds(replayed) == conversation
        assert replayed[1].data.content == "remember the word kiwi"
        assert replayed[4].data.content == "kiwi noted"
        await client.delete_session(sid)
        other = await client.create_session(on_permission_request=approve)
        await other.disconnect()
        await client.ping("sync")  # every notification sent before its answer has arrived
    assert told == [("session.created", sid), ("session.deleted", sid),
                    ("session.created", other.session_id)]


async def test_send_and_wait_timeout_gives_up_waiting_and_the_turn_goes_on(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = held = Held(text("worth the wait"))
    async with python_client(home, fake_openai, tmp_path) as client:
        session = await client.create_session(
            on_permission_request=copilot.PermissionHandler.approve_all)
        idle = asyncio.Event()
        session.on(lambda event: idle.set() if event.type.value == "session.idle" else None)
        try:
            await session.send_and_wait("slow one", timeout=0.2)
        except TimeoutError:
            pass
        else:
            raise AssertionError("send_and_wait returned before the model answered")
        await asyncio.wait_for(held.arrived.wait(), TIMEOUT)
        held.gate.set()  # the turn was left running: it ends now
        await asyncio.wait_for(idle.wait(), TIMEOUT)
        events = await session.get_events()
        assert events[-1].data.content == "worth the wait"
