"""Fan-out benchmark: N children on a zero-latency scripted model against bare asyncio.

Subject: one parent session spawns N children with `spawn_child` (each a full session
with its own rollout file), then waits for every result.
Baseline (the physical limit): N bare asyncio tasks, each building the same records a
child writes, serialising them with orjson and writing its own file.

Rounds alternate baseline and subject (A B A B ...), each in a fresh directory, after a
warm-up; the figures are per child, min / median / max, and the median ratio last.
Budget mode: the same subject with a budget on every child (turns, tokens and seconds, so
each child's meter counts and its clock is armed) against the subject without, alternated
in the same run (target ratio <= 1.05); `--only-budget` runs that comparison alone.
Run: python bench/fanout.py [--n 10000] [--rounds 3] [--dir /dev/shm]  (see --help)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from subsessions import Budget, Engine, ScriptedModel, SessionConfig
from subsessions.profiles import load_profiles

PROMPT = "Compute 2 + 2 and answer in one line."
ANSWER = "Answer: 4"
PROFILES = load_profiles(None)
# generous: never reached, but every child counts against it and arms its clock
BUDGET = Budget(max_turns=8, max_tokens=1_000_000, max_seconds=3600.0)


def _record(kind: str, payload: dict[str, Any]) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"
    return orjson.dumps({"timestamp": stamp, "type": kind, "payload": payload},
                        option=orjson.OPT_APPEND_NEWLINE)


async def _bare_child(
    folder: Path, index: int, latency: float, gate: asyncio.Event | None = None,
    parent_lines: list[bytes] | None = None,
) -> str:
    """What a child must do at the least: build its records (and the two lines about it in
    its parent's rollout), wait for a model, write a file."""
    if parent_lines is not None:
        parent_lines.append(_record("event_msg", {"type": "background_event",
                                                  "message": f"spawned child {index}"}))
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}
    reply = {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": ANSWER}]}
    head = b"".join([
        _record("session_meta", {"id": str(index), "cwd": str(folder), "source": "exec",
                                 "model": "scripted", "instructions": ""}),
        _record("turn_context", {"cwd": str(folder), "model": "scripted"}),
        _record("event_msg", {"type": "task_started"}),
        _record("response_item", user),
        _record("event_msg", {"type": "user_message", "message": PROMPT}),
    ])  # joined before waiting: orjson's outputs carry spare capacity
    if gate is not None:
        await gate.wait()
    else:
        await asyncio.sleep(latency)
    tail = [
        _record("event_msg", {"type": "token_count", "info": {}}),
        _record("response_item", reply),
        _record("event_msg", {"type": "agent_message", "message": ANSWER}),
        _record("event_msg", {"type": "task_complete", "last_agent_message": ANSWER}),
    ]
    fd = os.open(folder / f"rollout-{index}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                 0o600)
    try:
        os.write(fd, head + b"".join(tail))
    finally:
        os.close(fd)
    if parent_lines is not None:
        parent_lines.append(_record("event_msg", {"type": "background_event",
                                                  "message": f"child {index} completed"}))
    return ANSWER


async def baseline(folder: Path, n: int, latency: float) -> tuple[float, list[float]]:
    os.makedirs(folder)
    parent_lines: list[bytes] = []
    start = time.perf_counter()
    results = await asyncio.gather(
        *(_bare_child(folder, i, latency, None, parent_lines) for i in range(n))
    )
    fd = os.open(folder / "rollout-parent.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, b"".join(parent_lines))
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed, []


async def subject(
    folder: Path, n: int, latency: float, budget: Budget | None = None
) -> tuple[float, list[float]]:
    model = ScriptedModel(lambda request: [ANSWER], latency=latency)
    spawn_times: list[float] = []
    async with Engine(folder, model_client=model, profiles=PROFILES) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        manager = parent.subsessions
        clock = time.perf_counter
        start = clock()
        ids = []
        for _ in range(n):
            before = clock()
            ids.append(await manager.spawn_child("mathematician", PROMPT, budget=budget))
            spawn_times.append(clock() - before)
        results = [await manager.wait_child(cid) for cid in ids]
        elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed, spawn_times


def _cpu_of_others() -> float:
    """CPU seconds all processes have used, minus ours (a rough load figure)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:8]]
    ticks = os.sysconf("SC_CLK_TCK")
    ours = sum(os.times()[:2])
    return (sum(fields) - fields[3] - fields[4]) / ticks - ours


def _fmt(values: list[float], n: int) -> str:
    per = sorted(v / n * 1e6 for v in values)
    return (f"min {per[0]:8.1f}  median {statistics.median(per):8.1f}  "
            f"max {per[-1]:8.1f} µs/child")


async def memory_per_child(base: Path, n: int) -> tuple[float, float]:
    """Bytes Python holds per child while N children wait on their model (tracemalloc)."""
    gate = asyncio.Event()

    async def held(request: Any) -> list[str]:
        await gate.wait()
        return [ANSWER]

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        async with Engine(base / "mem-subject", model_client=ScriptedModel(held),
                          profiles=PROFILES) as engine:
            parent = await engine.create_session(SessionConfig(max_children=n + 1))
            ids = [await parent.subsessions.spawn_child("mathematician", PROMPT)
                   for _ in range(n)]
            await asyncio.sleep(0.05)  # every child reaches its model call
            subject_kib = (tracemalloc.get_traced_memory()[0] - before) / n / 1024
            gate.set()
            for cid in ids:
                await parent.subsessions.wait_child(cid)
        folder = base / "mem-baseline"
        os.makedirs(folder)
        gate = asyncio.Event()
        before = tracemalloc.get_traced_memory()[0]
        tasks = [asyncio.ensure_future(_bare_child(folder, i, 0.0, gate)) for i in range(n)]
        await asyncio.sleep(0.05)
        baseline_kib = (tracemalloc.get_traced_memory()[0] - before) / n / 1024
        gate.set()
        await asyncio.gather(*tasks)
    finally:
        tracemalloc.stop()
    return subject_kib, baseline_kib


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="fanout-", dir=args.dir))
    print(f"fanout: N={args.n}, rounds={args.rounds}, files under {base} "
          f"({'tmpfs' if str(base).startswith('/dev/shm') else 'disk'}), gc.freeze=no, "
          f"python {sys.version.split()[0]}")
    others_before = _cpu_of_others()
    # warm-up: both paths, small
    await baseline(base / "warm-a", 200, 0.0)
    await subject(base / "warm-b", 200, 0.0)
    await subject(base / "warm-c", 200, 0.0, BUDGET)
    if args.only_budget:
        await budget_rounds(base, args)
        print(f"other load during the run: {_cpu_of_others() - others_before:.1f} CPU s")
        return

    base_times: list[float] = []
    subj_times: list[float] = []
    spawns: list[float] = []
    for r in range(args.rounds):
        elapsed, _ = await baseline(base / f"a{r}", args.n, 0.0)
        base_times.append(elapsed)
        elapsed, spawn_times = await subject(base / f"b{r}", args.n, 0.0)
        subj_times.append(elapsed)
        spawns.extend(spawn_times)
    print(f"baseline (bare asyncio + orjson + own file): {_fmt(base_times, args.n)}")
    print(f"subsessions (spawn_child + wait_child):      {_fmt(subj_times, args.n)}")
    print(f"spawn_child on the caller's path: median {statistics.median(spawns) * 1e6:.1f} µs, "
          f"p99 {sorted(spawns)[int(len(spawns) * 0.99)] * 1e6:.1f} µs (target <= 50 µs median)")

    lat_base: list[float] = []
    lat_subj: list[float] = []
    for r in range(args.latency_rounds):  # short phases: more rounds for a stable median
        elapsed, _ = await baseline(base / f"la{r}", args.latency_n, 0.1)
        lat_base.append(elapsed)
        elapsed, _ = await subject(base / f"lb{r}", args.latency_n, 0.1)
        lat_subj.append(elapsed)
    lat_ratio = statistics.median(lat_subj) / statistics.median(lat_base)
    print(f"N={args.latency_n} with 100 ms model latency: baseline median "
          f"{statistics.median(lat_base) * 1e3:.0f} ms, subsessions median "
          f"{statistics.median(lat_subj) * 1e3:.0f} ms, wall ratio {lat_ratio:.2f} "
          f"(target <= 1.3)")

    subject_kib, baseline_kib = await memory_per_child(base, args.n)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"memory (tracemalloc, children waiting on the model): {subject_kib:.1f} KiB per "
          f"child, bare task with its records {baseline_kib:.1f} KiB; peak RSS "
          f"{peak / 1024:.0f} MiB")
    await budget_rounds(base, args)
    print(f"other load during the run: {_cpu_of_others() - others_before:.1f} CPU s")
    ratio = statistics.median(subj_times) / statistics.median(base_times)
    print(f"ratio subsessions/baseline at N={args.n}: {ratio:.2f} (target <= 2.0)")


async def budget_rounds(base: Path, args: argparse.Namespace) -> None:
    """The per-child cost of budget accounting: the subject with a budget on every child
    against the subject without, alternated (which goes first alternates too)."""
    plain: list[float] = []
    budgeted: list[float] = []
    for r in range(args.budget_rounds):
        order = [(plain, None), (budgeted, BUDGET)]
        for times, budget in order if r % 2 == 0 else order[::-1]:
            tag = "q" if budget else "p"
            gc.collect()  # the last round's 10,000 sessions are not collected on this one's time
            times.append((await subject(base / f"{tag}{r}", args.n, 0.0, budget))[0])
    print(f"subsessions, no budget:                      {_fmt(plain, args.n)}")
    print(f"subsessions, a budget on every child:        {_fmt(budgeted, args.n)}")
    paired = statistics.median(b / a for a, b in zip(plain, budgeted, strict=True))
    ratio = statistics.median(budgeted) / statistics.median(plain)
    print(f"ratio budget/no budget at N={args.n}: {ratio:.3f} (median of the rounds' own "
          f"ratios {paired:.3f}; gc.collect() before each run; target <= 1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--latency-n", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-rounds", type=int, default=9)
    parser.add_argument("--budget-rounds", type=int, default=6)
    parser.add_argument("--only-budget", action="store_true",
                        help="only the budget/no-budget comparison")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
