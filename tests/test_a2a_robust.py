"""`subsessions a2a` under bad input and stress: flag mistakes are one line, a malformed or
oversized request is the SDK's error and the server goes on, SIGTERM mid-stream ends every
task `canceled` with its rollouts ended, and 200 tasks from one client stay in bounded
memory."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import httpx
import pytest
from a2a_support import (
    Model,
    a2a_client,
    a2a_server,
    ending,
    final,
    message,
    send,
    state,
    status_texts,
)
from fake_openai import FakeOpenAI, fake_openai
from openai_support import rollouts, run

__all__ = ["fake_openai"]
LOOPBACK_MODEL = ("--base-url", "http://127.0.0.1:9/v1", "--wire-api", "chat")


@pytest.mark.parametrize(("args", "said"), [
    (("--http", "8765"), "'8765' is not HOST:PORT"),
    (("--http", "0.0.0.0:0"), "refusing to listen on 0.0.0.0"),
    (("--http", "127.0.0.1:0", "--keep-open", "-1"), "--keep-open: must be >= 0"),
    (("--http", "127.0.0.1:0", "--auth-token-env", "SUBSESSIONS_TEST_NO_SUCH_VAR"),
     "SUBSESSIONS_TEST_NO_SUCH_VAR is not set"),
])
async def test_a_flag_mistake_is_one_line(
    home: Path, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    code, out, err = await run("a2a", "--home", str(home), *LOOPBACK_MODEL, *args,
                               cwd=tmp_path)
    assert code == 1 and out == ""
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


async def test_no_address_and_a_taken_port_are_told(home: Path, tmp_path: Path) -> None:
    code, _, err = await run("a2a", "--home", str(home), cwd=tmp_path)
    assert code == 2 and "--http" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await run("a2a", "--home", str(home), *LOOPBACK_MODEL, "--http",
                                 f"127.0.0.1:{port}", cwd=tmp_path)
    assert code == 1 and f"cannot listen on 127.0.0.1:{port}" in err, err


async def test_a_malformed_or_oversized_request_is_the_sdks_error_and_the_server_goes_on(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served:
        async with httpx.AsyncClient(timeout=30, headers={"A2A-Version": "1.0"}) as http:
            broken = (await http.post(served.url, content=b"{not json")).json()
            assert broken["error"]["code"] == -32700
            unknown = (await http.post(served.url, json={
                "jsonrpc": "2.0", "id": 2, "method": "NoSuchMethod", "params": {}})).json()
            assert unknown["error"]["code"] == -32601
            bad_params = (await http.post(served.url, json={
                "jsonrpc": "2.0", "id": 3, "method": "SendMessage",
                "params": {"message": "not an object"}})).json()
            assert bad_params["error"]["code"] == -32602
            huge = "x" * (2 << 20)
            oversized = (await http.post(served.url, json={
                "jsonrpc": "2.0", "id": 4, "method": "SendMessage",
                "params": {"message": {"role": "ROLE_USER", "messageId": "m",
                                       "parts": [{"text": huge}]}}})).json()
            assert oversized["error"]["code"] == -32600
            assert "too large" in oversized["error"]["message"]
        async with a2a_client(served.url, streaming=False) as client:
            assert final(await send(client, message("hello")))[0] == state("completed")
        assert served.proc.returncode is None


async def test_sigterm_mid_stream_ends_every_task_canceled_with_its_rollouts_ended(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    model = Model()
    model.gate("hold")
    model.gate("child work")
    fake_openai.script = model
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url) as client:
        asked = final(await send(client, message("ask")))  # a task waiting for its answer
        assert asked[0] == state("input-required")
        seen: dict[str, list[object]] = {"hold": [], "fan out": []}

        async def stream(prompt: str) -> None:
            async for event in client.send_message(message(prompt)):
                seen[prompt].append(event)

        streams = [asyncio.create_task(stream(p)) for p in seen]
        try:
            async with asyncio.timeout(30):
                await model.arrival("hold").wait()
                await model.arrival("child work").wait()
            served.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await asyncio.gather(*streams)
        finally:
            for task in streams:
                task.cancel()
        code, err = await served.stop()
    assert code == 128 + signal.SIGTERM, err
    for events in seen.values():
        assert final(events)[0] == state("canceled")  # type: ignore[arg-type]
    child = status_texts(seen["fan out"])[0].split()[-1]  # type: ignore[arg-type]
    sessions = rollouts(home)
    assert child in sessions and len(sessions) == 4  # three contexts and the child
    for session_id in sessions:
        last = ending(home, session_id)
        assert last["type"] == "turn_aborted", (session_id, last)
    assert ending(home, child)["cancelled_by"] == "parent"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(180)
async def test_200_tasks_from_one_client_stay_within_bounded_memory(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = Model()
    async with a2a_server(home, fake_openai, tmp_path) as served, \
            a2a_client(served.url, streaming=False) as client:
        for _ in range(20):  # warm up: imports, first allocations, caches
            assert final(await send(client, message("hello")))[0] == state("completed")
        before = _rss_kib(served.proc.pid)
        for n in range(200):
            done = final(await send(client, message(f"task {n}")))
            assert done[0] == state("completed")
        grown = _rss_kib(served.proc.pid) - before
    # each task is a new context (a session kept for follow-ups): a few KiB each, not MBs
    assert grown < 200 * 64, f"{grown} KiB for 200 tasks"
