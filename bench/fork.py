"""What a forked child costs beyond an isolated one, per copied item (DESIGN 3.13).

A parent holds a conversation of ITEMS items (user and assistant messages, function calls with
their outputs). N children are spawned from it and run to their ending on a zero-latency
scripted model, in rounds interleaved A B A B after a warm-up:

  isolated  `spawn_child("worker", prompt)`: the child starts from its prompt alone;
  forked    `spawn_child("worker", prompt, fork_turns="all")`: it starts from a copy of the
            parent's conversation, which its rollout records after its session_meta.

Figures: microseconds per child (min / median / max over rounds) for each, the extra cost of a
forked child, and that extra divided by ITEMS: the cost per copied item (selecting it, writing
it to the child's rollout, carrying it in the child's requests). Rollouts go to a fresh
directory each round (--dir; /dev/shm is tmpfs). gc.freeze() is not used.

Run: python bench/fork.py [--n 2000] [--items 40] [--rounds 4] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from subsessions import Engine, SessionConfig
from subsessions.testing import WORKER, Script, first_prompt


def conversation(items: int) -> list[dict[str, Any]]:
    """A parent's history of about `items` items, in turns of four."""
    history: list[dict[str, Any]] = []
    for n in range(max(1, items // 4)):
        history += [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": f"step {n}: look at file_{n}.py"}]},
            {"type": "function_call", "call_id": f"c{n}", "name": "read_file",
             "arguments": f'{{"path": "file_{n}.py"}}'},
            {"type": "function_call_output", "call_id": f"c{n}",
             "output": "def f():\n    return 1\n" * 4},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": f"file_{n}.py looks fine."}]},
        ]
    return history


async def one_round(base: Path, n: int, items: int, forked: bool) -> float:
    script = Script(route=first_prompt)
    async with Engine(base, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                           max_children=n))
        parent.history.extend(conversation(items))
        manager = parent.subsessions
        options = {"fork_turns": "all"} if forked else {}
        started = time.perf_counter()
        ids = [await manager.spawn_child("worker", f"task {k}", **options) for k in range(n)]
        await manager.wait_all(ids, timeout=600)
        return (time.perf_counter() - started) / n * 1e6


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-fork-", dir=args.dir))
    await one_round(root / "warm-a", 50, args.items, False)
    await one_round(root / "warm-b", 50, args.items, True)
    figures: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for forked in (False, True) if r % 2 == 0 else (True, False):
            figures[forked].append(await one_round(root / f"r{r}-{forked}", args.n,
                                                   args.items, forked))
    for forked, name in ((False, "isolated"), (True, "forked")):
        row = figures[forked]
        print(f"{name:9} min {min(row):8.1f}  median {statistics.median(row):8.1f}  "
              f"max {max(row):8.1f}  us/child (N={args.n})")
    extra = statistics.median(figures[True]) - statistics.median(figures[False])
    copied = len(conversation(args.items))
    print(f"a forked child's extra cost: {extra:.1f} us; per copied item: "
          f"{extra / copied:.2f} us ({copied} items copied; medians)")
    print(f"ratio forked / isolated (medians): "
          f"{statistics.median(figures[True]) / statistics.median(figures[False]):.2f}x")
    print(f"(rollouts under {root}; remove it when done)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dir", default=None)
    asyncio.run(main(parser.parse_args()))
