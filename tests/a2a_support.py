"""Helpers for the A2A tests: `subsessions a2a` as a subprocess on loopback, the official
`a2a-sdk` client that drives it, and a fake model that answers by the prompt."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, text
from openai_support import ByPrompt, cli_env, tool_outputs

pytest.importorskip("a2a", reason="pip install 'subsessions[a2a]'")

# the SDK's names the tests use, from here: a test module imports this one first, so
# it is skipped, not broken, where the [a2a] extra is absent
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from subsessions.rollouts import find_rollout, read_rollout
from subsessions.testing import plain_ending

__all__ = ["CancelTaskRequest", "DeleteTaskPushNotificationConfigRequest",
           "GetTaskPushNotificationConfigRequest", "GetTaskRequest",
           "ListTaskPushNotificationConfigsRequest", "ListTasksRequest", "SubscribeToTaskRequest",
           "TaskNotFoundError", "TaskPushNotificationConfig", "get_artifact_text"]

TIMEOUT = 30.0
QUESTION = "which colour?"


class Model(ByPrompt):
    """The fake model's script, by prompt: `fan out` spawns a child (`child work`) and waits
    for it (`fan out X`: `child work X`); `ask` asks the user; a prompt with a gate set up
    waits for it; anything else is echoed. Every prompt's request sets its arrival event."""

    def reply(self, prompt: str, request: Recorded) -> Reply:
        outs = tool_outputs(request)
        if prompt.startswith("fan out"):  # `fan out X`: the child's prompt is `child work X`
            if not outs:
                child_prompt = "child work" + prompt.removeprefix("fan out")
                return calls(call("create_session", {"session_type": "default",
                                                     "prompt": child_prompt, "budget": None}))
            if len(outs) == 1:
                child = json.loads(outs[0])["session_id"]
                return calls(call("wait_session", {"session_id": child, "timeout_ms": 30_000}))
            return text("parent saw: " + json.loads(outs[1])["result"])
        if prompt == "ask":
            if not outs:
                return calls(call("ask_user", {"question": QUESTION}))
            return text(f"colour is {outs[-1]}")
        users = sum(1 for m in request.body.get("messages", []) if m.get("role") == "user")
        return text(f"{prompt}: answered ({users} user messages seen)")


def server_args(home: Path, fake: FakeOpenAI, *extra: str) -> list[str]:
    return ["-m", "subsessions", "a2a", "--home", str(home), "--base-url", fake.base_url,
            "--wire-api", "chat", "--model", "m", *extra]


class Served:
    """`subsessions a2a` running: its URL and process."""

    def __init__(self, url: str, proc: asyncio.subprocess.Process) -> None:
        self.url, self.proc = url, proc

    async def stop(self) -> tuple[int, str]:
        """SIGTERM; its exit code and what it wrote on stderr after the first line."""
        if self.proc.returncode is None:
            self.proc.terminate()
        assert self.proc.stderr is not None
        err = await asyncio.wait_for(self.proc.stderr.read(), TIMEOUT)
        code = await asyncio.wait_for(self.proc.wait(), TIMEOUT)
        return code, err.decode()


@asynccontextmanager
async def a2a_server(home: Path, fake: FakeOpenAI, cwd: Path, *extra: str,
                     env: dict[str, str] | None = None) -> AsyncIterator[Served]:
    """`subsessions a2a --http 127.0.0.1:0 EXTRA` as a subprocess, once it listens."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *server_args(home, fake, "--http", "127.0.0.1:0", *extra),
        cwd=cwd, env={**cli_env(), **(env or {})}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), TIMEOUT)).decode()
        found = re.search(r"serving A2A at (http://\S+/) ", line)
        assert found, line + (await proc.stderr.read()).decode()
        yield Served(found[1], proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def a2a_client(url: str, token: str | None = None, *,
                     streaming: bool = True) -> AsyncIterator[Client]:
    """The official client, from the agent card; `token` as its bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=TIMEOUT) as http:
        client = await create_client(url, ClientConfig(streaming=streaming, httpx_client=http))
        try:
            yield client
        finally:
            await client.close()


def message(prompt: str, *, context_id: str | None = None, task_id: str | None = None,
            skill: str | None = None) -> SendMessageRequest:
    msg = new_text_message(prompt, context_id=context_id, task_id=task_id, role=Role.ROLE_USER)
    if skill is not None:
        msg.metadata.update({"skill": skill})
    return SendMessageRequest(message=msg)


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Every event of one `message/send` (one: the task) or `message/stream`."""
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in client.send_message(request)]


def state(name: str) -> int:
    return TaskState.Value("TASK_STATE_" + name.upper().replace("-", "_"))


def final(events: list[StreamResponse]) -> tuple[int, str, str, str]:
    """The last state, its message's text, and the task's and context's ids."""
    last = events[-1]
    if last.HasField("task"):
        status, task_id, context_id = last.task.status, last.task.id, last.task.context_id
    else:
        update = last.status_update
        status, task_id, context_id = update.status, update.task_id, update.context_id
    said = get_message_text(status.message) if status.HasField("message") else ""
    return status.state, said, task_id, context_id


def status_texts(events: list[StreamResponse]) -> list[str]:
    return [get_message_text(e.status_update.status.message) for e in events
            if e.HasField("status_update") and e.status_update.status.HasField("message")]


def ending(home: Path, session_id: str) -> dict[str, Any]:
    """The last event of a session's rollout as it is on disk."""
    rollout = read_rollout(find_rollout(home, session_id))
    events = [r["payload"] for r in rollout.records if r.get("type") == "event_msg"]
    return dict(events[-1]) if events else {}


def plain(home: Path, session_id: str) -> dict[str, Any]:
    return plain_ending(ending(home, session_id))


async def eventually_ends(home: Path, session_id: str, kind: str, timeout: float = 10.0) -> None:
    """Wait until the rollout's last event is `kind` (another process writes it)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                if ending(home, session_id).get("type") == kind:
                    return
            except Exception:  # not written yet
                pass
            await asyncio.sleep(0.02)
