"""A Copilot runtime host written by hand, for tests that attack `subsessions serve` at the
wire as an outside client would: raw frames over the runtime's stdio or a loopback socket."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fake_openai import FakeOpenAI
from openai_support import cli_env
from serve_support import serve_args

from subsessions.serve.framing import frame, read_frame

TIMEOUT = 20.0


class Raw:
    """Frames in, frames out; `session.event`s and other notifications kept apart."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any) -> None:
        self.reader, self.writer = reader, writer
        self.events: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []  # every other notification, in order
        self._ids = iter(range(1, 10_000))

    def send(self, body: bytes) -> None:
        self.writer.write(frame(body))

    async def recv(self) -> dict[str, Any]:
        body = await asyncio.wait_for(read_frame(self.reader), TIMEOUT)
        assert body is not None, "the runtime closed the stream"
        return dict(orjson.loads(body))

    async def answer(self, request_id: Any) -> dict[str, Any]:
        while True:
            message = await self.recv()
            if "method" in message:
                self._keep(message)
            elif message.get("id") == request_id:
                return message

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        request_id = next(self._ids)
        self.send(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                "params": params if params is not None else {}}))
        return await self.answer(request_id)

    async def event(self, kind: str) -> dict[str, Any]:
        while not any(e["type"] == kind for e in self.events):
            message = await self.recv()
            if "method" in message:
                self._keep(message)
        return next(e for e in self.events if e["type"] == kind)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()

    def _keep(self, message: dict[str, Any]) -> None:
        if message["method"] == "session.event":
            self.events.append(message["params"]["event"])
        else:
            self.notes.append(message)


async def over_stdio(home: Path, fake: FakeOpenAI, cwd: Path) -> tuple[Any, Raw]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *serve_args(home, fake, "--headless", "--no-auto-update",
                                    "--log-level", "info", "--no-auto-login", "--stdio"),
        cwd=cwd, env=cli_env(), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    return proc, Raw(proc.stdout, proc.stdin)


async def over_tcp(home: Path, fake: FakeOpenAI, cwd: Path, env: dict[str, str] | None = None,
                   log_level: str = "warning", port: tuple[str, ...] = ("--port", "0"),
                   ) -> tuple[Any, int]:
    """`serve --port 0` (or `port`'s flags; stdin closed), and the port it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *serve_args(home, fake, "--headless", *port,
                                    "--log-level", log_level),
        cwd=cwd, env=env or cli_env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)).decode()
    assert line.startswith("listening on port "), line
    return proc, int(line.split()[-1])


async def dial(port: int) -> Raw:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return Raw(reader, writer)


async def end_of(proc: Any, *hosts: Raw) -> tuple[int, str]:
    """Close the hosts' sockets, stdin (stdio), and wait for the runtime's exit."""
    for host in hosts:
        await host.close()
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    return proc.returncode, err.decode()


class Runtimes:
    """The runtimes a test started: each one still running when the test ends (a failed
    test's too) is killed and reaped."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    async def stdio(self, home: Path, fake: FakeOpenAI, cwd: Path) -> tuple[Any, Raw]:
        proc, host = await over_stdio(home, fake, cwd)
        self.started.append(proc)
        return proc, host

    async def tcp(self, home: Path, fake: FakeOpenAI, cwd: Path,
                  env: dict[str, str] | None = None, log_level: str = "warning",
                  port: tuple[str, ...] = ("--port", "0")) -> tuple[Any, int]:
        proc, bound = await over_tcp(home, fake, cwd, env, log_level, port)
        self.started.append(proc)
        return proc, bound

    async def reap(self) -> None:
        for proc in self.started:
            if proc.returncode is None:
                proc.kill()
                await proc.communicate()


@pytest.fixture
async def runtimes() -> AsyncIterator[Runtimes]:
    started = Runtimes()
    try:
        yield started
    finally:
        await started.reap()
