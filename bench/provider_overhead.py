"""Provider overhead: the engine's OpenAI clients against a bare `AsyncOpenAI` loop.

Both sides make the same N streamed requests, one after another, to the loopback fake
server of the tests (`tests/fake_openai.py`, started in this process) and collect the
answer's text:

  baseline  `AsyncOpenAI` create(stream=True) + `async for` over the events, keeping the
            text deltas (and the usage)
  subject   `OpenAIChatModel.respond` / `OpenAIResponsesModel.respond` with a
            `ModelRequest`: item conversion, retry policy, idle-timeout per event,
            tool-call reassembly, usage

Both share one `AsyncOpenAI` (same connection pool). The server runs in the same event
loop, so its cost is in both figures: the ratio is what a user would see against a very
fast local server, the worst case for relative overhead. Rounds alternate A B A B after a
warm-up; figures are µs per request, min / median / max over rounds, and the median
ratio last.

Run: python bench/provider_overhead.py [--n 1000] [--rounds 5] [--pieces 16] [--api chat]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_openai import FakeOpenAI, Recorded, Reply, text

from subsessions.models.base import ModelRequest
from subsessions.models.openai_chat import OpenAIChatModel
from subsessions.models.openai_common import RetryPolicy
from subsessions.models.openai_responses import OpenAIResponsesModel

INSTRUCTIONS = "You are a helpful assistant. Answer in one short paragraph."
PROMPT = "Explain in two sentences what a sub-session is."
ANSWER = (
    "A sub-session is a child conversation that an agent starts from a profile to do one "
    "job in the background. It never shares history with its parent and reports back "
    "with its final message."
)
USER_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}

Runner = Callable[[], Awaitable[str]]


def bare_runner(sdk: openai.AsyncOpenAI, api: str) -> Runner:
    """The least a caller must do: one streamed request, the text collected."""
    if api == "chat":
        messages: Any = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": PROMPT},
        ]

        async def chat() -> str:
            stream = await sdk.chat.completions.create(
                model="m", messages=messages, stream=True,
                stream_options={"include_usage": True},
            )
            parts: list[str] = []
            async with stream:
                async for chunk in stream:
                    for choice in chunk.choices:
                        if choice.delta.content:
                            parts.append(choice.delta.content)
            return "".join(parts)

        return chat

    body: Any = [USER_ITEM]

    async def responses() -> str:
        stream = await sdk.responses.create(
            model="m", input=body, instructions=INSTRUCTIONS, stream=True, store=False
        )
        parts: list[str] = []
        async with stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    parts.append(event.delta)
        return "".join(parts)

    return responses


def engine_runner(sdk: openai.AsyncOpenAI, api: str) -> Runner:
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    client = kind(sdk, provider="fake", retry=RetryPolicy(), stream_idle_timeout=300.0)
    request = ModelRequest(
        session_id="bench", model="m", instructions=INSTRUCTIONS, items=(USER_ITEM,)
    )

    async def respond() -> str:
        response = await client.respond(request)
        return str(response.output[-1]["content"][0]["text"])

    return respond


async def timed(fake: FakeOpenAI, runner: Runner, n: int) -> float:
    """Seconds for `n` requests in a row; every answer is checked."""
    fake.requests.clear()  # the server keeps every request: do not let it grow across rounds
    start = time.perf_counter()
    for _ in range(n):
        got = await runner()
        if got != ANSWER:
            raise AssertionError(f"wrong answer: {got!r}")
    elapsed = time.perf_counter() - start
    if fake.disconnects:
        raise AssertionError(f"{fake.disconnects} requests were abandoned")
    return elapsed


def cpu_of_others() -> float:
    """CPU seconds all processes have used, minus ours (a rough load figure)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:8]]
    ticks = os.sysconf("SC_CLK_TCK")
    ours = sum(os.times()[:2])
    return (sum(fields) - fields[3] - fields[4]) / ticks - ours


def fmt(values: list[float], n: int) -> str:
    per = sorted(v / n * 1e6 for v in values)
    return (f"min {per[0]:7.0f}  median {statistics.median(per):7.0f}  "
            f"max {per[-1]:7.0f} µs/request")


async def run(args: argparse.Namespace) -> None:
    apis = ["chat", "responses"] if args.api == "both" else [args.api]
    print(f"provider_overhead: N={args.n} streamed requests per round, rounds={args.rounds}, "
          f"text in {args.pieces} deltas, apis={','.join(apis)}, gc.freeze=no, "
          f"python {sys.version.split()[0]}, openai {openai.__version__}")
    others_before = cpu_of_others()
    reply = text(ANSWER, pieces=args.pieces)

    def script(request: Recorded) -> Reply:
        return reply

    ratios: dict[str, float] = {}
    async with FakeOpenAI(script) as fake:
        sdk = openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0)
        try:
            for api in apis:
                bare, engine = bare_runner(sdk, api), engine_runner(sdk, api)
                await timed(fake, bare, args.warmup)
                await timed(fake, engine, args.warmup)
                bare_times: list[float] = []
                engine_times: list[float] = []
                for _ in range(args.rounds):
                    bare_times.append(await timed(fake, bare, args.n))
                    engine_times.append(await timed(fake, engine, args.n))
                print(f"[{api}] bare AsyncOpenAI loop:  {fmt(bare_times, args.n)}")
                print(f"[{api}] engine client.respond:  {fmt(engine_times, args.n)}")
                ratios[api] = statistics.median(engine_times) / statistics.median(bare_times)
        finally:
            await sdk.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {peak / 1024:.0f} MiB; other load during the run: "
          f"{cpu_of_others() - others_before:.1f} CPU s")
    for api, ratio in ratios.items():
        print(f"ratio engine/bare [{api}] (median): {ratio:.2f} (target <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=100, help="requests per side first")
    parser.add_argument("--pieces", type=int, default=16, help="text deltas per answer")
    parser.add_argument("--api", choices=("both", "chat", "responses"), default="both")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
