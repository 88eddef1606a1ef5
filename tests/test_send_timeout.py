"""`Session.send_and_wait(timeout=)` gives up waiting, not the task (issue 25, item 9): as
the Copilot SDKs' `send_and_wait` does, the caller gets a `TimeoutError` and the task goes on
to its answer; a caller cancelled instead still cancels the task."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import openai
import pytest
from fake_openai import FakeOpenAI, fake_openai, settle_sdk_generators, text
from openai_support import Held, rollouts

from subsessions import Engine, InvalidArguments, StillRunning
from subsessions.models.openai_responses import OpenAIResponsesModel

__all__ = ["fake_openai"]
TIMEOUT = 20.0


async def test_the_caller_stops_waiting_and_the_task_goes_on(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = held = Held(text("worth the wait"))
    client = OpenAIResponsesModel(openai.AsyncOpenAI(base_url=fake_openai.base_url,
                                                     api_key="t", max_retries=0),
                                  provider="fake")
    try:
        async with Engine(home, model_client=client, model="m", project_dir=tmp_path) as engine:
            session = await engine.create_session()
            for wrong in (0, -1.0, math.nan, math.inf, True, "5"):
                with pytest.raises(InvalidArguments, match="timeout must be a positive"):
                    await session.send_and_wait("never sent", timeout=wrong)  # type: ignore[arg-type]
            idle = asyncio.Event()
            session.on(lambda event: idle.set() if event.type == "session.idle" else None)
            with pytest.raises(TimeoutError) as caught:
                await session.send_and_wait("slow one", timeout=0.05)
            assert isinstance(caught.value, StillRunning)
            assert str(caught.value) == (f"session {session.session_id} is still running "
                                         "after 0.05s; its task goes on")
            await asyncio.wait_for(held.arrived.wait(), TIMEOUT)
            held.gate.set()  # the task was left running: it ends now, with its answer
            await asyncio.wait_for(idle.wait(), TIMEOUT)
            assert await session.send_and_wait("and now?", timeout=TIMEOUT) == "worth the wait"
    finally:
        await client.aclose()
        await settle_sdk_generators()
    records = rollouts(home)[session.session_id]
    completes = [r["payload"] for r in records if r["payload"].get("type") == "task_complete"]
    assert [c["last_agent_message"] for c in completes] == ["worth the wait"] * 2
