"""`subsessions serve` overhead: the Copilot Python SDK against the Python API, same run.

Both sides send the same prompts, one `send_and_wait` after another, to sessions of the
same engine code on the same model: the loopback fake OpenAI server of the tests
(`tests/fake_openai.py`, in this process), which answers every request with one short text.

  baseline  `Engine` in this process: `session.send_and_wait(prompt)`
  subject   `CopilotClient` (github-copilot-sdk) launching `python -m subsessions serve
            --stdio`: `session.send_and_wait(prompt)` over JSON-RPC, events and all

Each side uses a new session every `--per-session` prompts (so histories stay short and
alike). Rounds alternate A B A B after a warm-up; figures are µs per call, min / median /
max over rounds, then the median ratio. Then `--concurrent` sessions at once, each
sending one prompt, through each path (wall time to the last answer). The runtime is a
second process: on a 2-core machine it competes with this one (the SDK's reader threads
and the fake server), which is part of what a host would see.

Run: python bench/serve_roundtrip.py [--n 1000] [--rounds 4] [--per-session 20] [--concurrent 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _wire import ANSWER, alternate, fmt, footer, loopback, median_ratio

from subsessions import Engine, SessionConfig


async def api_side(engine: Engine, prompts: list[str], per_session: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(prompts), per_session):
        session = await engine.create_session(SessionConfig())
        for prompt in prompts[i:i + per_session]:
            if await session.send_and_wait(prompt) != ANSWER:
                raise AssertionError("wrong answer")
        await engine.destroy_session(session.session_id)
    return time.perf_counter() - start


async def sdk_side(client: Any, prompts: list[str], per_session: int) -> float:
    from copilot import PermissionHandler

    start = time.perf_counter()
    for i in range(0, len(prompts), per_session):
        session = await client.create_session(on_permission_request=PermissionHandler.approve_all)
        for prompt in prompts[i:i + per_session]:
            reply = await session.send_and_wait(prompt, timeout=60)
            if reply is None or reply.data.content != ANSWER:
                raise AssertionError(f"wrong answer: {reply!r}")
        await session.disconnect()
    return time.perf_counter() - start


async def api_concurrent(engine: Engine, k: int) -> float:
    start = time.perf_counter()
    sessions = [await engine.create_session(SessionConfig()) for _ in range(k)]
    answers = await asyncio.gather(*(s.send_and_wait(f"job {i}") for i, s in enumerate(sessions)))
    elapsed = time.perf_counter() - start
    assert all(a == ANSWER for a in answers)
    for s in sessions:
        await engine.destroy_session(s.session_id)
    return elapsed


async def sdk_concurrent(client: Any, k: int) -> float:
    from copilot import PermissionHandler

    start = time.perf_counter()
    sessions = await asyncio.gather(*(
        client.create_session(on_permission_request=PermissionHandler.approve_all)
        for _ in range(k)))
    replies = await asyncio.gather(*(s.send_and_wait(f"job {i}", timeout=120)
                                     for i, s in enumerate(sessions)))
    elapsed = time.perf_counter() - start
    assert all(r is not None and r.data.content == ANSWER for r in replies)
    for s in sessions:
        await s.disconnect()
    return elapsed


async def run(args: argparse.Namespace) -> None:
    from copilot import CopilotClient, RuntimeConnection

    scratch = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    per_round = args.n // args.rounds
    async with loopback(scratch) as (fake, engine):
        serve = ["-m", "subsessions", "serve", "--home", str(scratch / "serve"),
                 "--base-url", fake.base_url, "--model", "bench"]
        client = CopilotClient(connection=RuntimeConnection.for_stdio(path=sys.executable,
                                                                      args=serve),
                               log_level="warning")
        await client.start()
        try:
            warm = [f"warm {i}" for i in range(args.per_session)]
            await api_side(engine, warm, args.per_session)
            await sdk_side(client, warm, args.per_session)
            api_times, sdk_times = await alternate(
                fake, args.rounds, per_round,
                lambda prompts: api_side(engine, prompts, args.per_session),
                lambda prompts: sdk_side(client, prompts, args.per_session))
            api_k = await api_concurrent(engine, args.concurrent)
            sdk_k = await sdk_concurrent(client, args.concurrent)
        finally:
            await client.stop()
    print(f"send_and_wait, {per_round} per round x {args.rounds} rounds "
          f"({args.n} a side), µs per call: min / median / max")
    print(f"  Python API (in process)     {fmt(api_times, per_round)}")
    print(f"  Copilot SDK via serve       {fmt(sdk_times, per_round)}")
    print(f"  median ratio SDK/API        {median_ratio(sdk_times, api_times):9.2f}")
    print(f"{args.concurrent} concurrent sessions, one prompt each, wall ms: "
          f"API {api_k * 1e3:.0f}, SDK {sdk_k * 1e3:.0f}, ratio {sdk_k / api_k:.2f}")
    footer(scratch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=100)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
