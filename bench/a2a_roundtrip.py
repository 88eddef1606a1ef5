"""`subsessions a2a` overhead: a task through the official `a2a-sdk` client against the same
task through the Python API, same run.

Both sides send the same prompts, one after another, to sessions of the same engine code on
the same model: the loopback fake OpenAI server of the tests (`tests/fake_openai.py`, in this
process), which answers every request with one short text.

  baseline  `Engine` in this process: a new session, `session.send_and_wait(prompt)`
  subject   the `a2a-sdk` client (JSON-RPC over loopback HTTP) to `python -m subsessions a2a`:
            `message/send` of the prompt in a new context (a new session), waiting for the
            completed task (`--stream`: `message/stream`, every status update read)

Rounds alternate A B A B after a warm-up; figures are µs per task, min / median / max over
rounds, then the median ratio and the overhead per task (subject minus baseline). Then
`--concurrent` tasks at once through each path (wall time to the last answer). The server is
a second process: on a 2-core machine it competes with this one (the client and the fake
server), which is part of what a caller would see.

Run: python bench/a2a_roundtrip.py [--n 400] [--rounds 4] [--concurrent 50] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _wire import ANSWER, alternate, fmt, footer, loopback, median_ratio
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_message_text, new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from subsessions import Engine, SessionConfig

COMPLETED = TaskState.TASK_STATE_COMPLETED


async def api_task(engine: Engine, prompt: str) -> None:
    session = await engine.create_session(SessionConfig())
    if await session.send_and_wait(prompt) != ANSWER:
        raise AssertionError("wrong answer")
    await engine.destroy_session(session.session_id)


async def a2a_task(client: Any, prompt: str) -> None:
    request = SendMessageRequest(message=new_text_message(prompt, role=Role.ROLE_USER))
    last: Any = None
    async for event in client.send_message(request):
        last = event
    status = last.task.status if last.HasField("task") else last.status_update.status
    if status.state != COMPLETED or get_message_text(status.message) != ANSWER:
        raise AssertionError(f"wrong answer: {last}")


async def side(task: Any, target: Any, prompts: list[str]) -> float:
    start = time.perf_counter()
    for prompt in prompts:
        await task(target, prompt)
    return time.perf_counter() - start


async def concurrent(task: Any, target: Any, k: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(task(target, f"job {i}") for i in range(k)))
    return time.perf_counter() - start


async def start_server(home: Path, base_url: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", "a2a", "--home", str(home), "--base-url",
        base_url, "--model", "bench", "--http", "127.0.0.1:0",
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
    found = re.search(r"serving A2A at (http://\S+/) ", line)
    if found is None:
        raise RuntimeError(line)
    return proc, found[1]


async def run(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="a2a-bench-"))
    per_round = args.n // args.rounds
    limits = httpx.Limits(max_connections=args.concurrent + 10)
    async with loopback(scratch) as (fake, engine):
        proc, url = await start_server(scratch / "a2a", fake.base_url)
        try:
            async with httpx.AsyncClient(timeout=120, limits=limits) as http:
                client = await create_client(url, ClientConfig(streaming=args.stream,
                                                               httpx_client=http))
                warm = [f"warm {i}" for i in range(20)]
                await side(api_task, engine, warm)
                await side(a2a_task, client, warm)
                api_times, a2a_times = await alternate(
                    fake, args.rounds, per_round,
                    lambda prompts: side(api_task, engine, prompts),
                    lambda prompts: side(a2a_task, client, prompts))
                api_k = await concurrent(api_task, engine, args.concurrent)
                a2a_k = await concurrent(a2a_task, client, args.concurrent)
                await client.close()
        finally:
            proc.terminate()
            await proc.wait()
    over = statistics.median((s - a) / per_round * 1e6
                             for s, a in zip(a2a_times, api_times, strict=True))
    way = "message/stream" if args.stream else "message/send"
    print(f"one task in a new session, {per_round} per round x {args.rounds} rounds "
          f"({args.n} a side), µs per task: min / median / max")
    subject = f"a2a-sdk client via a2a ({way.split('/')[1]})"
    print(f"  {'Python API (in process)':<30}{fmt(api_times, per_round)}")
    print(f"  {subject:<30}{fmt(a2a_times, per_round)}")
    print(f"  {'median ratio A2A/API':<30}{median_ratio(a2a_times, api_times):9.2f}")
    print(f"  {'overhead per task (median)':<30}{over:9.0f} µs")
    print(f"{args.concurrent} concurrent tasks, wall ms: API {api_k * 1e3:.0f}, "
          f"A2A {a2a_k * 1e3:.0f}, ratio {a2a_k / api_k:.2f}")
    footer(scratch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--stream", action="store_true",
                        help="message/stream instead of message/send")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
