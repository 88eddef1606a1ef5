"""`subsessions serve --stdio` on a stdin and a stdout that are not pipes (issue 35, item 13):
`/dev/null` or a regular file for input ends the runtime at once (exit 0, as a host closing
stdin does), and a regular file for output gets every answer, framed as on a pipe."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import orjson
import pytest
from fake_openai import FakeOpenAI, fake_openai
from openai_support import cli_env
from serve_raw import TIMEOUT
from serve_support import serve_args

from subsessions.serve.framing import frame, read_frame

__all__ = ["fake_openai"]


@asynccontextmanager
async def serve(home: Path, fake: FakeOpenAI, cwd: Path, stdin: Any, stdout: Any,
                ) -> AsyncIterator[asyncio.subprocess.Process]:
    """The runtime on these stdin and stdout; killed and reaped if a failed test left it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *serve_args(home, fake, "--stdio"), cwd=cwd, env=cli_env(),
        stdin=stdin, stdout=stdout, stderr=asyncio.subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()


def opened(path: Path, mode: str) -> IO[bytes]:
    """`path` (made, empty, if missing) opened for the runtime's stdin or stdout."""
    if not path.exists():
        path.touch()
    return path.open(mode)  # type: ignore[return-value]


@pytest.mark.parametrize(("stdin", "stdout"), [
    ("/dev/null", "pipe"), ("empty file", "pipe"), ("/dev/null", "file"),
])
async def test_input_that_is_not_a_pipe_ends_the_runtime_cleanly(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, stdin: str, stdout: str
) -> None:
    source = Path("/dev/null") if stdin == "/dev/null" else tmp_path / "requests"
    sink = tmp_path / "answers"
    with opened(source, "rb") as reading, opened(sink, "wb") as writing:
        async with serve(home, fake_openai, tmp_path, reading,
                         asyncio.subprocess.PIPE if stdout == "pipe" else writing) as proc:
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert (proc.returncode, err.decode()) == (0, "")
    assert out in (None, b"") and sink.read_bytes() == b""


async def test_output_to_a_regular_file_gets_every_answer(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    sink = tmp_path / "answers"
    big = "x" * (1 << 20)  # past any one buffer on the way
    requests = [("connect", {}), ("ping", {"message": big}), ("ping", {"message": "small"}),
                ("runtime.shutdown", {})]
    with opened(sink, "wb") as writing:
        async with serve(home, fake_openai, tmp_path, asyncio.subprocess.PIPE,
                         writing) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            for n, (method, params) in enumerate(requests):
                proc.stdin.write(frame(orjson.dumps({"jsonrpc": "2.0", "id": n,
                                                     "method": method, "params": params})))
            await proc.stdin.drain()
            code = await asyncio.wait_for(proc.wait(), TIMEOUT)  # stdin open: shutdown ends it
            proc.stdin.close()
            err = (await proc.stderr.read()).decode()
    assert (code, err) == (0, "")
    reader = asyncio.StreamReader()
    reader.feed_data(sink.read_bytes())
    reader.feed_eof()
    answers = []
    while (body := await read_frame(reader)) is not None:
        answers.append(orjson.loads(body))
    assert [a["id"] for a in answers] == [0, 1, 2, 3]
    assert answers[0]["result"]["ok"] is True
    assert answers[1]["result"]["message"] == "pong: " + big
    assert answers[2]["result"]["message"] == "pong: small"


async def test_output_that_cannot_be_written_ends_the_connection_in_one_line(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    with opened(Path("/dev/full"), "wb") as full:  # every write fails with ENOSPC
        async with serve(home, fake_openai, tmp_path, asyncio.subprocess.PIPE, full) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write(frame(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping",
                                                 "params": {}})))
            await proc.stdin.drain()
            code = await asyncio.wait_for(proc.wait(), TIMEOUT)  # stdin still open
            proc.stdin.close()
            err = (await proc.stderr.read()).decode()
    assert code == 0
    assert err == ("subsessions serve: cannot write to stdout (No space left on device): "
                   "the connection ends\n")
