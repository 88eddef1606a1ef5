"""`subsessions a2a`'s other task methods through the official `a2a-sdk` client: a second
stream on a running task (`tasks/resubscribe`, `SubscribeToTask`), push-notification
configs (set, get, list, delete, and a push delivered to a loopback webhook), a skill that
runs a profile top-level; and the one line a missing extra gives."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from a2a_support import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Model,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    a2a_client,
    a2a_server,
    final,
    message,
    send,
    state,
)
from aiohttp import web
from fake_openai import FakeOpenAI, fake_openai
from openai_support import cli_env, rollouts

from subsessions.rollouts import find_rollout, read_rollout

__all__ = ["fake_openai"]


async def test_a_second_stream_follows_a_running_task_to_its_end(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    model = Model()
    gate = model.gate("hold")
    fake_openai.script = model
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url) as first, a2a_client(served.url) as second:
        events: list[Any] = []
        named = asyncio.Event()

        async def stream() -> None:
            async for event in first.send_message(message("hold")):
                events.append(event)
                named.set()

        streaming = asyncio.create_task(stream())
        try:
            async with asyncio.timeout(30):
                await named.wait()
                await model.arrival("hold").wait()
            task_id = events[0].task.id
            again: list[Any] = []
            async with asyncio.timeout(30):
                async for event in second.subscribe(SubscribeToTaskRequest(id=task_id)):
                    again.append(event)
                    if len(again) == 1:
                        assert event.HasField("task")  # it starts from the task as it is
                        gate.set()
                await streaming
        finally:
            gate.set()
            streaming.cancel()
    assert final(again)[0] == final(events)[0] == state("completed")
    assert final(again)[1] == "hold: answered (1 user messages seen)"


async def test_push_notification_configs_and_a_push_to_a_loopback_webhook(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    model = Model()
    gate = model.gate("hold")
    fake_openai.script = model
    pushed: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        pushed.append({"token": request.headers.get("X-A2A-Notification-Token"), **body})
        if "COMPLETED" in str(body):
            done.set()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with a2a_server(home, fake_openai, tmp_path) as served, \
                a2a_client(served.url, streaming=False) as client:
            request = message("hold")
            request.configuration.return_immediately = True
            started = await send(client, request)
            task_id = started[0].task.id
            config = TaskPushNotificationConfig(
                task_id=task_id, id="c1", url=f"http://127.0.0.1:{port}/hook", token="tk")
            made = await client.create_task_push_notification_config(config)
            assert made.id == "c1" and made.url == config.url
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
            assert got.url == config.url
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
            assert [c.id for c in listed.configs] == ["c1"]
            gate.set()
            async with asyncio.timeout(30):
                await done.wait()
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
            assert list(listed.configs) == []
    finally:
        gate.set()
        await runner.cleanup()
    assert pushed and all(p["token"] == "tk" for p in pushed)


async def test_a_skill_runs_its_profile_top_level(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url, streaming=False) as client:
        _, said, _, context_id = final(await send(client, message("sum", skill="mathematician")))
        unknown = final(await send(client, message("hi", skill="no-such-profile")))
    assert said == "sum: answered (1 user messages seen)"
    instructions = fake_openai.requests[0].body["messages"][0]["content"]
    assert "math" in str(instructions).lower()
    assert unknown[0] == state("failed") and "no-such-profile" in unknown[1]
    meta = read_rollout(find_rollout(home, context_id)).meta
    assert context_id in rollouts(home) and meta["id"] == context_id


async def test_without_the_extra_the_command_says_which_to_install(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['a2a'] = None\n"
            "from subsessions.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, "a2a", "--home", str(tmp_path / "home"), "--base-url",
        "http://127.0.0.1:9/v1", "--wire-api", "chat", "--http", "127.0.0.1:0",
        env=cli_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and out == b""
    assert err.decode().strip() == ("subsessions: `subsessions a2a` needs the A2A SDK (a2a is "
                                    "missing): pip install 'subsessions[a2a]'")


async def test_the_sdks_0_3_names_answer_on_the_same_url(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A 0.3 client's JSON-RPC (no `A2A-Version` header): `message/send`, `tasks/get`,
    `tasks/cancel`, `message/stream`, in 0.3's shapes (`kind`, lowercase states)."""
    fake_openai.script = Model()

    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": method, "method": method, "params": params}

    said = {"kind": "message", "messageId": "m1", "role": "user",
            "parts": [{"kind": "text", "text": "hello"}]}
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            httpx.AsyncClient(timeout=30) as http:
        sent = (await http.post(served.url, json=rpc("message/send", {"message": said}))).json()
        task = sent["result"]
        assert (task["kind"], task["status"]["state"]) == ("task", "completed")
        got = (await http.post(served.url, json=rpc("tasks/get", {"id": task["id"]}))).json()
        assert got["result"]["status"]["state"] == "completed"
        ended = (await http.post(served.url, json=rpc("tasks/cancel", {"id": task["id"]}))).json()
        assert ended["error"]["code"] == -32002  # not cancelable: it has ended
        streamed = await http.post(served.url, json=rpc("message/stream", {"message": {
            **said, "messageId": "m2", "contextId": task["contextId"]}}))
        frames = [json.loads(line[5:]) for line in streamed.text.splitlines()
                  if line.startswith("data:")]
    last = frames[-1]["result"]
    assert (last["kind"], last["status"]["state"], last["final"]) == (
        "status-update", "completed", True)
    assert last["contextId"] == task["contextId"]
