"""Provider overhead: the engine's wire clients against a bare SDK loop, per wire.

Both sides make the same N streamed requests, one after another, to the loopback fake
server of the tests (`tests/fake_openai.py`, `tests/fake_anthropic.py`, started in this
process) and collect the answer's text:

  baseline  `AsyncOpenAI` / `AsyncAnthropic` create(stream=True) + `async for` over the
            events, keeping the text deltas
  subject   `OpenAIChatModel` / `OpenAIResponsesModel` / `AnthropicModel` `.respond` with a
            `ModelRequest`: item conversion (and cache marks), retry policy, idle-timeout
            per event, block and tool-call reassembly, usage

Each pair shares one SDK client (same connection pool). The server runs in the same event
loop, so its cost is in both figures: the ratio is what a user would see against a very
fast local server, the worst case for relative overhead. Rounds alternate A B A B after a
warm-up; figures are µs per request, min / median / max over rounds, and the median
ratio. Last, the engine's own CPU per model call (subject minus baseline, process CPU
time) of each wire, and the Anthropic wire's against the Chat wire's (target <= 1.2).

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

import anthropic
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_anthropic import FakeAnthropic, Turn
from fake_openai import FakeOpenAI, Recorded, Reply, text

from subsessions.models.anthropic_wire import AnthropicModel
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


def bare_anthropic(sdk: anthropic.AsyncAnthropic) -> Runner:
    messages: Any = [{"role": "user", "content": PROMPT}]

    async def messages_api() -> str:
        stream = await sdk.messages.create(model="m", max_tokens=8192, system=INSTRUCTIONS,
                                           messages=messages, stream=True)
        parts: list[str] = []
        async with stream:
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    parts.append(event.delta.text)
        return "".join(parts)

    return messages_api


def engine_anthropic(sdk: anthropic.AsyncAnthropic) -> Runner:
    return _responder(AnthropicModel(sdk, provider="fake", retry=RetryPolicy(),
                                     stream_idle_timeout=300.0))


def engine_runner(sdk: openai.AsyncOpenAI, api: str) -> Runner:
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return _responder(kind(sdk, provider="fake", retry=RetryPolicy(), stream_idle_timeout=300.0))


def _responder(client: Any) -> Runner:
    """One model call of the engine's client, as a session's turn makes it."""
    request = ModelRequest(
        session_id="bench", model="m", instructions=INSTRUCTIONS, items=(USER_ITEM,)
    )

    async def respond() -> str:
        response = await client.respond(request)
        return str(response.output[-1]["content"][0]["text"])

    return respond


async def timed(fake: FakeOpenAI | FakeAnthropic, runner: Runner, n: int,
                cpu: list[float] | None = None) -> float:
    """Seconds for `n` requests in a row (and their process CPU seconds appended to `cpu`);
    every answer is checked."""
    fake.requests.clear()  # the server keeps every request: do not let it grow across rounds
    start, used = time.perf_counter(), time.process_time()
    for _ in range(n):
        got = await runner()
        if got != ANSWER:
            raise AssertionError(f"wrong answer: {got!r}")
    elapsed = time.perf_counter() - start
    if cpu is not None:
        cpu.append(time.process_time() - used)
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
    apis = ["chat", "responses", "anthropic"] if args.api == "all" else args.api.split(",")
    print(f"provider_overhead: N={args.n} streamed requests per round, rounds={args.rounds}, "
          f"text in {args.pieces} deltas, apis={','.join(apis)}, gc.freeze=no, "
          f"python {sys.version.split()[0]}, openai {openai.__version__}, "
          f"anthropic {anthropic.__version__}")
    others_before = cpu_of_others()
    reply = text(ANSWER, pieces=args.pieces)

    def script(request: Recorded) -> Reply:
        return reply

    turn = Turn(text=ANSWER, pieces=args.pieces)
    ratios: dict[str, float] = {}
    own: dict[str, float] = {}  # the engine's own CPU µs per call: subject minus baseline
    own_min: dict[str, float] = {}  # the same from each side's quietest round
    async with FakeOpenAI(script) as fake, FakeAnthropic(lambda request: turn) as claude:
        sdk = openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0)
        asdk = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="bench",
                                        max_retries=0)
        try:
            for api in apis:
                server: FakeOpenAI | FakeAnthropic = claude if api == "anthropic" else fake
                if api == "anthropic":
                    bare, engine = bare_anthropic(asdk), engine_anthropic(asdk)
                else:
                    bare, engine = bare_runner(sdk, api), engine_runner(sdk, api)
                await timed(server, bare, args.warmup)
                await timed(server, engine, args.warmup)
                bare_times: list[float] = []
                engine_times: list[float] = []
                bare_cpu: list[float] = []
                engine_cpu: list[float] = []
                for _ in range(args.rounds):
                    bare_times.append(await timed(server, bare, args.n, bare_cpu))
                    engine_times.append(await timed(server, engine, args.n, engine_cpu))
                print(f"[{api}] bare SDK loop:          {fmt(bare_times, args.n)}")
                print(f"[{api}] engine client.respond:  {fmt(engine_times, args.n)}")
                ratios[api] = statistics.median(engine_times) / statistics.median(bare_times)
                own[api] = (statistics.median(engine_cpu) - statistics.median(bare_cpu)) \
                    / args.n * 1e6
                own_min[api] = (min(engine_cpu) - min(bare_cpu)) / args.n * 1e6
        finally:
            await sdk.close()
            await asdk.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {peak / 1024:.0f} MiB; other load during the run: "
          f"{cpu_of_others() - others_before:.1f} CPU s")
    for api, ratio in ratios.items():
        print(f"ratio engine/bare [{api}] (median): {ratio:.2f} (target <= 1.2); "
              f"engine's own CPU {own[api]:.0f} µs/call (median), {own_min[api]:.0f} (min)")
    if "chat" in own and "anthropic" in own:
        print(f"engine's own CPU per call, anthropic/chat: {own['anthropic'] / own['chat']:.2f} "
              f"(median), {own_min['anthropic'] / own_min['chat']:.2f} (min) (target <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=100, help="requests per side first")
    parser.add_argument("--pieces", type=int, default=16, help="text deltas per answer")
    parser.add_argument("--api", default="all",
                        help="all, or a comma list of chat, responses, anthropic")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
