"""Weight of one in-flight child: gc-tracked objects and traced bytes per child.

N children of one parent are held at their model call (a scripted handler awaiting an event),
then the growth since before the first spawn is divided by N: gc-tracked objects
(`len(gc.get_objects())`, after a full collection), bytes traced by tracemalloc, and RSS.
RSS is taken in a first pass with tracemalloc off (its own bookkeeping, tens of bytes for
every live allocation, would count as ours), traced bytes in a second pass. The anchor (bare
asyncio: one task per child awaiting the same event) is measured in the same process first,
in each pass. Targets (issue 26): <= 15 objects and <= 4 KiB per child.
Run: python bench/child_weight.py [--n 10000] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from subsessions import Engine, ScriptedModel, SessionConfig
from subsessions.profiles import load_profiles

PROMPT = "Compute 2 + 2 and answer in one line."


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _snapshot() -> tuple[int, int, int]:
    gc.collect()
    return len(gc.get_objects()), tracemalloc.get_traced_memory()[0], _rss()


def _report(name: str, n: int, before: tuple[int, int, int], after: tuple[int, int, int]) -> None:
    objects, traced, rss = (a - b for a, b in zip(after, before, strict=True))
    if tracemalloc.is_tracing():
        print(f"{name}: {objects / n:.1f} gc objects, {traced / n / 1024:.2f} KiB traced "
              f"per in-flight child (N={n})")
    else:
        print(f"{name}: {rss / n / 1024:.2f} KiB RSS per in-flight child (N={n}, "
              "tracemalloc off)")


async def anchor(n: int) -> None:
    gate = asyncio.Event()
    before = _snapshot()
    tasks = [asyncio.ensure_future(gate.wait()) for _ in range(n)]
    await asyncio.sleep(0.05)
    _report("anchor (a bare task)", n, before, _snapshot())
    gate.set()
    await asyncio.gather(*tasks)


async def subject(folder: Path, n: int) -> None:
    gate, all_waiting = asyncio.Event(), asyncio.Event()
    waiting = [0]

    async def held(request: Any) -> list[str]:
        waiting[0] += 1
        if waiting[0] == n:
            all_waiting.set()
        await gate.wait()
        return ["Answer: 4"]

    model = ScriptedModel(held, keep_requests=False)
    async with Engine(folder, model_client=model, profiles=load_profiles(None)) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        gate.set()  # a warm-up child, not held
        await parent.subsessions.wait_all(
            [await parent.subsessions.spawn_child("mathematician", PROMPT)])
        gate.clear()
        waiting[0] = 0
        before = _snapshot()
        ids = [await parent.subsessions.spawn_child("mathematician", PROMPT) for _ in range(n)]
        await all_waiting.wait()
        # the heads reach the disk: the writer takes its queue in order, so the parent's
        # durable flush resolves once every child's head before it is written (a fixed
        # sleep left the writer's backlog of 10,000 heads in the figures on a slow disk)
        await parent.flush_durable()
        _report("subsessions child", n, before, _snapshot())
        gate.set()
        await parent.subsessions.wait_all(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="weight-", dir=args.dir))
    try:
        asyncio.run(anchor(args.n))
        asyncio.run(subject(base / "rss", args.n))
        tracemalloc.start()
        asyncio.run(anchor(args.n))
        asyncio.run(subject(base / "traced", args.n))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
