"""`subsessions run|batch --control` as real processes against the loopback fake server: the
socket appears while the run works, answers for the run's sessions, cancels a running child
through it, and is removed at exit; one left by a SIGKILL is cleared by `watch` and by the
next engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import TIMEOUT, Held, run, start, tool_outputs
from test_run_cli import WORKER_INSTRUCTIONS, make_home

from subsessions.engine.control import client, paths

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here


@contextlib.asynccontextmanager
async def killed_at_exit(proc: asyncio.subprocess.Process) -> AsyncIterator[None]:
    """Whatever the test asserts, the process does not outlive it."""
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def run_args(fake: FakeOpenAI, home: Path, prompt: str) -> list[str]:
    return ["run", "--control", "--home", str(home), "--base-url", fake.base_url,
            "--model", "m-test", prompt]


async def test_a_sigkilled_runs_socket_is_cleared_by_watch_and_by_the_next_engine(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    home = make_home(tmp_path)
    held = Held(text("finally"))
    fake_openai.script = held
    for clearer in ("watch", "engine"):
        held.arrived.clear()
        killed = await start(*run_args(fake_openai, home, "hold on"), cwd=tmp_path)
        try:
            await asyncio.wait_for(held.arrived.wait(), TIMEOUT)  # in its first model call
            [path] = client.engines(home)
            assert path.name == f"{killed.pid}-1.sock"
            listing = await client.request(path, "sessions.list")
            assert listing["pid"] == killed.pid
            assert [s["status"] for s in listing["sessions"]] == ["running"]
        finally:
            killed.send_signal(signal.SIGKILL)
            await killed.wait()
        assert paths.sockets(home) == [path]  # left behind: nobody listens there
        assert paths.stale(path)
        if clearer == "watch":
            code, out, err = await run("watch", "--once", "--home", str(home), cwd=tmp_path)
            assert code == 0, err
            assert "hold on" in out
        else:
            held.gate.set()  # the next run is answered at once
            code, out, err = await run(*run_args(fake_openai, home, "go"), cwd=tmp_path)
            assert (code, out) == (0, "finally\n"), err
        assert paths.sockets(home) == []  # the stale one cleared, the next run's removed
    assert os.listdir(home / "control") == []


async def test_cancelling_a_runs_own_session_through_its_socket_ends_the_run_in_one_line(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    held = Held(text("never sent"))
    fake_openai.script = held
    home = make_home(tmp_path)
    proc = await start(*run_args(fake_openai, home, "hold on"), cwd=tmp_path)
    async with killed_at_exit(proc):
        await asyncio.wait_for(held.arrived.wait(), TIMEOUT)
        [path] = client.engines(home)
        [root] = (await client.request(path, "sessions.list"))["sessions"]
        cancelled = await client.request(path, "sessions.cancel",
                                         {"sessionId": root["sessionId"]})
        assert cancelled == {"cancelled": True}
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert (proc.returncode, out) == (1, b"")
    assert err.decode() == ("subsessions: the session was cancelled (through the control "
                            "socket)\n")
    assert paths.sockets(home) == []


class OneStuckChild:
    """A fake-server script: the parent spawns one worker ("job A") and waits for it; the
    worker's model call never ends (until a cancel aborts it); the parent then answers
    `the job ended: {the wait's output}`. `called` is set by the worker's call."""

    def __init__(self, worker_marker: str = WORKER_INSTRUCTIONS) -> None:
        self.marker = worker_marker
        self.called, self._never = asyncio.Event(), asyncio.Event()

    async def __call__(self, request: Recorded) -> Reply:
        if self.marker in json.dumps(request.body):
            self.called.set()
            await self._never.wait()
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "job A"}))
        if len(done) == 1:
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 60_000}))
        return text(f"the job ended: {done[-1]}")


async def test_a_running_child_of_a_live_run_is_cancelled_through_its_socket(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    script = OneStuckChild()
    fake_openai.script = script
    home = make_home(tmp_path)
    proc = await start(*run_args(fake_openai, home, "do a job"), cwd=tmp_path)
    async with killed_at_exit(proc):
        await asyncio.wait_for(script.called.wait(), TIMEOUT)
        [path] = client.engines(home)
        listing = await client.request(path, "sessions.list")
        parent, child = listing["sessions"]
        assert (parent["status"], child["status"]) == ("running", "running")
        assert child["parentId"] == parent["sessionId"]
        assert await client.owner(home, child["sessionId"]) == path
        cancelled = await client.request(path, "sessions.cancel",
                                         {"sessionId": child["sessionId"]})
        assert cancelled == {"cancelled": True}
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert out.decode().startswith("the job ended: ")
    assert "cancelled" in out.decode()
    assert paths.sockets(home) == []  # removed at exit


async def test_a_batch_with_control_lists_its_items_and_cancels_one(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    (tmp_path / "towns.csv").write_text("town\nA\nB\n")
    both, release = asyncio.Event(), asyncio.Event()

    async def script(request: Recorded) -> Reply:
        if len(fake_openai.requests) >= 2:
            both.set()
        await release.wait()
        return text("described")

    fake_openai.script = script
    home = tmp_path / "home"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", "batch", "towns.csv", "--profile", "default",
        "--prompt", "Describe {town}", "--out", "out.jsonl", "--control", "--home", str(home),
        "--base-url", fake_openai.base_url, "--model", "m", "--wire-api", "responses",
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with killed_at_exit(proc):
        await asyncio.wait_for(both.wait(), TIMEOUT)
        [path] = client.engines(home)
        parent, *items = (await client.request(path, "sessions.list"))["sessions"]
        assert [i["status"] for i in items] == ["running", "running"]
        assert {i["parentId"] for i in items} == {parent["sessionId"]}
        cancelled = await client.request(path, "sessions.cancel",
                                         {"sessionId": items[0]["sessionId"]})
        assert cancelled == {"cancelled": True}
        release.set()
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 1, err.decode()  # not every item completed
    assert ": 1/2 completed, 0 failed, 1 cancelled;" in out.decode()
    assert paths.sockets(home) == []
