"""MCP Tasks overhead: task-augmented `run_session` over stdio against the Python API.

Both sides run N children one after another, each answered at once by the loopback fake
model of the tests (`tests/fake_openai.py`, started in this process, so its cost is in
both figures):

  baseline  the Python API in this process: `spawn_child` + `wait_child` on one parent
            session of an `Engine` using the same OpenAI chat client kind
  subject   `subsessions mcp` as a subprocess, one stdio connection of the official SDK
            client declaring MCP Tasks: `tools/call run_session` returns a task, then
            `tasks/get` every millisecond until it is terminal, the answer read from it

Both write every rollout (into a fresh directory per round). Rounds alternate A B A B
after a warm-up; figures are µs per child, min / median / max over rounds, and the
median ratio last (the per-call overhead of going through MCP Tasks).

Run: python bench/mcp_tasks.py [--n 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_openai import FakeOpenAI, Recorded, Reply, text
from mcp import Client, StdioServerParameters
from mcp_tasks_support import TERMINAL, Tasks, get, start

from subsessions import Engine, SessionConfig
from subsessions.models.openai_chat import OpenAIChatModel

POLL = 0.001  # seconds between tasks/get


async def api_round(fake: FakeOpenAI, home: Path, n: int) -> float:
    """µs per child through the Python API."""
    model = OpenAIChatModel(openai.AsyncOpenAI(base_url=fake.base_url, api_key="bench",
                                               max_retries=0), provider="bench")
    async with Engine(home, model_client=model, model="m") as engine:
        parent = await engine.create_session(SessionConfig())
        began = time.perf_counter()
        for index in range(n):
            child = await parent.subsessions.spawn_child("default", f"task {index}")
            assert await parent.subsessions.wait_child(child) == "done"
        spent = time.perf_counter() - began
    await model.aclose()
    return spent / n * 1e6


async def mcp_round(fake: FakeOpenAI, home: Path, cwd: Path, n: int) -> float:
    """µs per child through task-augmented run_session on one stdio connection."""
    params = StdioServerParameters(command=sys.executable, cwd=str(cwd), args=[
        "-m", "subsessions", "mcp", "--home", str(home), "--base-url", fake.base_url,
        "--wire-api", "chat", "--model", "m"])
    async with Client(params, extensions=[Tasks()]) as client:
        began = time.perf_counter()
        for index in range(n):
            handle = await start(client, f"task {index}")
            while (task := await get(client, handle.task_id)).status not in TERMINAL:  # noqa: ASYNC110 (polling is the protocol)
                await asyncio.sleep(POLL)
            assert task.status == "completed" and task.result is not None, task
            assert task.result["content"][0]["text"] == "done", task
        return (time.perf_counter() - began) / n * 1e6


def row(name: str, values: list[float]) -> str:
    return (f"{name:<28} min {min(values):9.0f}  median {statistics.median(values):9.0f}  "
            f"max {max(values):9.0f}  µs/child")


async def main(n: int, rounds: int) -> None:
    fake = FakeOpenAI()

    async def answer(request: Recorded) -> Reply:
        return text("done")

    fake.script = answer
    await fake.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-mcp-tasks-") as scratch:
            root = Path(scratch)
            await api_round(fake, root / "warm-api", 20)
            await mcp_round(fake, root / "warm-mcp", root, 20)
            api: list[float] = []
            over_mcp: list[float] = []
            for index in range(rounds):
                api.append(await api_round(fake, root / f"api-{index}", n))
                over_mcp.append(await mcp_round(fake, root / f"mcp-{index}", root, n))
                print(f"round {index + 1}: api {api[-1]:.0f}  mcp tasks {over_mcp[-1]:.0f} "
                      "µs/child", flush=True)
    finally:
        await fake.stop()
    print(row("python API (baseline)", api))
    print(row("MCP Tasks over stdio", over_mcp))
    ratio = statistics.median(over_mcp) / statistics.median(api)
    print(f"ratio (median MCP Tasks / median API): {ratio:.2f}x  (n={n}, rounds={rounds})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="children per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
